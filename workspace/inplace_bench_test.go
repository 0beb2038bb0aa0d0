package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// Benchmarks of in-place workspaces (issue #8, docs/benchmarks.md "In-place
// workspaces"). Each iteration writes 10 changed files, spread over 10
// directories, into an in-place workspace's directory of N files. Run:
//
//	go test -run '^$' -bench InPlace -benchtime 20x ./workspace
//
// The store syncs (Options{}), as in production: materialization fsyncs
// what it writes, and its journal is durable.

// inPlaceBenchSizes are the directory sizes: flat ns/op across them is the
// goal (O(changes), not O(DIR)).
var inPlaceBenchSizes = []int{1000, 10000, 100000}

// openInPlaceBench makes a store and an in-place workspace "main" over
// root/files=N, a tree of n files (benchTree's layout). The tree is written
// once per benchmark and size, and shared by the runs the framework makes
// to pick b.N (each with a fresh store): a 100,000-file tree takes far
// longer to write than the measurement.
func openInPlaceBench(b *testing.B, root string, n int) (*Manager, string) {
	b.Helper()
	dir := filepath.Join(root, fmt.Sprintf("files=%d", n))
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		for i := 0; i < n; i++ {
			p := filepath.Join(dir, filepath.FromSlash(benchTreePath(i)))
			if i%100 == 0 {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					b.Fatal(err)
				}
			}
			if err := os.WriteFile(p, []byte(fmt.Sprint(i)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		// The tree's writeback would otherwise run during the timed
		// iterations and slow each of their fsyncs.
		syscall.Sync()
	} else if err != nil {
		b.Fatal(err)
	}
	m, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	if _, err := m.CreateInPlace("main", dir); err != nil {
		b.Fatal(err)
	}
	return m, dir
}

// benchTreePath is file i of a benchTree, relative to its root.
func benchTreePath(i int) string {
	return fmt.Sprintf("d%03d/d%03d/f%d", i/10000, (i/100)%100, i)
}

// tenChangedPaths are 10 files of an n-file benchTree in 10 directories.
func tenChangedPaths(n int) []string {
	ps := make([]string, 10)
	for j := range ps {
		ps[j] = benchTreePath(j * (n / 10))
	}
	return ps
}

// withFiles returns root with the files at paths (slash-separated, their
// directories existing) set to the given contents: only the directories
// on those paths are rewritten, so this is O(changes), like a capture.
func withFiles(st *store.Store, root store.ID, files map[string]string) (store.ID, error) {
	t, err := st.GetTree(root)
	if err != nil {
		return store.ID{}, err
	}
	nt := &store.Tree{Entries: append([]store.Entry(nil), t.Entries...)}
	sub := map[string]map[string]string{}
	for p, c := range files {
		first, rest, nested := strings.Cut(p, "/")
		if !nested {
			id, err := st.WriteBlobBytes([]byte(c))
			if err != nil {
				return store.ID{}, err
			}
			e := store.Entry{Name: first, Kind: store.KindFile, Size: int64(len(c)), ID: id}
			if !setEntry(nt, e) {
				return store.ID{}, fmt.Errorf("no file %s", p)
			}
			continue
		}
		if sub[first] == nil {
			sub[first] = map[string]string{}
		}
		sub[first][rest] = c
	}
	for name, fs := range sub {
		e, ok := nt.Lookup(name)
		if !ok || e.Kind != store.KindDir {
			return store.ID{}, fmt.Errorf("no directory %s", name)
		}
		if e.ID, err = withFiles(st, e.ID, fs); err != nil {
			return store.ID{}, fmt.Errorf("%s/%w", name, err)
		}
		setEntry(nt, e)
	}
	return st.PutTree(nt)
}

// setEntry replaces the entry named e.Name; false if there is none.
func setEntry(t *store.Tree, e store.Entry) bool {
	for i := range t.Entries {
		if t.Entries[i].Name == e.Name {
			e.Mtime = t.Entries[i].Mtime + 1
			t.Entries[i] = e
			return true
		}
	}
	return false
}

// commitTen publishes, on top of ws's head, a generation that changes the
// 10 files to contents tagged with tag, as `commit` would (the replaced
// base content preserved first). It returns the new contents.
func commitTen(b *testing.B, m *Manager, ws string, paths []string, tag string) map[string]string {
	b.Helper()
	w, err := m.Get(ws)
	if err != nil {
		b.Fatal(err)
	}
	root, err := m.rootOf(w.Head)
	if err != nil {
		b.Fatal(err)
	}
	files := map[string]string{}
	for j, p := range paths {
		files[p] = fmt.Sprintf("changed %s %d\n", tag, j)
	}
	nroot, err := withFiles(m.st, root, files)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.ip.preserveReplaced(root, nroot); err != nil {
		b.Fatal(err)
	}
	if _, err := m.publish(w, nroot, nil, store.GenCommit, newOperationID(), nil, nil); err != nil {
		b.Fatal(err)
	}
	return files
}

// checkDir fails unless dir holds files (read natively).
func checkDir(b *testing.B, dir string, files map[string]string) {
	b.Helper()
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(path.Clean(p))))
		if err != nil || string(got) != want {
			b.Fatalf("%s holds %q (%v), want %q", p, got, err, want)
		}
	}
}

// BenchmarkInPlaceLand10 times `land` of a fork with 10 changed files into
// an unmounted in-place workspace: rebase check, the head append, then
// detection of external changes and the materialization of the 10 files
// into DIR (journaled, fsynced). Forking and committing are not timed.
func BenchmarkInPlaceLand10(b *testing.B) {
	root := b.TempDir()
	for _, n := range inPlaceBenchSizes {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			m, dir := openInPlaceBench(b, root, n)
			paths := tenChangedPaths(n)
			run := newOperationID() // DIR is shared by runs: contents differ per run
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				child := fmt.Sprintf("c%d", i)
				if _, err := m.Fork("main", child, ""); err != nil {
					b.Fatal(err)
				}
				files := commitTen(b, m, child, paths, fmt.Sprintf("%s/%d", run, i))
				b.StartTimer()
				res, err := m.Land(context.Background(), child, RebaseOptions{})
				b.StopTimer()
				if err != nil || res.Outcome != OutcomeRebased {
					b.Fatalf("land %s: %v %+v", child, err, res)
				}
				checkDir(b, dir, files)
				// Landed forks would otherwise be rebased by every later land.
				if _, err := m.Remove(child, false); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkInPlaceSync10 times SyncInPlace after the in-place workspace's
// own head moved by 10 changed files: detection of external changes and the
// materialization alone (what `unmount` does after its capture).
func BenchmarkInPlaceSync10(b *testing.B) {
	root := b.TempDir()
	for _, n := range inPlaceBenchSizes {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			m, dir := openInPlaceBench(b, root, n)
			paths := tenChangedPaths(n)
			run := newOperationID() // DIR is shared by runs: contents differ per run
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				files := commitTen(b, m, "main", paths, fmt.Sprintf("%s/%d", run, i))
				b.StartTimer()
				res, err := m.SyncInPlace(context.Background(), "main")
				b.StopTimer()
				if err != nil || res.Outcome != OutcomeCurrent {
					b.Fatalf("sync: %v %+v", err, res)
				}
				checkDir(b, dir, files)
				b.StartTimer()
			}
		})
	}
}
