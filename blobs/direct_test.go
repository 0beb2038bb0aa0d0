package blobs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newTestDir makes a plane laid out as a store's, in a fresh directory.
func newTestDir(t *testing.T) *Dir {
	root := t.TempDir()
	for _, d := range []string{"objects", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return OpenDir(filepath.Join(root, "objects"), Options{Tmp: filepath.Join(root, "tmp")})
}

// denseContent is size pseudo-random bytes (no aligned zero block, so
// the file is dense whatever the file system does).
func denseContent(size int, seed uint64) []byte {
	b := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	return b
}

// TestPutFileDirectSizes stores big dense files of sizes around the
// direct copy's thresholds, segment and block boundaries: each object
// holds exactly the content and is named by its dense ID.
func TestPutFileDirectSizes(t *testing.T) {
	d := newTestDir(t)
	src := filepath.Join(t.TempDir(), "src")
	for i, size := range []int{
		directMin - 1, directMin, directMin + 1,
		directMin + directAlign - 1, directMin + directAlign + 1,
		directMin + directSeg - 1, directMin + directSeg, directMin + directSeg + 1,
		3*directSeg + 512, 4*directSeg - directAlign/2,
	} {
		content := denseContent(size, uint64(i))
		if err := os.WriteFile(src, content, 0o600); err != nil {
			t.Fatal(err)
		}
		id, n, err := d.PutFile(src)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if n != int64(size) || id != Sum(content) {
			t.Fatalf("size %d: got %s of %d bytes, want %s", size, id.Short(), n, Sum(content).Short())
		}
		got, err := os.ReadFile(d.Path(id))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("size %d: object holds %d bytes that differ from the content", size, len(got))
		}
		if err := d.Verify(id); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
	}
}

// TestPutFileDirectTakesNoPageCache checks that a big file's copy is
// written to disk directly: none of the object's pages are cached after
// PutFile (a buffered copy leaves them all cached, dirty until synced).
func TestPutFileDirectTakesNoPageCache(t *testing.T) {
	d := newTestDir(t)
	if f, err := os.OpenFile(filepath.Join(d.opt.Tmp, "probe"), os.O_CREATE|os.O_WRONLY|unix.O_DIRECT, 0o600); err != nil {
		t.Skipf("no direct I/O here: %v", err)
	} else {
		f.Close()
	}
	const size = 2 * directMin
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, denseContent(size, 7), 0o600); err != nil {
		t.Fatal(err)
	}
	id, _, err := d.PutFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if c := cachedPages(t, d.Path(id), size); c != 0 {
		t.Fatalf("%d of the object's %d pages are in the page cache", c, size/os.Getpagesize())
	}
}

// cachedPages counts the pages of the file at path that are in the page
// cache (mincore over a mapping, which reads nothing).
func cachedPages(t *testing.T, path string, size int) int {
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
	vec := make([]byte, (size+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(size), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestPutFileDirectSourceChanging stores a big file while another
// goroutine keeps rewriting it: whatever the object holds must be what
// its ID names (what was hashed is what was written).
func TestPutFileDirectSourceChanging(t *testing.T) {
	d := newTestDir(t)
	const size = directMin + 3*directSeg
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, denseContent(size, 1), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(src, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		block := make([]byte, 64<<10)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for j := range block {
				block[j] = byte(i + j)
			}
			if _, err := w.WriteAt(block, int64(i*len(block))%(size-int64(len(block)))); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 3 {
		id, _, err := d.PutFile(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(d.Path(id))
		if err != nil {
			t.Fatal(err)
		}
		if Sum(got) != id {
			t.Fatalf("object %s holds content hashing to %s", id.Short(), Sum(got).Short())
		}
	}
	close(stop)
	wg.Wait()
}

// BenchmarkPutFileDense stores a 1 GiB dense file that is in the page
// cache (as a capture finds what a tool just wrote), synced as a
// capture's batch is: the read, hash, copy and fsync of the lease end
// after a 1 GiB write. Set TMPDIR to measure another file system.
func BenchmarkPutFileDense(b *testing.B) {
	const size = 1 << 30
	root := b.TempDir()
	for _, d := range []string{"objects", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o700); err != nil {
			b.Fatal(err)
		}
	}
	d := OpenDir(filepath.Join(root, "objects"), Options{Tmp: filepath.Join(root, "tmp")})
	src := filepath.Join(root, "src")
	content := denseContent(size, 3)
	b.SetBytes(size)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		content[0] = byte(i) // a new object each time
		if err := os.WriteFile(src, content, 0o600); err != nil {
			b.Fatal(err)
		}
		batch := d.NewDirBatch()
		b.StartTimer()
		if _, _, err := batch.PutFile(src); err != nil {
			b.Fatal(err)
		}
		if err := batch.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}
