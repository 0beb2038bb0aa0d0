package gitrepo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
}

func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(env(""), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// newRepo makes a repository with files, a symlink, an executable and
// two branches.
func newRepo(t *testing.T) string {
	dir := t.TempDir()
	run(t, dir, "init", "-q", "-b", "main")
	files := map[string]string{"a.txt": "alpha\n", "d/b.go": "package b\n", "d/e/c": "deep\n", "x.sh": "#!/bin/sh\n"}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "x.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "add", "-A")
	run(t, dir, "commit", "-qm", "one")
	run(t, dir, "branch", "side")
	run(t, dir, "tag", "-a", "-m", "v1", "v1")
	return dir
}

func TestResolveAndListTree(t *testing.T) {
	needGit(t)
	dir := newRepo(t)
	ctx := context.Background()
	r, err := Open(ctx, filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if r.GitDir != filepath.Join(dir, ".git") {
		t.Fatalf("GitDir = %s", r.GitDir)
	}
	head := strings.TrimSpace(run(t, dir, "rev-parse", "HEAD"))
	for rev, branch := range map[string]string{"": "refs/heads/main", "side": "refs/heads/side", "refs/heads/main": "refs/heads/main", "v1": "", head: ""} {
		res, err := r.Resolve(ctx, rev)
		if err != nil || res.Commit != head || res.Branch != branch || res.Time == 0 {
			t.Errorf("Resolve(%q) = %+v, %v; want %s on %q", rev, res, err, head, branch)
		}
	}
	for _, bad := range []string{"nope", "-x", "HEAD~5"} {
		if _, err := r.Resolve(ctx, bad); !errors.Is(err, ErrNoRef) {
			t.Errorf("Resolve(%q) = %v, want ErrNoRef", bad, err)
		}
	}
	if _, err := Open(ctx, t.TempDir()); !errors.Is(err, ErrNotRepo) {
		t.Errorf("Open of a plain directory = %v", err)
	}
	es, err := r.ListTree(ctx, head)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var blobs []string
	for _, e := range es {
		got = append(got, e.Path)
		if e.Mode != ModeTree {
			blobs = append(blobs, e.OID)
		}
	}
	if want := "a.txt d d/b.go d/e d/e/c link x.sh"; strings.Join(got, " ") != want {
		t.Fatalf("ListTree = %q, want %q", got, want)
	}
	var contents []string
	err = r.CatBlobs(ctx, blobs, func(i int, rd io.Reader, size int64) error {
		b, err := io.ReadAll(rd)
		if int64(len(b)) != size {
			t.Errorf("blob %d: %d bytes, size %d", i, len(b), size)
		}
		contents = append(contents, string(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alpha\n", "package b\n", "deep\n", "a.txt", "#!/bin/sh\n"}; strings.Join(contents, "|") != strings.Join(want, "|") {
		t.Fatalf("CatBlobs = %q", contents)
	}
	// A reader that stops early does not desynchronise the stream.
	n := 0
	if err := r.CatBlobs(ctx, blobs, func(int, io.Reader, int64) error { n++; return nil }); err != nil || n != len(blobs) {
		t.Fatalf("unread CatBlobs = %d, %v", n, err)
	}
	refs, err := r.Refs(ctx)
	if err != nil || len(refs) != 3 || refs[2].Name != "refs/tags/v1" || refs[2].Peeled != head {
		t.Fatalf("Refs = %+v, %v", refs, err)
	}
}

// An index EncodeIndex wrote from lstat data is one git reads as its own:
// the same entries as the tree, a clean status, every entry
// fsmonitor-valid when the extension is there.
func TestEncodeIndexIsReadByGit(t *testing.T) {
	needGit(t)
	dir := newRepo(t)
	ctx := context.Background()
	r, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(run(t, dir, "rev-parse", "HEAD"))
	es, err := r.ListTree(ctx, head)
	if err != nil {
		t.Fatal(err)
	}
	var idx []IndexEntry
	for _, e := range es {
		if e.Mode == ModeTree {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, e.Path), &st); err != nil {
			t.Fatal(err)
		}
		idx = append(idx, IndexEntry{Path: e.Path, Mode: e.Mode, OID: e.OID, Size: uint32(st.Size), Ino: uint32(st.Ino),
			UID: st.Uid, GID: st.Gid, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()})
	}
	want := run(t, dir, "ls-files", "-s")
	for _, token := range []string{"", "acyclicfs:test-token"} {
		data, err := EncodeIndex(idx, IndexExtensions{FSMonitorToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".git", "index"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := run(t, dir, "ls-files", "-s"); got != want {
			t.Fatalf("token %q: ls-files differs from git's own index:\n%s\nwant\n%s", token, got, want)
		}
		if out := run(t, dir, "-c", "core.fsmonitor=false", "diff-files", "--name-only"); out != "" {
			t.Fatalf("token %q: stat data differs for %q", token, out)
		}
		if token == "" {
			continue
		}
		hook := filepath.Join(t.TempDir(), "hook")
		// The hook says nothing changed since the token.
		if err := os.WriteFile(hook, []byte("#!/bin/sh\nprintf 'acyclicfs:next\\0'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		out := run(t, dir, "-c", "core.fsmonitor="+hook, "ls-files", "-f")
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, "h ") {
				t.Fatalf("entry not fsmonitor-valid: %q in\n%s", l, out)
			}
		}
		if st := run(t, dir, "-c", "core.fsmonitor="+hook, "status", "--porcelain"); st != "" {
			t.Fatalf("status = %q", st)
		}
	}
	if _, err := EncodeIndex([]IndexEntry{{Path: "a", Mode: ModeFile, OID: "zz"}}, IndexExtensions{}); !errors.Is(err, ErrBadIndexEntry) {
		t.Fatalf("bad object name: %v", err)
	}
	if _, err := EncodeIndex([]IndexEntry{{Path: "a", Mode: 0o40000, OID: head}}, IndexExtensions{}); !errors.Is(err, ErrBadIndexEntry) {
		t.Fatalf("tree mode: %v", err)
	}
	if _, err := EncodeIndex([]IndexEntry{{Path: "a", Mode: ModeFile, OID: head}, {Path: "a", Mode: ModeFile, OID: head}}, IndexExtensions{}); !errors.Is(err, ErrBadIndexEntry) {
		t.Fatalf("duplicate path: %v", err)
	}
}

func TestPackedRefs(t *testing.T) {
	got := PackedRefs([]Ref{{Name: "refs/heads/main", OID: "aa"}, {Name: "refs/tags/v1", OID: "bb", Peeled: "aa"}})
	want := "# pack-refs with: peeled fully-peeled sorted \naa refs/heads/main\nbb refs/tags/v1\n^aa\n"
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("PackedRefs = %q", got)
	}
}

func FuzzParseLsTree(f *testing.F) {
	f.Add([]byte("100644 blob 0123456789012345678901234567890123456789 5\ta\x00"))
	f.Add([]byte("040000 tree 0123456789012345678901234567890123456789 -\td\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := parseLsTree(b)
		if err != nil {
			return
		}
		for _, e := range es {
			if len(e.OID) != 40 || e.Size < 0 {
				t.Fatalf("accepted %+v", e)
			}
		}
	})
}

// The cache tree EncodeIndex writes from a commit's trees is byte for byte
// the one git writes at commit (subdirectories in git's order: shorter
// names first), and git status then reads no tree object to compare the
// index with HEAD. Trees that do not cover the entries add no extension.
func TestEncodeIndexCacheTree(t *testing.T) {
	needGit(t)
	dir := newRepo(t)
	for _, p := range []string{"zz/a", "b/c", "ab/d", "d/f/g", "d/e/h/i"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, "add", "-A")
	run(t, dir, "commit", "-qm", "two")
	own, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	at, err := r.Resolve(ctx, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	es, err := r.ListTree(ctx, at.Commit)
	if err != nil {
		t.Fatal(err)
	}
	trees := map[string]string{"": at.Tree}
	var idx []IndexEntry
	for _, e := range es {
		if e.Mode == ModeTree {
			trees[e.Path] = e.OID
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, e.Path), &st); err != nil {
			t.Fatal(err)
		}
		idx = append(idx, IndexEntry{Path: e.Path, Mode: e.Mode, OID: e.OID, Size: uint32(st.Size), Ino: uint32(st.Ino),
			UID: st.Uid, GID: st.Gid, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()})
	}
	data, err := EncodeIndex(idx, IndexExtensions{Trees: trees})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := extension(t, data, "TREE"), extension(t, own, "TREE"); want == nil || !bytes.Equal(got, want) {
		t.Fatalf("TREE extension\n%q\nwant git's\n%q", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, ".git", "index"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command("git", "status", "--porcelain")
	cmd.Dir = dir
	cmd.Env = append(env(""), "GIT_TRACE2_EVENT="+trace)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("git status: %v: %q", err, out)
	}
	tr, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(tr, []byte(`"traverse_trees_count":1,`)) {
		t.Fatalf("git status read tree objects for the index diff: %s", tr)
	}

	delete(trees, "d/e")
	if data, err = EncodeIndex(idx, IndexExtensions{Trees: trees}); err != nil {
		t.Fatal(err)
	} else if ext := extension(t, data, "TREE"); ext != nil {
		t.Fatalf("a directory without its tree: TREE %q", ext)
	}
	trees["d/e"], trees["nothing/here"] = at.Tree, at.Tree
	if data, err = EncodeIndex(idx, IndexExtensions{Trees: trees}); err != nil {
		t.Fatal(err)
	} else if ext := extension(t, data, "TREE"); ext != nil {
		t.Fatalf("a tree without entries: TREE %q", ext)
	}
	delete(trees, "nothing/here")
	trees["d"] = "zz"
	if _, err := EncodeIndex(idx, IndexExtensions{Trees: trees}); !errors.Is(err, ErrBadIndexEntry) {
		t.Fatalf("bad tree object name: %v", err)
	}
}

// extension returns the body of a version 2 index's extension sig (nil
// when it has none).
func extension(t *testing.T, index []byte, sig string) []byte {
	t.Helper()
	n := int(uint32(index[8])<<24 | uint32(index[9])<<16 | uint32(index[10])<<8 | uint32(index[11]))
	off := 12
	for range n {
		name := bytes.IndexByte(index[off+62:], 0)
		off += (62 + name + 8) &^ 7
	}
	for off+8 <= len(index)-20 {
		size := int(uint32(index[off+4])<<24 | uint32(index[off+5])<<16 | uint32(index[off+6])<<8 | uint32(index[off+7]))
		if string(index[off:off+4]) == sig {
			return index[off+8 : off+8+size]
		}
		off += 8 + size
	}
	return nil
}
