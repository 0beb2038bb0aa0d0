package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// resolveRepo makes a repository of n files with distinct contents and
// returns it with the contents by path.
func resolveRepo(t *testing.T, n int) (string, map[string]string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo := filepath.Join(t.TempDir(), "repo")
	files := map[string]string{}
	for i := range n {
		p := fmt.Sprintf("d%d/f%03d", i%5, i)
		files[p] = fmt.Sprintf("content %d\n", i)
		os.MkdirAll(filepath.Join(repo, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(repo, p), []byte(files[p]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pubGit(t, repo, "init", "-q", "-b", "main")
	pubGit(t, repo, "add", "-A")
	pubGit(t, repo, "commit", "-q", "-m", "files")
	return repo, files
}

// TestResolveGitRefsResumes: a resolution stopped before any chunk, after
// each, or never leaves exactly the references of the chunks it recorded
// resolved; every file reads its content before, between and after; the
// next run resolves exactly the rest; then the repository is not needed.
func TestResolveGitRefsResumes(t *testing.T) {
	repo, files := resolveRepo(t, 200) // chunks of 64, 128, 8
	for stopAfter := range 4 {
		t.Run(fmt.Sprint("stop-after-", stopAfter), func(rt *testing.T) {
			m := openTest(rt)
			ctx := context.Background()
			if _, err := m.CreateFromGit(ctx, "w", repo, ""); err != nil {
				rt.Fatal(err)
			}
			root := m.mustRoot(rt, "w")
			read := func(when string) {
				for p := range files {
					e, err := m.CatEntry("w", store.ID{}, p, SideNone)
					if err != nil {
						rt.Fatal(err)
					}
					if got, err := m.st.ReadBlob(e.ID); err != nil || string(got) != files[p] {
						rt.Fatalf("%s %s: %q %v, want %q", when, p, got, err, files[p])
					}
				}
			}
			read("before")
			chunks := 0
			stop := errors.New("stopped")
			p, err := m.ResolveGitRefs(ctx, root, GitResolveOptions{Streams: 1 + stopAfter%3, Wait: func(context.Context) error {
				if chunks == stopAfter {
					return stop
				}
				chunks++
				return nil
			}})
			want := []int{0, 64, 192, 200}[min(stopAfter, 3)]
			if stopAfter < 3 && !errors.Is(err, stop) || stopAfter == 3 && err != nil || p.Total != 200 || p.Resolved != want {
				rt.Fatalf("first run stopped after %d chunks: %+v %v, want %d resolved", stopAfter, p, err, want)
			}
			if n, err := m.UnresolvedGitRefs(root); err != nil || n != 200-want {
				rt.Fatalf("unresolved after the first run: %d %v, want %d", n, err, 200-want)
			}
			read("between")
			p, err = m.ResolveGitRefs(ctx, root, GitResolveOptions{})
			if err != nil || p.Total != 200-want || p.Resolved != p.Total {
				rt.Fatalf("second run: %+v %v, want %d", p, err, 200-want)
			}
			objs := filepath.Join(repo, ".git", "objects")
			if err := os.Rename(objs, objs+".away"); err != nil {
				rt.Fatal(err)
			}
			defer os.Rename(objs+".away", objs)
			read("after, without the repository's objects")
		})
	}
}

// TestResolveGitRefsLostObject: an object the repository lost is left
// unresolved, the rest of its chunk resolved, and the error names it.
func TestResolveGitRefsLostObject(t *testing.T) {
	repo, _ := resolveRepo(t, 10)
	m := openTest(t)
	ctx := context.Background()
	if _, err := m.CreateFromGit(ctx, "w", repo, ""); err != nil {
		t.Fatal(err)
	}
	oid := strings.TrimSpace(pubGit(t, repo, "rev-parse", "HEAD:d1/f001"))
	if err := os.Remove(filepath.Join(repo, ".git", "objects", oid[:2], oid[2:])); err != nil {
		t.Fatal(err)
	}
	root := m.mustRoot(t, "w")
	p, err := m.ResolveGitRefs(ctx, root, GitResolveOptions{})
	if !errors.Is(err, store.ErrBaseChanged) || !strings.Contains(err.Error(), oid) || p.Resolved != 9 || p.Missing != 1 {
		t.Fatalf("resolution with a lost object: %+v %v", p, err)
	}
	if n, err := m.UnresolvedGitRefs(root); err != nil || n != 1 {
		t.Fatalf("unresolved: %d %v, want 1", n, err)
	}
	if _, err := m.Remove("w", false); err != nil { // fsck at cleanup would report the lost object
		t.Fatal(err)
	}
}

// mustRoot returns ws's head tree.
func (m *Manager) mustRoot(t interface{ Fatal(...any) }, ws string) store.ID {
	w, err := m.Get(ws)
	if err != nil {
		t.Fatal(err)
	}
	root, err := m.RootOf(w.Head)
	if err != nil {
		t.Fatal(err)
	}
	return root
}
