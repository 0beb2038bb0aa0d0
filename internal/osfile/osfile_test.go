package osfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpen: the file reads and writes like os.OpenFile's, its descriptor
// is close-on-exec and blocking, and errors are *fs.PathError.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	f, err := Open(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	if err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Fatalf("F_GETFD %#x, %v: want close-on-exec", fl, err)
	}
	fl, err = unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Fatalf("F_GETFL %#x, %v: want blocking", fl, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o640&^umask() {
		t.Fatalf("stat: %v %v", st, err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "hello" {
		t.Fatalf("read back %q %v", b, err)
	}
	_, err = Open(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrExist) || !errors.As(err, &pe) || pe.Path != p || pe.Op != "open" {
		t.Fatalf("exclusive create of an existing file: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "missing"), os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open of a missing file: %v", err)
	}
}

func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

// TestCreateTemp: distinct new files with the prefix, mode 0600.
func TestCreateTemp(t *testing.T) {
	dir := t.TempDir()
	seen := map[string]bool{}
	for range 50 {
		f, err := CreateTemp(dir, "blob-")
		if err != nil {
			t.Fatal(err)
		}
		name := f.Name()
		f.Close()
		if filepath.Dir(name) != dir || !strings.HasPrefix(filepath.Base(name), "blob-") || seen[name] {
			t.Fatalf("name %q", name)
		}
		seen[name] = true
		if st, err := os.Stat(name); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("stat %s: %v %v", name, st, err)
		}
	}
	if _, err := CreateTemp(filepath.Join(dir, "missing"), "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("temp file in a missing directory: %v", err)
	}
}
