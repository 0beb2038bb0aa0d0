package fusefs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

var lowerSpec = spec{
	"a.txt":           "hello",
	"bin/run":         "*#!/bin/sh\n",
	"dir/sub/deep.go": "package deep\n",
	"dir/link":        "->sub/deep.go",
	"empty/":          "",
	"weird\nname\xff": "odd",
}

func TestLowerTreeRead(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, lowerSpec)
	_, mnt := mountT(t, objs, root, nil)
	want := map[string]string{
		"a.txt": "file:hello", "bin/": "dir", "bin/run": "exec:#!/bin/sh\n", "dir/": "dir",
		"dir/sub/": "dir", "dir/sub/deep.go": "file:package deep\n", "dir/link": "symlink:sub/deep.go",
		"empty/": "dir", "weird\nname\xff": "file:odd",
	}
	if d := diffMaps(flattenDir(t, mnt), want); d != "" {
		t.Fatalf("view differs:\n%s", d)
	}
	if got := mustRead(t, filepath.Join(mnt, "dir/link")); got != "package deep\n" {
		t.Fatalf("through symlink: %q", got)
	}
	var st1, st2 syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mnt, "a.txt"), &st1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(mnt, "a.txt"), &st2); err != nil {
		t.Fatal(err)
	}
	if st1.Ino != st2.Ino || st1.Size != 5 {
		t.Fatalf("stat: %+v", st1)
	}
}

func TestCopyUpAndCapture(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, lowerSpec)
	m, mnt := mountT(t, objs, root, nil)
	p := func(s string) string { return filepath.Join(mnt, s) }

	// Append to a lower file: copy-up keeps the content.
	f, err := os.OpenFile(p("a.txt"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" world"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := mustRead(t, p("a.txt")); got != "hello world" {
		t.Fatalf("after append: %q", got)
	}
	mustWrite(t, p("new.txt"), "fresh")
	if err := os.Mkdir(p("nd"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, p("nd/x"), "x")
	if err := os.Rename(p("dir"), p("nd/moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p("empty")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p("bin/run"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("new.txt", p("sl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p("new.txt"), p("hard")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p("weird\nname\xff")); err != nil {
		t.Fatal(err)
	}
	if !m.Dirty() {
		t.Fatal("not dirty")
	}
	id, changed, err := m.Capture()
	if err != nil || !changed {
		t.Fatalf("capture: %v %v", changed, err)
	}
	want := objs.flatten(t, objs.build(t, spec{
		"a.txt": "hello world", "new.txt": "fresh", "hard": "fresh", "sl": "->new.txt",
		"nd/x": "x", "nd/moved/sub/deep.go": "package deep\n", "nd/moved/link": "->sub/deep.go",
		"bin/run": "#!/bin/sh\n",
	}))
	if d := diffMaps(objs.flatten(t, id), want); d != "" {
		t.Fatalf("captured tree differs:\n%s", d)
	}
	if d := diffMaps(flattenDir(t, mnt), want); d != "" {
		t.Fatalf("view differs from capture:\n%s", d)
	}
	// A second capture with no change gives the same root.
	id2, _, err := m.Capture()
	if err != nil || id2 != id {
		t.Fatalf("recapture: %v %v", id2, err)
	}
}

// TestCleanMetadataIsCached: the pinned view lets the kernel cache clean
// entries and attributes, so a second walk of the tree sends no LOOKUP or
// GETATTR to the daemon.
func TestCleanMetadataIsCached(t *testing.T) {
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, lowerSpec), nil)
	statWalk := func() {
		filepath.Walk(mnt, func(string, os.FileInfo, error) error { return nil })
	}
	flattenDir(t, mnt) // reads invalidate cached atimes (fuse_invalidate_atime)
	statWalk()
	l, g := m.daemonLookups.Load(), m.daemonGetattrs.Load()
	statWalk()
	if dl, dg := m.daemonLookups.Load()-l, m.daemonGetattrs.Load()-g; dl != 0 || dg != 0 {
		t.Fatalf("second walk: %d lookups, %d getattrs", dl, dg)
	}
	for _, name := range []string{"missing", "dir/nope"} {
		os.Lstat(filepath.Join(mnt, name))
	}
	l = m.daemonLookups.Load()
	for _, name := range []string{"missing", "dir/nope"} {
		os.Lstat(filepath.Join(mnt, name))
	}
	if dl := m.daemonLookups.Load() - l; dl != 0 {
		t.Fatalf("repeated negative lookups reached the daemon %d times", dl)
	}
}

// batchingObjects is fakeObjects with a Batcher: blobs are written at once
// (Commit does nothing more), trees through PutTrees.
type batchingObjects struct{ *fakeObjects }

type fakeBatch struct{ f *fakeObjects }

func (b batchingObjects) NewBatch() Batch { return fakeBatch{b.fakeObjects} }

func (b batchingObjects) PutTrees(ts []*store.Tree) ([]store.ID, error) {
	ids := make([]store.ID, len(ts))
	for i, t := range ts {
		id, err := b.PutTree(t)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

func (b fakeBatch) WriteBlobFile(path string) (store.ID, int64, error) {
	return b.f.WriteBlobFile(path)
}
func (b fakeBatch) WriteBlobBytes(p []byte) (store.ID, error) { return b.f.WriteBlobBytes(p) }
func (b fakeBatch) Commit() error                             { return nil }
func (b fakeBatch) Abort()                                    {}

// TestCaptureDeferred: a deferred capture hands its trees to the caller
// instead of storing them, and until the caller says they are stored
// (done) the mount keeps no memo of the capture (a memo must never name
// what a crash could lose); a capture made meanwhile gives the same root.
func TestCaptureDeferred(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, lowerSpec)
	m, mnt := mountT(t, objs, root, &mountOpts{objects: batchingObjects{objs}})
	mustWrite(t, filepath.Join(mnt, "dir", "sub", "new.txt"), "new")
	memo := func() (store.ID, store.ID) {
		m.ov.mu.Lock()
		defer m.ov.mu.Unlock()
		c := m.ov.root.children["dir"].children["sub"].children["new.txt"]
		return c.capID, m.ov.root.capTree
	}
	id, changed, trees, done, err := m.CaptureDeferred()
	if err != nil || !changed {
		t.Fatalf("deferred capture: %v %v", changed, err)
	}
	if len(trees) != 3 { // the root, dir, dir/sub
		t.Fatalf("deferred capture returned %d trees, want 3", len(trees))
	}
	if _, err := objs.GetTree(id); err == nil {
		t.Fatal("the deferred capture stored its root")
	}
	if blob, tree := memo(); !blob.IsZero() || !tree.IsZero() {
		t.Fatalf("memos before done: blob %s, root tree %s", blob.Short(), tree.Short())
	}
	id2, _, _, _, err := m.CaptureDeferred()
	if err != nil || id2 != id {
		t.Fatalf("capture before done: %s %v, want %s", id2.Short(), err, id.Short())
	}
	if _, err := (batchingObjects{objs}).PutTrees(trees); err != nil {
		t.Fatal(err)
	}
	done()
	if blob, tree := memo(); blob.IsZero() || tree != id {
		t.Fatalf("memos after done: blob %s, root tree %s (want %s)", blob.Short(), tree.Short(), id.Short())
	}
	want := objs.flatten(t, objs.build(t, spec{
		"a.txt": "hello", "bin/run": "*#!/bin/sh\n", "dir/sub/deep.go": "package deep\n", "dir/sub/new.txt": "new",
		"dir/link": "->sub/deep.go", "empty/": "", "weird\nname\xff": "odd",
	}))
	if d := diffMaps(objs.flatten(t, id), want); d != "" {
		t.Fatalf("deferred capture, once stored:\n%s", d)
	}
}

// TestNamesLongerThanNameMax: a name past 255 bytes is refused with
// ENAMETOOLONG by every call that would create it (a local file system
// refuses it too; captured, it could never be exported), and statfs says
// so; 255 bytes work.
func TestNamesLongerThanNameMax(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, lowerSpec)
	_, mnt := mountT(t, objs, root, nil)
	long := filepath.Join(mnt, strings.Repeat("m", 256))
	ok := filepath.Join(mnt, strings.Repeat("m", 255))
	for what, err := range map[string]error{
		"create":  os.WriteFile(long, nil, 0o644),
		"mkdir":   os.Mkdir(long, 0o755),
		"symlink": os.Symlink("a.txt", long),
		"link":    os.Link(filepath.Join(mnt, "a.txt"), long),
		"rename":  os.Rename(filepath.Join(mnt, "a.txt"), long),
	} {
		if !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("%s of a 256-byte name: %v, want ENAMETOOLONG", what, err)
		}
	}
	if _, err := os.Lstat(long); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Errorf("lstat of a 256-byte name: %v, want ENAMETOOLONG", err)
	}
	if err := os.WriteFile(ok, []byte("x"), 0o644); err != nil {
		t.Fatalf("a 255-byte name: %v", err)
	}
	var sf syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sf); err != nil || sf.Namelen != 255 {
		t.Errorf("statfs namelen %d (%v), want 255", sf.Namelen, err)
	}
}

