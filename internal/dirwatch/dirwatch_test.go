package dirwatch

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// tree makes root/a/b and returns root.
func tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// add watches root/rel under rel through an O_PATH descriptor.
func add(t *testing.T, w *Watcher, root, rel string) uint64 {
	t.Helper()
	fd, err := unix.Open(filepath.Join(root, rel), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	since, err := w.Add(rel, fd)
	if err != nil {
		t.Fatal(err)
	}
	return since
}

func syncW(t *testing.T, w *Watcher) uint64 {
	t.Helper()
	seq, err := w.Sync()
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func newWatcher(t *testing.T, max int) *Watcher {
	t.Helper()
	w, err := New(max)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// TestQuietUntilChanged: each kind of change makes the directory it
// happens in not quiet; only name and own-attribute changes count as
// changes of the directory's own lstat.
func TestQuietUntilChanged(t *testing.T) {
	cases := []struct {
		name   string
		change func(root string) error
		dir    string // where the change shows
		self   bool   // whether it changes that directory's own lstat
	}{
		{"write a file", func(r string) error { return os.WriteFile(filepath.Join(r, "a", "f"), []byte("y"), 0o644) }, "a", false},
		{"chmod a file", func(r string) error { return os.Chmod(filepath.Join(r, "a", "f"), 0o600) }, "a", false},
		{"create a file", func(r string) error { return os.WriteFile(filepath.Join(r, "a", "g"), nil, 0o644) }, "a", true},
		{"remove a file", func(r string) error { return os.Remove(filepath.Join(r, "a", "f")) }, "a", true},
		{"rename in place", func(r string) error { return os.Rename(filepath.Join(r, "a", "f"), filepath.Join(r, "a", "g")) }, "a", true},
		{"chmod the directory", func(r string) error { return os.Chmod(filepath.Join(r, "a"), 0o700) }, "a", true},
		{"hard link in", func(r string) error { return os.Link(filepath.Join(r, "a", "f"), filepath.Join(r, "a", "b", "l")) }, "a/b", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := tree(t)
			w := newWatcher(t, 16)
			for _, rel := range []string{"", "a", "a/b"} {
				add(t, w, root, rel)
			}
			seq := syncW(t, w)
			for _, rel := range []string{"", "a", "a/b"} {
				if !w.Quiet(rel, seq, false) {
					t.Fatalf("%q not quiet before any change", rel)
				}
			}
			if err := c.change(root); err != nil {
				t.Fatal(err)
			}
			syncW(t, w)
			if w.Quiet(c.dir, seq, false) {
				t.Fatalf("%q quiet after the change", c.dir)
			}
			if got := !w.Quiet(c.dir, seq, true); got != c.self {
				t.Fatalf("own lstat of %q changed: %v, want %v", c.dir, got, c.self)
			}
			// The root sees a's attributes in its listing; not what happens
			// inside a.
			if rootSees := c.name == "chmod the directory"; w.Quiet("", seq, false) == rootSees {
				t.Fatalf("root quiet after the change: %v, want %v", !rootSees, !rootSees)
			}
		})
	}
}

// TestQuietSince: a watch added after a point answers from when it was
// added; one older than the point, from the point.
func TestQuietSince(t *testing.T) {
	root := tree(t)
	w := newWatcher(t, 16)
	add(t, w, root, "")
	seq := syncW(t, w)
	if err := os.WriteFile(filepath.Join(root, "g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	syncW(t, w)
	add(t, w, root, "a") // younger than seq
	if w.QuietSince("", seq, true) {
		t.Fatal("the root is quiet since seq after a name was created in it")
	}
	if !w.QuietSince("a", seq, true) || w.Quiet("a", seq, true) {
		t.Fatal("a watch younger than seq: QuietSince must answer from its start, Quiet not at all")
	}
	if err := os.WriteFile(filepath.Join(root, "a", "g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	syncW(t, w)
	if w.QuietSince("a", seq, true) {
		t.Fatal("a is quiet since its watch began after a name was created in it")
	}
	if w.QuietSince("a/b", seq, false) {
		t.Fatal("an unwatched directory is quiet")
	}
}

// TestMovedDirectoryForgotten: a directory renamed away is forgotten with
// everything watched below it (its paths no longer name what is watched).
func TestMovedDirectoryForgotten(t *testing.T) {
	root := tree(t)
	w := newWatcher(t, 16)
	for _, rel := range []string{"", "a", "a/b"} {
		add(t, w, root, rel)
	}
	seq := syncW(t, w)
	if err := os.Rename(filepath.Join(root, "a"), filepath.Join(root, "z")); err != nil {
		t.Fatal(err)
	}
	syncW(t, w)
	for _, rel := range []string{"a", "a/b"} {
		if w.Quiet(rel, seq, false) || w.Quiet(rel, seq, true) {
			t.Fatalf("%q still answered after it moved", rel)
		}
	}
	if dirs, _ := w.Watching(); dirs != 1 {
		t.Fatalf("watching %d directories, want the root only", dirs)
	}
	// A directory made again at the old path starts unwatched, and a
	// watch added now reports from now on.
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	since := add(t, w, root, "a")
	if w.Quiet("a", seq, false) {
		t.Fatal("a new watch answered for a time before it existed")
	}
	if !w.Quiet("a", since, false) {
		t.Fatal("a new watch is not quiet from when it was added")
	}
}

// TestRemovedDirectoryForgotten: removal drops the watch.
func TestRemovedDirectoryForgotten(t *testing.T) {
	root := tree(t)
	w := newWatcher(t, 16)
	add(t, w, root, "")
	add(t, w, root, "a/b")
	seq := syncW(t, w)
	if err := os.Remove(filepath.Join(root, "a", "b")); err != nil {
		t.Fatal(err)
	}
	syncW(t, w)
	if w.Quiet("a/b", seq, true) {
		t.Fatal("a removed directory is still answered")
	}
}

// TestWatchLimit: past its maximum a watcher refuses with ErrFull and
// keeps answering for what it watches.
func TestWatchLimit(t *testing.T) {
	root := tree(t)
	w := newWatcher(t, 2)
	add(t, w, root, "")
	add(t, w, root, "a")
	fd, err := unix.Open(filepath.Join(root, "a", "b"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := w.Add("a/b", fd); !errors.Is(err, ErrFull) {
		t.Fatalf("third watch of two: %v, want ErrFull", err)
	}
	seq := syncW(t, w)
	if !w.Quiet("a", seq, false) || w.Quiet("a/b", seq, false) {
		t.Fatal("answers after a refused watch are wrong")
	}
	// Adding a watched path again is no new watch.
	if _, err := w.Add("a", fd); err != nil {
		t.Fatalf("re-adding a watched path: %v", err)
	}
}

// TestOverflowChangesEverything: when the kernel's queue overflowed, no
// directory is quiet.
func TestOverflowChangesEverything(t *testing.T) {
	root := tree(t)
	w := newWatcher(t, 16)
	add(t, w, root, "")
	add(t, w, root, "a")
	seq := syncW(t, w)
	w.mu.Lock()
	w.event(-1, unix.IN_Q_OVERFLOW, "")
	w.mu.Unlock()
	if w.Quiet("", seq, true) || w.Quiet("a", seq, true) {
		t.Fatal("a directory is quiet after an overflow")
	}
}

// TestClosed: a closed watcher refuses and answers nothing.
func TestClosed(t *testing.T) {
	root := tree(t)
	w := newWatcher(t, 16)
	add(t, w, root, "")
	seq := syncW(t, w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close: %v", err)
	}
	if w.Quiet("", seq, false) {
		t.Fatal("a closed watcher answered")
	}
}

// TestSupported: the local file system the tests run on is supported;
// /proc is not.
func TestSupported(t *testing.T) {
	fd, err := unix.Open(t.TempDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		t.Fatal(err)
	}
	if !Supported(fd) {
		t.Skipf("the test directory's file system (magic %#x) is not one dirwatch trusts", st.Type)
	}
	pfd, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	if Supported(pfd) {
		t.Fatal("/proc counted as a file system inotify fully reports")
	}
}

// FuzzApply: any event buffer is applied without a panic, and a watch's
// numbers never go past the sequence.
func FuzzApply(f *testing.F) {
	ev := func(wd int32, mask uint32, name string) []byte {
		n := (len(name) + 1 + 15) / 16 * 16
		b := make([]byte, unix.SizeofInotifyEvent+n)
		binary.NativeEndian.PutUint32(b[0:4], uint32(wd))
		binary.NativeEndian.PutUint32(b[4:8], mask)
		binary.NativeEndian.PutUint32(b[12:16], uint32(n))
		copy(b[unix.SizeofInotifyEvent:], name)
		return b
	}
	f.Add(ev(1, unix.IN_CREATE, "x"))
	f.Add(append(ev(2, unix.IN_MOVED_FROM|unix.IN_ISDIR, "b"), ev(1, unix.IN_IGNORED, "")...))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		w := &Watcher{fd: -1, byWD: map[int32]*watch{}, byPath: map[string]*watch{}}
		for i, p := range []string{"", "a", "a/b"} {
			x := &watch{wd: int32(i + 1), path: p}
			w.byWD[x.wd], w.byPath[p] = x, x
		}
		w.apply(b)
		for p, x := range w.byPath {
			if x.any > w.seq || x.self > w.seq || w.byWD[x.wd] != x || x.path != p {
				t.Fatalf("inconsistent watch %q: %+v (seq %d)", p, x, w.seq)
			}
		}
	})
}
