package dirfd_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"golang.org/x/sys/unix"
)

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// tree makes root/{a/b/f, a/x, link -> a, out -> ../outside} and returns
// root and the opened Dir.
func tree(t *testing.T) (string, *dirfd.Dir) {
	t.Helper()
	top := t.TempDir()
	root := filepath.Join(top, "root")
	mustOK(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	mustOK(t, os.WriteFile(filepath.Join(root, "a", "b", "f"), []byte("hello"), 0o644))
	mustOK(t, os.WriteFile(filepath.Join(root, "a", "x"), []byte("x"), 0o755))
	mustOK(t, os.Symlink("a", filepath.Join(root, "link")))
	mustOK(t, os.WriteFile(filepath.Join(top, "outside"), []byte("secret"), 0o644))
	mustOK(t, os.Symlink("../outside", filepath.Join(root, "out")))
	d, err := dirfd.Open(root)
	mustOK(t, err)
	t.Cleanup(func() { d.Close() })
	return root, d
}

func TestBadPathsRefused(t *testing.T) {
	_, d := tree(t)
	for _, rel := range []string{"/etc/passwd", "..", "a/..", "../x", "a//b", "./a", "a/.", "a/", "a\x00b"} {
		if _, err := d.Lstat(rel); !errors.Is(err, dirfd.ErrBadPath) {
			t.Errorf("Lstat(%q) = %v, want ErrBadPath", rel, err)
		}
		if _, err := d.OpenFile(rel, os.O_RDONLY, 0); !errors.Is(err, dirfd.ErrBadPath) {
			t.Errorf("OpenFile(%q) = %v, want ErrBadPath", rel, err)
		}
		if err := d.Remove(rel); !errors.Is(err, dirfd.ErrBadPath) {
			t.Errorf("Remove(%q) = %v, want ErrBadPath", rel, err)
		}
	}
	for _, rel := range []string{"", "/"} {
		if err := d.RemoveAll(rel); !errors.Is(err, dirfd.ErrBadPath) {
			t.Errorf("RemoveAll(%q) = %v, want ErrBadPath", rel, err)
		}
	}
}

func TestSymlinkComponentsNeverFollowed(t *testing.T) {
	root, d := tree(t)
	// A symlink in a middle component.
	if _, err := d.Lstat("link/b/f"); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("Lstat through symlink: %v, want ELOOP", err)
	}
	if _, err := d.OpenFile("link/x", os.O_RDONLY, 0); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("OpenFile through symlink: %v, want ELOOP", err)
	}
	if _, err := d.ReadDir("link"); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Fatalf("ReadDir of symlink: %v, want ELOOP or ENOTDIR", err)
	}
	if err := d.Mkdir("link/new", 0o755); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("Mkdir through symlink: %v, want ELOOP", err)
	}
	// A final symlink: lstat sees the link, open refuses it.
	st, err := d.Lstat("out")
	mustOK(t, err)
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Fatalf("Lstat(out) mode %o, want a symlink", st.Mode)
	}
	if _, err := d.OpenFile("out", os.O_RDONLY, 0); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("OpenFile(out): %v, want ELOOP", err)
	}
	target, err := d.Readlink("out")
	mustOK(t, err)
	if target != "../outside" {
		t.Fatalf("Readlink = %q", target)
	}
	// Chmod and SetMtime of a link act on the link (or refuse), never on
	// the file outside.
	if err := d.Chmod("out", 0o600); err == nil {
		t.Fatal("Chmod of a symlink succeeded")
	}
	mustOK(t, d.SetMtime("out", 1e9))
	fi, err := os.Stat(filepath.Join(filepath.Dir(root), "outside"))
	mustOK(t, err)
	if fi.Mode().Perm() != 0o644 || fi.ModTime().Unix() == 1 {
		t.Fatalf("file outside changed: %v %v", fi.Mode(), fi.ModTime())
	}
	// RemoveAll of a symlink to a directory removes the link only.
	mustOK(t, d.RemoveAll("link"))
	if _, err := os.Stat(filepath.Join(root, "a", "b", "f")); err != nil {
		t.Fatalf("RemoveAll followed the symlink: %v", err)
	}
}