// TestDotEntriesListed: a directory's listing starts with "." and "..",
// with the directory's and its parent's inode numbers, as on a local file
// system.
func TestDotEntriesListed(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, lowerSpec)
	_, mnt := mountT(t, objs, root, nil)
	list := func(dir string) map[string]uint64 {
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		out := map[string]uint64{}
		buf := make([]byte, 64<<10)
		for {
			n, err := syscall.Getdents(fd, buf)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return out
			}
			for b := buf[:n]; len(b) >= 19; {
				reclen := int(binary.NativeEndian.Uint16(b[16:18]))
				name, _, _ := bytes.Cut(b[19:reclen], []byte{0})
				out[string(name)] = binary.NativeEndian.Uint64(b[0:8])
				b = b[reclen:]
			}
		}
	}
	ino := func(p string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	top, sub := list(mnt), list(filepath.Join(mnt, "dir"))
	if top["."] != ino(mnt) || top[".."] == 0 {
		t.Errorf("root listing: . = %d (want %d), .. = %d", top["."], ino(mnt), top[".."])
	}
	if sub["."] != ino(filepath.Join(mnt, "dir")) || sub[".."] != ino(mnt) {
		t.Errorf("dir listing: . = %d (want %d), .. = %d (want %d)", sub["."], ino(filepath.Join(mnt, "dir")), sub[".."], ino(mnt))
	}
	if _, ok := sub["sub"]; !ok || len(sub) != 4 { // ., .., sub, link
		t.Errorf("dir listing: %v", sub)
	}
}
