package test

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestBigFileCaptureDirect: a dense file of 24 MiB and a few bytes
// written in a session is captured at the session's end into one object
// holding exactly its bytes, written to disk directly (none of the
// object's pages in the page cache: blobs' direct copy, not a buffered
// one), read back alike through the mount, a fork and an export, and
// fsck finds the store clean.
func TestBigFileCaptureDirect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}
	e := newMountEnv(t)
	if f, err := os.OpenFile(filepath.Join(e.dir, "direct-probe"), os.O_CREATE|os.O_WRONLY|unix.O_DIRECT, 0o600); err != nil {
		t.Skipf("no direct I/O on the store's file system: %v", err)
	} else {
		f.Close()
	}
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"seed.txt": "seed\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")

	const size = 24<<20 + 1234
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{4}).Read(data)
	dataFile := filepath.Join(e.dir, "data")
	if err := os.WriteFile(dataFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	gens := len(e.log("w"))
	inSession(t, mp, fmt.Sprintf("cp %s big", dataFile))
	e.waitIdle("w")
	if n := len(e.log("w")); n != gens+1 {
		t.Fatalf("the session's end made %d generations, want 1", n-gens)
	}

	var obj string
	err := filepath.WalkDir(filepath.Join(e.store, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if fi, err := d.Info(); err == nil && fi.Size() == size {
			obj = p
		}
		return nil
	})
	if err != nil || obj == "" {
		t.Fatalf("no object of %d bytes in the store (%v)", size, err)
	}
	if c := cachedPages(t, obj, size); c != 0 {
		t.Fatalf("%d pages of the captured object are in the page cache: it was copied through it", c)
	}
	if got, err := os.ReadFile(obj); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the object does not hold the file's bytes (%v)", err)
	}

	want := sha(data) + "\n"
	if got := inSession(t, mp, "sha256sum < big | cut -d' ' -f1"); got != want {
		t.Fatalf("read back through the mount: %q, want %q", got, want)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: outcome %q", o)
	}
	e.ok("fork", "w", "c")
	mc := e.mountAt("c")
	if got := inSession(t, mc, "sha256sum < big | cut -d' ' -f1"); got != want {
		t.Fatalf("read back through a fork: %q, want %q", got, want)
	}
	if o, _ := e.unmount(mc); o != "current" {
		t.Fatalf("unmount c: outcome %q", o)
	}
	exp := e.exportTo("w", "export")
	if got, err := os.ReadFile(filepath.Join(exp, "big")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the export differs (%v)", err)
	}
	e.fsck()
}

// cachedPages counts the pages of the file at path (size bytes) that are
// in the page cache: mincore over a mapping, which reads nothing.
func cachedPages(t *testing.T, path string, size int) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	pg := os.Getpagesize()
	vec := make([]byte, (size+pg-1)/pg)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(size), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore %s: %v", path, e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