func TestOperations(t *testing.T) {
	root, d := tree(t)
	if d.Path() != root || d.Fd() < 0 {
		t.Fatalf("Path %q Fd %d", d.Path(), d.Fd())
	}
	ents, err := d.ReadDir("")
	mustOK(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"a", "link", "out"}) {
		t.Fatalf("ReadDir = %v", names)
	}
	if ents[0].Stat.Mode&unix.S_IFMT != unix.S_IFDIR || ents[1].Stat.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Fatalf("ReadDir stats wrong: %o %o", ents[0].Stat.Mode, ents[1].Stat.Mode)
	}
	self, err := d.Lstat("")
	mustOK(t, err)
	if self.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatal("Lstat(\"\") is not a directory")
	}

	f, err := d.OpenFile("a/new", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	mustOK(t, err)
	_, err = f.WriteString("data")
	mustOK(t, err)
	mustOK(t, f.Close())
	st, err := d.Lstat("a/new")
	mustOK(t, err)
	if st.Size != 4 || st.Mode&0o777 != 0o640&^uint32(umask()) {
		t.Fatalf("new file size %d mode %o", st.Size, st.Mode&0o777)
	}
	mustOK(t, d.Chmod("a/new", 0o600))
	mustOK(t, d.SetMtime("a/new", 1_500_000_000_123_456_789))
	st, err = d.Lstat("a/new")
	mustOK(t, err)
	if st.Mode&0o777 != 0o600 || st.Mtim.Nano() != 1_500_000_000_123_456_789 {
		t.Fatalf("after chmod/utimes: mode %o mtime %d", st.Mode&0o777, st.Mtim.Nano())
	}
	mustOK(t, d.Mkdir("a/d", 0o755))
	mustOK(t, d.Symlink("../new", "a/d/l"))
	mustOK(t, d.Rename("a/new", "a/d/moved"))
	mustOK(t, d.SyncDir("a/d"))
	mustOK(t, d.SyncDir(""))
	f, err = d.OpenFile("a/d/moved", os.O_RDONLY, 0)
	mustOK(t, err)
	b, err := io.ReadAll(f)
	f.Close()
	mustOK(t, err)
	if string(b) != "data" {
		t.Fatalf("read %q", b)
	}
	if err := d.Remove("a/d"); !errors.Is(err, unix.ENOTEMPTY) {
		t.Fatalf("Remove of non-empty dir: %v", err)
	}
	mustOK(t, d.Remove("a/d/l"))
	mustOK(t, d.RemoveAll("a"))
	mustOK(t, d.RemoveAll("a")) // missing is fine
	if _, err := d.Lstat("a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after RemoveAll: %v", err)
	}
}

func TestReadDirSkipsVanished(t *testing.T) {
	// Can't race getdents deterministically; check that ReadDir of an empty
	// directory and of a directory with an entry whose name sorts first work.
	_, d := tree(t)
	mustOK(t, d.Mkdir("e", 0o755))
	ents, err := d.ReadDir("e")
	mustOK(t, err)
	if len(ents) != 0 {
		t.Fatalf("empty dir lists %d entries", len(ents))
	}
}

func TestWorksAfterDirectoryMovedAway(t *testing.T) {
	root, d := tree(t)
	moved := root + ".moved"
	mustOK(t, os.Rename(root, moved))
	// Something else now sits at the old path; the Dir must not see it.
	mustOK(t, os.MkdirAll(root, 0o755))
	mustOK(t, os.WriteFile(filepath.Join(root, "impostor"), nil, 0o644))
	f, err := d.OpenFile("a/b/f", os.O_RDONLY, 0)
	mustOK(t, err)
	b, err := io.ReadAll(f)
	f.Close()
	mustOK(t, err)
	if string(b) != "hello" {
		t.Fatalf("read %q through the moved directory", b)
	}
	if _, err := d.Lstat("impostor"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lstat(impostor) = %v, want not found", err)
	}
	ents, err := d.ReadDir("")
	mustOK(t, err)
	if len(ents) != 3 {
		t.Fatalf("ReadDir after move: %d entries", len(ents))
	}
}

