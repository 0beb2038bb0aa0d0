package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/store"
)

func openTest(t testing.TB) *Manager {
	t.Helper()
	m, err := Open(t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		probs, err := m.Fsck()
		if err != nil || len(probs) > 0 {
			t.Errorf("fsck: %v %v", err, probs)
		}
		m.Close()
	})
	return m
}

func write(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshot reads a real tree as path -> content ("/" suffix for dirs).
func snapshot(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case fi.IsDir():
			out[rel+"/"] = ""
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "->" + l
		default:
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

// disjointPaths drops the paths that are a prefix directory of another
// (a file cannot also be a directory).
func disjointPaths(files map[string]string) map[string]string {
	clean := map[string]string{}
	for k, v := range files {
		ok := true
		for o := range files {
			if o != k && (strings.HasPrefix(o, k+"/") || strings.HasPrefix(k, o+"/")) {
				ok = false
				break
			}
		}
		if ok {
			clean[k] = v
		}
	}
	return clean
}

func TestImportExportRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := openTest(t)
		src := t.TempDir()
		files := rapid.MapOfN(rapid.StringMatching(`[a-c]{1,2}(/[a-c]{1,2}){0,2}`), rapid.String(), 0, 12).Draw(rt, "files")
		clean := disjointPaths(files)
		write(t, src, clean)
		name := fmt.Sprintf("w%d", rapid.IntRange(0, 1<<30).Draw(rt, "n"))
		gen, _, err := m.Create(context.Background(), name, src)
		if err != nil {
			rt.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "out")
		n, err := m.Export(context.Background(), gen, dst, false)
		if err != nil {
			rt.Fatal(err)
		}
		if n != len(clean) {
			rt.Fatalf("exported %d files, want %d", n, len(clean))
		}
		a, b := snapshot(t, src), snapshot(t, dst)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			rt.Fatalf("round trip differs:\n%v\n%v", a, b)
		}
	})
}

func TestCommitReadsOnlyChangedFiles(t *testing.T) {
	m := openTest(t)
	src := t.TempDir()
	files := map[string]string{}
	for i := 0; i < 200; i++ {
		files[fmt.Sprintf("d%d/f%d", i%10, i)] = fmt.Sprint(i)
	}
	write(t, src, files)
	if _, _, err := m.Create(context.Background(), "w", src); err != nil {
		t.Fatal(err)
	}
	write(t, src, map[string]string{"d1/f1": "changed!", "new": "n"})
	_, st, err := m.Commit(context.Background(), "w", src)
	if err != nil {
		t.Fatal(err)
	}
	if st.Hashed != 2 || st.Files != 201 {
		t.Fatalf("commit hashed %d of %d files; want 2 of 201", st.Hashed, st.Files)
	}
	from, to, err := m.DiffRefs("w", "")
	if err != nil {
		t.Fatal(err)
	}
	if from == to {
		t.Fatal("root workspace diff refs equal")
	}
}

func TestForkIsO1AndIndependent(t *testing.T) {
	m := openTest(t)
	src := t.TempDir()
	write(t, src, map[string]string{"a": "1"})
	g, _, err := m.Create(context.Background(), "main", src)
	if err != nil {
		t.Fatal(err)
	}
	before := countBlobs(t, m)
	if got, err := m.Fork("main", "c", ""); err != nil || got != g {
		t.Fatalf("fork: %v %v", got, err)
	}
	if after := countBlobs(t, m); after != before {
		t.Fatalf("fork wrote %d trees", after-before)
	}
	if _, err := m.Fork("main", "c", ""); err == nil {
		t.Fatal("fork onto an existing name succeeded")
	}
	if _, err := m.Fork("main", "d", g.String()[:10]); err != nil {
		t.Fatal(err)
	}
}

func countBlobs(t testing.TB, m *Manager) int {
	n := 0
	ents, _ := os.ReadDir(filepath.Join(m.Dir(), "objects"))
	for _, e := range ents {
		sub, _ := os.ReadDir(filepath.Join(m.Dir(), "objects", e.Name()))
		n += len(sub)
	}
	return n
}

func TestRebaseReplaysByKey(t *testing.T) {
	m := openTest(t)
	src := t.TempDir()
	write(t, src, map[string]string{"a": "1", "b": "1"})
	if _, _, err := m.Create(context.Background(), "main", src); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Fork("main", "c", ""); err != nil {
		t.Fatal(err)
	}
	c := t.TempDir()
	write(t, c, map[string]string{"a": "child", "b": "1"})
	if _, _, err := m.Commit(context.Background(), "c", c); err != nil {
		t.Fatal(err)
	}
	write(t, src, map[string]string{"b": "parent"})
	if _, _, err := m.Commit(context.Background(), "main", src); err != nil {
		t.Fatal(err)
	}
	r1, err := m.Rebase(context.Background(), "c", RebaseOptions{Key: "ticket-1"})
	if err != nil || r1.Outcome != OutcomeRebased {
		t.Fatalf("rebase: %+v %v", r1, err)
	}
	r2, err := m.Rebase(context.Background(), "c", RebaseOptions{Key: "ticket-1"})
	if err != nil || r2.Outcome != OutcomeRebased || r2.Head != r1.Head {
		t.Fatalf("replay by key: %+v %v (first %+v)", r2, err, r1)
	}
	log, _ := m.Log("c", 0)
	rebases := 0
	for _, e := range log {
		if e.Kind == store.GenRebase {
			rebases++
		}
	}
	if rebases != 1 {
		t.Fatalf("%d rebase entries, want 1", rebases)
	}
}

// benchTree makes n files spread over directories of 100.
func benchTree(b *testing.B, n int) string {
	dir := b.TempDir()
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("d%03d/d%03d", i/10000, (i/100)%100), fmt.Sprintf("f%d", i))
		if i%100 == 0 {
			os.MkdirAll(filepath.Dir(p), 0o755)
		}
		os.WriteFile(p, []byte(fmt.Sprint(i)), 0o644)
	}
	return dir
}

func BenchmarkFork(b *testing.B) {
	for _, n := range []int{100, 100000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			m := openTest(b)
			src := benchTree(b, n)
			if _, _, err := m.Create(context.Background(), "main", src); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := m.Fork("main", fmt.Sprintf("c%d", i), ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCommit10Changes(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			m := openTest(b)
			src := benchTree(b, n)
			if _, _, err := m.Create(context.Background(), "main", src); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := 0; j < 10; j++ {
					os.WriteFile(filepath.Join(src, "d000/d000", fmt.Sprintf("f%d", j)), []byte(fmt.Sprint(i, j)), 0o644)
				}
				if _, _, err := m.Commit(context.Background(), "main", src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkImport(b *testing.B) {
	src := benchTree(b, 10000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := Open(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := m.Create(context.Background(), "main", src); err != nil {
			b.Fatal(err)
		}
		m.Close()
	}
}
