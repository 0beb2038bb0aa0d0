package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/store"
)

func ino(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestCaptureIsODirty(t *testing.T) {
	objs := newFakeObjects(t)
	s := spec{}
	for i := 0; i < 50; i++ {
		for j := 0; j < 20; j++ {
			s[fmt.Sprintf("d%02d/sub/f%02d", i, j)] = "x"
		}
	}
	root := objs.build(t, s)
	m, mnt := mountT(t, objs, root, nil)
	mustWrite(t, filepath.Join(mnt, "d07/sub/f03"), "changed")
	before := objs.getTrees.Load()
	id, changed, err := m.Capture()
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	if n := objs.getTrees.Load() - before; n != 0 {
		t.Fatalf("capture loaded %d trees, want 0", n)
	}
	if got := objs.flatten(t, id)["d07/sub/f03"]; got != "file:changed" {
		t.Fatalf("captured %q", got)
	}
	// A renamed large directory is O(1) too.
	if err := os.Rename(filepath.Join(mnt, "d10"), filepath.Join(mnt, "d07/moved")); err != nil {
		t.Fatal(err)
	}
	before = objs.getTrees.Load()
	if _, _, err := m.Capture(); err != nil {
		t.Fatal(err)
	}
	if n := objs.getTrees.Load() - before; n != 0 {
		t.Fatalf("capture after rename loaded %d trees, want 0", n)
	}
}

func TestSwitchView(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"a": "1", "b": "22", "d/c": "333", "gone": "x"})
	m, mnt := mountT(t, objs, root, nil)
	p := func(s string) string { return filepath.Join(mnt, s) }

	// Cache entries and attributes in the kernel.
	var st syscall.Stat_t
	if err := syscall.Stat(p("b"), &st); err != nil || st.Size != 2 {
		t.Fatal(st.Size, err)
	}
	if got := mustRead(t, p("d/c")); got != "333" {
		t.Fatal(got)
	}
	inoA, inoD := ino(t, p("a")), ino(t, p("d"))
	_ = ino(t, p("gone"))
	if _, err := os.Lstat(p("added")); !os.IsNotExist(err) { // cache a negative entry
		t.Fatal(err)
	}

	// Local change, captured, then switched to the captured root: nothing
	// dirty remains and inode numbers stay.
	mustWrite(t, p("a"), "local")
	waitReleased(m) // a file still open for writing stays dirty across a switch
	capID, _, err := m.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SwitchView(capID); err != nil {
		t.Fatal(err)
	}
	if m.Dirty() || m.Root() != capID {
		t.Fatalf("after switch to capture: dirty=%v", m.Dirty())
	}
	if ino(t, p("a")) != inoA || mustRead(t, p("a")) != "local" {
		t.Fatal("a changed identity or content")
	}

	// A write after the capture survives a switch to another root.
	mustWrite(t, p("late"), "after capture")

	// A different root (as if rebased): b grew, gone vanished, d/c changed.
	next := objs.build(t, spec{"a": "local", "b": "22222", "d/c": "new content", "added": "+"})
	if err := m.SwitchView(next); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(p("b"), &st); err != nil || st.Size != 5 {
		t.Fatalf("stale attr after switch: size %d %v", st.Size, err)
	}
	if got := mustRead(t, p("d/c")); got != "new content" {
		t.Fatalf("stale content: %q", got)
	}
	if _, err := os.Lstat(p("gone")); !os.IsNotExist(err) {
		t.Fatalf("gone still there: %v", err)
	}
	if mustRead(t, p("added")) != "+" || mustRead(t, p("late")) != "after capture" {
		t.Fatal("added or late missing")
	}
	if ino(t, p("a")) != inoA || ino(t, p("d")) != inoD {
		t.Fatal("inode numbers changed for surviving paths")
	}
	if !m.Dirty() {
		t.Fatal("late write lost its dirtiness")
	}
	id, _, err := m.Capture()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "file:local", "b": "file:22222", "d/": "dir", "d/c": "file:new content",
		"added": "file:+", "late": "file:after capture"}
	if d := diffMaps(objs.flatten(t, id), want); d != "" {
		t.Fatalf("capture after switch:\n%s", d)
	}
}

// TestSwitchKeepsChangesAfterCapture: names deleted and added after the
// capture survive a switch to a root that also changed that directory.
func TestSwitchKeepsChangesAfterCapture(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"d/keep": "k", "d/del": "x", "d/mod": "1"})
	m, mnt := mountT(t, objs, root, nil)
	p := func(s string) string { return filepath.Join(mnt, s) }
	mustWrite(t, p("d/captured"), "c")
	waitReleased(m)
	if _, _, err := m.Capture(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p("d/del")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, p("d/late"), "l")
	// The "rebased" root: the capture plus a parent's changes.
	rebased := objs.build(t, spec{"d/keep": "k", "d/del": "x", "d/mod": "2", "d/captured": "c", "d/parent": "p"})
	if err := m.SwitchView(rebased); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"d/": "dir", "d/keep": "file:k", "d/mod": "file:2", "d/captured": "file:c",
		"d/parent": "file:p", "d/late": "file:l"}
	if d := diffMaps(flattenDir(t, mnt), want); d != "" {
		t.Fatalf("view after switch:\n%s", d)
	}
	id, _, err := m.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if d := diffMaps(objs.flatten(t, id), want); d != "" {
		t.Fatalf("capture after switch:\n%s", d)
	}
}