func TestCloseTwice(t *testing.T) {
	d, err := dirfd.Open(t.TempDir())
	mustOK(t, err)
	mustOK(t, d.Close())
	mustOK(t, d.Close())
	if _, err := dirfd.Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open(missing) = %v", err)
	}
}

func umask() int {
	m := unix.Umask(0)
	unix.Umask(m)
	return m
}

// TestReadDirWithAndWithDir: ReadDirWith hands its callback the listed
// directory's own descriptor before listing, and a callback's error is
// the listing's; WithDir reaches a directory like every path here (a
// symlink is never followed) and hands an O_PATH descriptor of it.
func TestReadDirWithAndWithDir(t *testing.T) {
	root, d := tree(t)
	want, err := os.Lstat(filepath.Join(root, "a"))
	mustOK(t, err)
	sameDir := func(fd int) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Ino != want.Sys().(*syscall.Stat_t).Ino {
			return errors.New("not the directory a")
		}
		return nil
	}
	ents, err := d.ReadDirWith("a", sameDir)
	mustOK(t, err)
	if len(ents) != 2 || ents[0].Name != "b" || ents[1].Name != "x" {
		t.Fatalf("ReadDirWith(a) = %v", ents)
	}
	stop := errors.New("stop")
	if _, err := d.ReadDirWith("a", func(int) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("a callback's error: %v", err)
	}
	mustOK(t, d.WithDir("a", sameDir))
	called := false
	err = d.WithDir("link", func(int) error { called = true; return nil })
	if err == nil || called {
		t.Fatalf("WithDir through a symlink: %v (called %v)", err, called)
	}
	if err := d.WithDir("../a", func(int) error { return nil }); !errors.Is(err, dirfd.ErrBadPath) {
		t.Fatalf("WithDir(../a): %v", err)
	}
}

// TestPathsLongerThanPathMax: a tree deeper than PATH_MAX bytes (a FUSE
// mount builds one a component at a time) is reached through the same
// calls, piece by piece, and a symlink deep in it is still never followed.
func TestPathsLongerThanPathMax(t *testing.T) {
	_, d := tree(t)
	name := string(slices.Repeat([]byte("n"), 250))
	rel := ""
	for range 20 { // ~5,000 bytes
		if rel == "" {
			rel = name
		} else {
			rel += "/" + name
		}
		mustOK(t, d.Mkdir(rel, 0o755))
	}
	if len(rel) <= unix.PathMax {
		t.Fatalf("path only %d bytes", len(rel))
	}
	leaf := rel + "/leaf"
	f, err := d.OpenFile(leaf, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	mustOK(t, err)
	_, err = f.WriteString("deep")
	mustOK(t, err)
	mustOK(t, f.Close())
	st, err := d.Lstat(leaf)
	mustOK(t, err)
	if st.Size != 4 {
		t.Fatalf("leaf size %d", st.Size)
	}
	mustOK(t, d.Rename(leaf, rel+"/moved"))
	mustOK(t, d.SyncDir(rel))
	// A symlink in the middle of a long path is refused as anywhere.
	mid := rel[:len(rel)-251]
	mustOK(t, d.Symlink("/", mid+"/ln"))
	if _, err := d.Lstat(mid + "/ln/" + name + "/" + name + "/" + name + "/" + name + "/" + name + "/" + name + "/" + name + "/" + name + "/x"); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("through a symlink in a long path: %v, want ELOOP", err)
	}
	mustOK(t, d.RemoveAll(name))
	if _, err := d.Lstat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after RemoveAll: %v", err)
	}
}
