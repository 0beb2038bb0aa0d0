package gitmerge_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/rebase/gitmerge"
	"github.com/acyclicfs/acyclicfs/store"
)

func newStore(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(t.TempDir(), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// clock gives every commit a distinct, increasing date.
var clock atomic.Int64

func gitEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return append(append(env,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
		"LC_ALL=C",
		// No background gc --auto: it would repack a repository while
		// the test copies it.
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=gc.auto", "GIT_CONFIG_VALUE_0=0",
	), extra...)
}

// git runs git in dir; every run gets the next date, so reflog times and
// commit dates increase.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitErr(dir, args...)
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out
}

func gitErr(dir string, args ...string) (string, error) {
	date := fmt.Sprintf("%d +0000", 1700000000+clock.Add(1))
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv("GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// gitAt is git with a fixed date, for commits that must come out the same
// in two repositories.
func gitAt(t testing.TB, dir string, date int64, args ...string) string {
	t.Helper()
	d := fmt.Sprintf("%d +0000", date)
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv("GIT_AUTHOR_DATE="+d, "GIT_COMMITTER_DATE="+d)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func write(t testing.TB, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newRepo makes a repository with one commit on main.
func newRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "base")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q", "-b", "main")
	write(t, filepath.Join(dir, "a.txt"), "one\ntwo\nthree\n")
	write(t, filepath.Join(dir, "b.txt"), "alpha\nbeta\n")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

// fork copies a repository (cp -a keeps mtimes).
func fork(t testing.TB, src, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	return dst
}

func commitFile(t testing.TB, dir, name, content, msg string) {
	t.Helper()
	write(t, filepath.Join(dir, name), content)
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "--allow-empty", "-m", msg)
}

// importDir stores the directory tree at dir and returns its entry.
func importDir(t testing.TB, s *store.Store, dir string) store.Entry {
	t.Helper()
	e, err := importPath(s, dir)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func importPath(s *store.Store, p string) (store.Entry, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return store.Entry{}, err
	}
	e := store.Entry{Name: filepath.Base(p), Mtime: fi.ModTime().UnixNano()}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return e, err
		}
		e.Kind = store.KindSymlink
		e.ID, err = s.WriteBlobBytes([]byte(target))
		e.Size = int64(len(target))
		return e, err
	case fi.IsDir():
		ents, err := os.ReadDir(p)
		if err != nil {
			return e, err
		}
		tr := &store.Tree{}
		for _, c := range ents {
			ce, err := importPath(s, filepath.Join(p, c.Name()))
			if err != nil {
				return e, err
			}
			tr.Entries = append(tr.Entries, ce)
		}
		tr.Sort()
		e.Kind = store.KindDir
		e.ID, err = s.PutTree(tr)
		return e, err
	}
	e.Kind = store.KindFile
	if fi.Mode()&0o111 != 0 {
		e.Kind = store.KindExec
	}
	e.ID, e.Size, err = s.WriteBlobFile(p)
	return e, err
}

// exportDir writes the tree of e at dst.
func exportDir(t testing.TB, s *store.Store, e store.Entry, dst string) {
	t.Helper()
	if err := exportPath(s, e, dst); err != nil {
		t.Fatal(err)
	}
}

func exportPath(s *store.Store, e store.Entry, dst string) error {
	switch e.Kind {
	case store.KindDir:
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		tr, err := s.GetTree(e.ID)
		if err != nil {
			return err
		}
		for _, c := range tr.Entries {
			if err := exportPath(s, c, filepath.Join(dst, c.Name)); err != nil {
				return err
			}
		}
		return nil
	case store.KindSymlink:
		b, err := s.ReadBlob(e.ID)
		if err != nil {
			return err
		}
		return os.Symlink(string(b), dst)
	}
	b, err := s.ReadBlob(e.ID)
	if err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if e.Kind == store.KindExec {
		mode = 0o755
	}
	return os.WriteFile(dst, b, mode)
}

// root wraps a repository directory's entry as "D" under a root that also
// holds a file, the shape of a workspace holding a repository.
func root(t testing.TB, s *store.Store, repo store.Entry) store.ID {
	t.Helper()
	readme, err := s.WriteBlobBytes([]byte("workspace\n"))
	if err != nil {
		t.Fatal(err)
	}
	repo.Name = "D"
	tr := &store.Tree{Entries: []store.Entry{repo, {Name: "README", Kind: store.KindFile, Size: 10, ID: readme, Mtime: 1}}}
	id, err := s.PutTree(tr)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

type mergeOut struct {
	dir       string // the merged repository, exported
	res       rebase.Result
	conflicts []rebase.Conflict
}

// merge3 imports base, ours and theirs, merges them with the git merger
// and exports the merged repository.
func merge3(t testing.TB, s *store.Store, base, ours, theirs string) mergeOut {
	t.Helper()
	b := root(t, s, importDir(t, s, base))
	o := root(t, s, importDir(t, s, ours))
	th := root(t, s, importDir(t, s, theirs))
	m := gitmerge.New(s)
	m.TempDir = t.TempDir()
	res, err := rebase.Merge3(s, s, b, o, th, rebase.Options{Subtree: m, KeepConflicts: true})
	if err != nil {
		t.Fatalf("Merge3: %v", err)
	}
	rt, err := s.GetTree(res.Tree)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := rt.Lookup("D")
	if !ok {
		t.Fatal("merged root has no D")
	}
	dst := filepath.Join(t.TempDir(), "merged")
	exportDir(t, s, d, dst)
	if left, _ := os.ReadDir(m.TempDir); len(left) != 0 {
		t.Errorf("temp dir not cleaned: %v", left)
	}
	return mergeOut{dir: dst, res: res, conflicts: res.Conflicts}
}

// checkRepo runs the invariants every merge must keep.
func checkRepo(t testing.TB, dir string) {
	t.Helper()
	if out, err := gitErr(dir, "fsck", "--strict", "--no-progress"); err != nil || strings.Contains(out, "error") {
		t.Fatalf("git fsck --strict: %v\n%s", err, out)
	}
	err := filepath.WalkDir(filepath.Join(dir, ".git"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("<<<<<<<")) || bytes.Contains(b, []byte(">>>>>>>")) {
			return fmt.Errorf("conflict marker in %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func revParse(t testing.TB, dir, rev string) string {
	t.Helper()
	return strings.TrimSpace(git(t, dir, "rev-parse", "--verify", "-q", rev))
}

func isAncestor(dir, a, b string) bool {
	_, err := gitErr(dir, "merge-base", "--is-ancestor", a, b)
	return err == nil
}

func execCp(src, dst string) ([]byte, error) {
	return exec.Command("cp", "-a", src, dst).CombinedOutput()
}

// gitIn runs git in git dir d with stdin.
func gitIn(t testing.TB, d, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir=" + d}, args...)...)
	cmd.Env = gitEnv()
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}
