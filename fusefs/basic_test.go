package fusefs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
