package fusefs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadOnlyRefusesEveryChange switches a mount read-only and checks
// that every mutating operation fails with EROFS, reads keep working, and
// the change made before the switch is still captured.
func TestReadOnlyRefusesEveryChange(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, lowerSpec)
	m, mnt := mountT(t, objs, root, &mountOpts{xattrs: true})
	p := func(s string) string { return filepath.Join(mnt, s) }
	mustWrite(t, p("before.txt"), "written before")
	if err := unix.Setxattr(p("a.txt"), "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	// A handle opened for writing before the switch: its daemon-served
	// writes are refused afterwards (no passthrough in this mount).
	held, err := os.OpenFile(p("before.txt"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if m.ReadOnly() {
		t.Fatal("read-only before SetReadOnly")
	}
	m.SetReadOnly(true)
	if !m.ReadOnly() {
		t.Fatal("SetReadOnly(true) did not stick")
	}

	ops := map[string]func() error{
		"create":      func() error { return os.WriteFile(p("new.txt"), []byte("x"), 0o644) },
		"open-write":  func() error { f, err := os.OpenFile(p("a.txt"), os.O_WRONLY, 0); closeIf(f); return err },
		"open-trunc":  func() error { f, err := os.OpenFile(p("a.txt"), os.O_RDONLY|os.O_TRUNC, 0); closeIf(f); return err },
		"write-held":  func() error { _, err := held.Write([]byte("more")); return err },
		"fallocate":   func() error { return unix.Fallocate(int(held.Fd()), 0, 0, 4096) },
		"mkdir":       func() error { return os.Mkdir(p("d"), 0o755) },
		"symlink":     func() error { return os.Symlink("a.txt", p("ln")) },
		"link":        func() error { return os.Link(p("a.txt"), p("hard")) },
		"unlink":      func() error { return os.Remove(p("a.txt")) },
		"rmdir":       func() error { return os.Remove(p("empty")) },
		"rename":      func() error { return os.Rename(p("a.txt"), p("b.txt")) },
		"truncate":    func() error { return os.Truncate(p("a.txt"), 1) },
		"chmod":       func() error { return os.Chmod(p("a.txt"), 0o600) },
		"utimes":      func() error { return unix.UtimesNano(p("a.txt"), []unix.Timespec{{Sec: 1}, {Sec: 1}}) },
		"mknod":       func() error { return unix.Mknod(p("reg"), syscall.S_IFREG|0o644, 0) },
		"tmpfile":     func() error { fd, err := unix.Open(mnt, unix.O_TMPFILE|unix.O_WRONLY, 0o644); closeFd(fd); return err },
		"setxattr":    func() error { return unix.Setxattr(p("a.txt"), "user.k", []byte("w"), 0) },
		"removexattr": func() error { return unix.Removexattr(p("a.txt"), "user.k") },
		"rename-noexch": func() error {
			return unix.Renameat2(unix.AT_FDCWD, p("a.txt"), unix.AT_FDCWD, p("c.txt"), unix.RENAME_NOREPLACE)
		},
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s on a read-only mount: %v, want EROFS", name, err)
		}
	}

	if got := mustRead(t, p("a.txt")); got != "hello" {
		t.Fatalf("read a.txt: %q", got)
	}
	if got := mustRead(t, p("before.txt")); got != "written before" {
		t.Fatalf("read before.txt: %q", got)
	}
	buf := make([]byte, 8)
	if n, err := unix.Getxattr(p("a.txt"), "user.k", buf); err != nil || string(buf[:n]) != "v" {
		t.Fatalf("getxattr: %q %v", buf[:n], err)
	}
	if _, err := os.ReadDir(p("dir")); err != nil {
		t.Fatalf("readdir: %v", err)
	}
	if err := held.Sync(); err != nil {
		t.Fatalf("fsync of a held handle: %v", err)
	}
	capRoot, changed, err := m.Capture()
	if err != nil || !changed {
		t.Fatalf("capture: changed=%v err=%v", changed, err)
	}
	if got := objs.flatten(t, capRoot)["before.txt"]; got != "file:written before" {
		t.Fatalf("capture has before.txt = %q", got)
	}

	m.SetReadOnly(false)
	mustWrite(t, p("after.txt"), "writable again")
}

// TestReadOnlyFromMount mounts read-only from the start (Config.ReadOnly).
func TestReadOnlyFromMount(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, lowerSpec)
	stateDir := t.TempDir()
	mnt := t.TempDir()
	m, err := MountAt(mnt, Config{Objects: objs, Root: root, StateDir: stateDir, ReadOnly: true, FsName: "fusefs-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		m.Wait()
	})
	if !m.ReadOnly() {
		t.Fatal("Config.ReadOnly did not make the mount read-only")
	}
	if err := os.WriteFile(filepath.Join(mnt, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("create: %v, want EROFS", err)
	}
	if got := mustRead(t, filepath.Join(mnt, "dir/sub/deep.go")); got != "package deep\n" {
		t.Fatalf("read: %q", got)
	}
	if _, changed, err := m.Capture(); err != nil || changed {
		t.Fatalf("capture of an untouched read-only mount: changed=%v err=%v", changed, err)
	}
}

func closeIf(f *os.File) {
	if f != nil {
		f.Close()
	}
}

func closeFd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}
