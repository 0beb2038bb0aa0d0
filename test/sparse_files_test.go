package test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// allocatedUnder sums the disk space (st_blocks) of the files under dir.
func allocatedUnder(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatalf("du %s: %v", dir, err)
	}
	return total
}

// dataMap lists a file's data regions (SEEK_DATA/SEEK_HOLE).
func dataMap(t *testing.T, path string) [][2]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]int64
	for off := int64(0); off < fi.Size(); {
		d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		if err != nil {
			t.Fatalf("SEEK_DATA %s: %v", path, err)
		}
		h, err := unix.Seek(int(f.Fd()), d, unix.SEEK_HOLE)
		if err != nil {
			t.Fatalf("SEEK_HOLE %s: %v", path, err)
		}
		out = append(out, [2]int64{d, h})
		off = h
	}
	return out
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestSparseFileCaptureAndExport: a 100 GB file made with truncate in a
// mount, with 512 KiB of data written in its middle, is captured at the
// session's end into less than 1 MB of store (the data, not the holes),
// reads back through the mount and a fork as the data and zeros (and
// SEEK_DATA through the fork finds the data alone; a write in the fork
// copies it up and captures it sparse again), is
// exported as a sparse file with the same content and data map, and fsck
// and gc keep it.
func TestSparseFileCaptureAndExport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"seed.txt": "seed\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")
	before := allocatedUnder(t, filepath.Join(e.store, "objects"))

	const (
		size    = 100 << 30
		dataOff = 50 << 30
		dataLen = 512 << 10
	)
	data := make([]byte, dataLen)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	dataFile := filepath.Join(e.dir, "data")
	if err := os.WriteFile(dataFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	gens := len(e.log("w"))
	inSession(t, mp, fmt.Sprintf(`set -e
		truncate -s %d big
		dd if=%s of=big bs=%d seek=%d conv=notrunc status=none`, int64(size), dataFile, dataLen, dataOff/dataLen))
	e.waitIdle("w")
	if n := len(e.log("w")); n != gens+1 {
		t.Fatalf("the session's end made %d generations, want 1", n-gens)
	}
	if grew := allocatedUnder(t, filepath.Join(e.store, "objects")) - before; grew >= 1_000_000 {
		t.Fatalf("the store grew by %d bytes for a 100 GB file with %d bytes of data", grew, dataLen)
	}

	zeros := sha(make([]byte, dataLen))
	// readBack prints the hashes of the data region, of a region of zeros
	// before and after it, and the length, as read through a mount.
	readBack := fmt.Sprintf(`set -e
		dd if=big bs=%[1]d skip=%[2]d count=1 status=none | sha256sum | cut -d' ' -f1
		dd if=big bs=%[1]d skip=%[3]d count=1 status=none | sha256sum | cut -d' ' -f1
		dd if=big bs=%[1]d skip=%[4]d count=1 status=none | sha256sum | cut -d' ' -f1
		stat -c %%s big`, dataLen, dataOff/dataLen, 7, (size-dataLen)/dataLen)
	want := fmt.Sprintf("%s\n%s\n%s\n%d\n", sha(data), zeros, zeros, int64(size))
	if got := inSession(t, mp, readBack); got != want {
		t.Fatalf("read back through the mount:\n got %q\nwant %q", got, want)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: outcome %q", o)
	}

	// A fork reads it from the stored blob.
	e.ok("fork", "w", "c")
	mc := e.mountAt("c")
	if got := inSession(t, mc, readBack); got != want {
		t.Fatalf("read back through a fork:\n got %q\nwant %q", got, want)
	}
	// SEEK_DATA through the mount asks the stored blob: its holes show.
	if m := dataMap(t, filepath.Join(mc, "big")); len(m) != 1 || m[0] != [2]int64{dataOff, dataOff + dataLen} {
		t.Fatalf("data map through the fork's mount %v, want [[%d %d]]", m, int64(dataOff), int64(dataOff+dataLen))
	}
	// A write into the fork copies the file up with its holes: its
	// capture stores the data regions only, again.
	beforeFork := allocatedUnder(t, filepath.Join(e.store, "objects"))
	inSession(t, mc, "printf forked | dd of=big bs=1 seek=1024 conv=notrunc status=none")
	if o, _ := e.unmount(mc); o != "current" {
		t.Fatalf("unmount c: outcome %q", o)
	}
	if grew := allocatedUnder(t, filepath.Join(e.store, "objects")) - beforeFork; grew >= 1_000_000 {
		t.Fatalf("the fork's capture grew the store by %d bytes", grew)
	}
	exp := e.exportTo("c", "export-c")
	if m := dataMap(t, filepath.Join(exp, "big")); len(m) != 2 || m[0][0] != 0 || m[1] != [2]int64{dataOff, dataOff + dataLen} {
		t.Fatalf("the fork's export data map %v", m)
	}
	f, err := os.Open(filepath.Join(exp, "big"))
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 1030)
	if _, err := f.ReadAt(head, 0); err != nil || string(head[1024:1030]) != "forked" || !bytes.Equal(head[:1024], make([]byte, 1024)) {
		t.Fatalf("the fork's export starts %q, %v", head[1000:], err)
	}
	f.Close()

	// Export: a sparse file with the same content and data map.
	checkExport := func(name string) {
		t.Helper()
		exp := e.exportTo("w", name)
		p := filepath.Join(exp, "big")
		if a := allocatedUnder(t, exp); a >= 1_000_000 {
			t.Fatalf("the export takes %d bytes on disk", a)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fi, _ := f.Stat()
		got := make([]byte, dataLen)
		if _, err := f.ReadAt(got, dataOff); err != nil || !bytes.Equal(got, data) || fi.Size() != size {
			t.Fatalf("export: data differs (size %d, %v)", fi.Size(), err)
		}
		if m := dataMap(t, p); len(m) != 1 || m[0] != [2]int64{dataOff, dataOff + dataLen} {
			t.Fatalf("export data map %v, want [[%d %d]]", m, int64(dataOff), int64(dataOff+dataLen))
		}
	}
	checkExport("export")
	e.fsck()
	e.ok("gc")
	e.fsck()
	checkExport("export-after-gc")
	if s := readFile(t, filepath.Join(e.dir, "export-after-gc", "seed.txt")); !strings.HasPrefix(s, "seed") {
		t.Fatalf("seed.txt: %q", s)
	}
}