// TestRemountOnDifferentRoot: a StateDir replayed on another pinned root
// keeps every overlay change on top of it.
func TestRemountOnDifferentRoot(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"a": "1", "d/b": "2"})
	state := t.TempDir()
	mnt := t.TempDir()
	m, err := MountAt(mnt, Config{Objects: objs, Root: root, StateDir: state, FsName: "fusefs-test"})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(mnt, "d/new"), "n")
	if err := os.Remove(filepath.Join(mnt, "a")); err != nil {
		t.Fatal(err)
	}
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	m.Wait()
	other := objs.build(t, spec{"a": "1", "d/b": "2", "d/parent": "p"})
	_, mnt2 := mountT(t, objs, other, &mountOpts{stateDir: state})
	want := map[string]string{"d/": "dir", "d/b": "file:2", "d/new": "file:n", "d/parent": "file:p"}
	if d := diffMaps(flattenDir(t, mnt2), want); d != "" {
		t.Fatalf("remounted view:\n%s", d)
	}
}

// TestSwitchKeepsRenameOverAfterCapture: a clean file or directory renamed
// over another name after the capture keeps its own content across a
// switch to the captured root.
func TestSwitchKeepsRenameOverAfterCapture(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"x": "X", "y": "Y", "dx/a": "A", "dy/b": "B"})
	m, mnt := mountT(t, objs, root, nil)
	p := func(s string) string { return filepath.Join(mnt, s) }
	id, _, err := m.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p("x"), p("y")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p("dy/b")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rename(p("dx"), p("dy")); err != nil { // os.Rename refuses to replace a directory
		t.Fatal(err)
	}
	if err := m.SwitchView(id); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"y": "file:X", "dy/": "dir", "dy/a": "file:A"}
	if d := diffMaps(flattenDir(t, mnt), want); d != "" {
		t.Fatalf("view after switch:\n%s", d)
	}
	id2, _, err := m.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if d := diffMaps(objs.flatten(t, id2), want); d != "" {
		t.Fatalf("capture after switch:\n%s", d)
	}
}

// TestSwitchInvalidatesCachedListing: directory listings are cached by the
// kernel; a switch that adds or removes names must drop them.
func TestSwitchInvalidatesCachedListing(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"a": "1", "d/x": "2"})
	m, mnt := mountT(t, objs, root, nil)
	names := func(dir string) string {
		ents, err := os.ReadDir(filepath.Join(mnt, dir))
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, e := range ents {
			s = append(s, e.Name())
		}
		return fmt.Sprint(s)
	}
	if got := names(""); got != "[a d]" {
		t.Fatal(got)
	}
	if got := names("d"); got != "[x]" {
		t.Fatal(got)
	}
	if err := m.SwitchView(objs.build(t, spec{"b": "1", "d/x": "2", "d/y": "3"})); err != nil {
		t.Fatal(err)
	}
	if got := names(""); got != "[b d]" {
		t.Fatalf("root listing after switch: %s", got)
	}
	if got := names("d"); got != "[x y]" {
		t.Fatalf("d listing after switch: %s", got)
	}
}

// TestSwitchSameSubtree: a loaded, clean directory whose tree the new view
// names unchanged is not walked (switch.go), yet its own mtime follows the
// new entry, and a directory beside it whose tree changed is updated.
func TestSwitchSameSubtree(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"same/sub/f": "f", "same/g": "g", "other/h": "old"})
	m, mnt := mountT(t, objs, root, nil)
	_ = flattenDir(t, mnt) // load every directory
	next := objs.build(t, spec{"same/sub/f": "f", "same/g": "g", "other/h": "new!"})
	tr, err := objs.GetTree(next)
	if err != nil {
		t.Fatal(err)
	}
	moved := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	var sameID store.ID
	for i := range tr.Entries {
		if tr.Entries[i].Name == "same" {
			tr.Entries[i].Mtime = moved.UnixNano()
			sameID = tr.Entries[i].ID
		}
	}
	if sameID.IsZero() {
		t.Fatal("no entry same")
	}
	next, err = objs.PutTree(tr)
	if err != nil {
		t.Fatal(err)
	}
	if old, _ := objs.GetTree(root); old.Entries[1].Name != "same" || old.Entries[1].ID != sameID {
		t.Fatalf("the test needs same's tree unchanged: %+v", old.Entries)
	}
	if err := m.SwitchView(next); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(mnt, "same"))
	if err != nil {
		t.Fatal(err)
	}
	if !st.ModTime().Equal(moved) {
		t.Fatalf("same's mtime %v, want %v", st.ModTime(), moved)
	}
	if got := mustRead(t, filepath.Join(mnt, "other/h")); got != "new!" {
		t.Fatalf("other/h = %q after the switch", got)
	}
	if got := mustRead(t, filepath.Join(mnt, "same/sub/f")); got != "f" {
		t.Fatalf("same/sub/f = %q after the switch", got)
	}
}
