package fusefs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// snapshotOf builds an overlay with some changes and encodes it.
func snapshotOf(t testing.TB) ([]byte, *fakeObjects) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"a": "1", "d/b": "2", "d/e/": ""})
	m, mnt := mountT(t, objs, root, nil)
	mustWrite(t, filepath.Join(mnt, "d/new"), "n")
	if err := os.Rename(filepath.Join(mnt, "d/e"), filepath.Join(mnt, "e2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(mnt, "sl")); err != nil {
		t.Fatal(err)
	}
	// Special files: the snapshot records their type and device number.
	if err := syscall.Mkfifo(filepath.Join(mnt, "d/pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(mnt, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	m.ov.mu.Lock()
	b, err := m.ov.encodeSnapshot()
	m.ov.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return b, objs
}

func TestSnapshotRoundTripAndCorruption(t *testing.T) {
	b, objs := snapshotOf(t)
	s, err := decodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.build(objs, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if n := o.root.children["null"]; n == nil || n.mode&syscall.S_IFMT != syscall.S_IFCHR || n.rdev != 1<<8|3 {
		t.Fatalf("char device after a snapshot round trip: %+v", n)
	}
	if p := o.root.children["d"].children["pipe"]; p == nil || p.mode&syscall.S_IFMT != syscall.S_IFIFO {
		t.Fatalf("fifo after a snapshot round trip: %+v", p)
	}
	if o.root.children["e2"] == nil || o.root.children["sl"] == nil || o.root.children["d"].children["new"] == nil {
		t.Fatal("replayed table lacks changes")
	}
	for _, i := range []int{0, len(snapMagic) + 2, len(b) / 2, len(b) - 1} {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if _, err := decodeSnapshot(c); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("flip at %d: %v, want ErrBadSnapshot", i, err)
		}
	}
	if _, err := decodeSnapshot(b[:len(b)-3]); !errors.Is(err, ErrBadSnapshot) {
		t.Errorf("truncated: %v", err)
	}
}

// wrapSnapshot frames a payload as a snapshot file with a valid checksum,
// so the fuzzer reaches the gob decoder and the table validation.
func wrapSnapshot(payload []byte) []byte {
	b := append([]byte(snapMagic), make([]byte, 8)...)
	binary.LittleEndian.PutUint64(b[len(snapMagic):], uint64(len(payload)))
	b = append(b, payload...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable()))
}

func FuzzDecodeSnapshot(f *testing.F) {
	b, objs := snapshotOf(f)
	f.Add(b)
	f.Add(b[len(snapMagic)+8 : len(b)-4]) // the payload alone
	f.Add([]byte(snapMagic))
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, wrapSnapshot(b)} {
			s, err := decodeSnapshot(in)
			if err != nil {
				continue
			}
			if o, err := s.build(objs, dir); err == nil && o.root == nil {
				t.Fatal("built overlay without root")
			}
		}
	})
}

const mmapChildEnv = "FUSEFS_MMAP_CHILD"

// mmapChild writes "AB" at offset 2 of a file through a shared mapping.
// It runs in its own process: a page fault on a mount served by the same
// Go process can deadlock with the garbage collector's stop-the-world.
func mmapChild(p string) {
	fd, err := syscall.Open(p, syscall.O_RDWR, 0)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	mem, err := syscall.Mmap(fd, 0, 10, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	copy(mem[2:], "AB")
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	syscall.Munmap(mem)
	syscall.Close(fd)
	os.Exit(0)
}

// TestSharedWritableMmap writes through a shared mapping and reads the
// change back through read(2) after msync, then captures it.
func TestSharedWritableMmap(t *testing.T) {
	for _, pt := range []bool{false, true} {
		objs := newFakeObjects(t)
		m, mnt := mountT(t, objs, objs.build(t, spec{"f": "0123456789"}), &mountOpts{passthrough: pt})
		p := filepath.Join(mnt, "f")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), mmapChildEnv+"="+p)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mmap child: %v %s", err, out)
		}
		if got := mustRead(t, p); got != "01AB456789" {
			t.Fatalf("passthrough=%v: after mmap write: %q", pt, got)
		}
		id, _, err := m.Capture()
		if err != nil {
			t.Fatal(err)
		}
		if got := objs.flatten(t, id)["f"]; got != "file:01AB456789" {
			t.Fatalf("passthrough=%v: captured %q", pt, got)
		}
	}
}

// TestUnmountBusyFallsBackToLazy unmounts while a file is open.
func TestUnmountBusyFallsBackToLazy(t *testing.T) {
	objs := newFakeObjects(t)
	mnt := t.TempDir()
	m, err := MountAt(mnt, Config{Objects: objs, Root: objs.build(t, spec{"f": "x"}), StateDir: t.TempDir(), FsName: "fusefs-test"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	if n, lines := fuseMounts(); n != 0 && containsMount(lines, mnt) {
		t.Fatalf("still mounted:\n%s", lines)
	}
	// The open file is still served.
	buf := make([]byte, 1)
	if _, err := f.ReadAt(buf, 0); err != nil || buf[0] != 'x' {
		t.Fatalf("read after lazy unmount: %q %v", buf, err)
	}
	f.Close()
	m.Wait()
}

func containsMount(lines, mnt string) bool { return stringsContains(lines, " "+mnt+" ") }
