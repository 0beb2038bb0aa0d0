package fusefs

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// batchStore serves a real store to a mount with batched capture writes,
// as the daemon does (cmd/acyclicfs storeObjects).
type batchStore struct{ *store.Store }

func (s batchStore) NewBatch() Batch { return s.NewBlobBatch() }

// storeMount mounts an empty tree of a fresh real store (synced writes,
// as the daemon's) and returns the mount, its directory and the store.
func storeMount(b *testing.B) (*Mount, string, *store.Store) {
	s, err := store.Open(filepath.Join(b.TempDir(), "store"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	root, err := s.PutTree(&store.Tree{})
	if err != nil {
		b.Fatal(err)
	}
	m, dir := mountT(b, nil, root, &mountOpts{objects: batchStore{s}})
	return m, dir, s
}

// diskUse sums st_blocks of the files under dir, in bytes.
func diskUse(b *testing.B, dir string) int64 {
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
		b.Fatal(err)
	}
	return total
}

// BenchmarkCaptureLargeFile times the capture of a session's end after a
// 1 GiB file was written through the mount (the lease end's main cost):
// hash it and store it.
func BenchmarkCaptureLargeFile(b *testing.B) {
	const size = 1 << 30
	m, dir, _ := storeMount(b)
	buf := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	b.SetBytes(size)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		buf[0] = byte(i) // a new content each time: no dedupe
		writeFile(b, filepath.Join(dir, "big"), buf, size)
		b.StartTimer()
		if _, _, err := m.Capture(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCaptureSparseFile times the capture of a 3 GiB sparse file
// with 1 MiB of data written in its middle, and reports the store's
// growth per capture (store-B/op).
func BenchmarkCaptureSparseFile(b *testing.B) {
	const size = 3 << 30
	m, dir, s := storeMount(b)
	objects := filepath.Join(filepath.Dir(s.BlobPath(store.ID{})), "..")
	data := bytes.Repeat([]byte("sparse data 1234"), 1<<16) // 1 MiB
	var grew int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		data[0] = byte(i)
		p := filepath.Join(dir, "sparse.bin")
		os.Remove(p)
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(data, size/2); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		before := diskUse(b, objects)
		b.StartTimer()
		if _, _, err := m.Capture(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		grew += diskUse(b, objects) - before
		b.StartTimer()
	}
	b.ReportMetric(float64(grew)/float64(b.N), "store-B/op")
}

// BenchmarkCaptureManyFiles times the capture of a session's end after
// 256 files of 16 KiB each were rewritten through the mount: the files are
// hashed and stored by the capture's worker pool (storeFiles), so this is
// the row that shows the pool's cost.
func BenchmarkCaptureManyFiles(b *testing.B) {
	const files, size = 256, 16 << 10
	m, dir, _ := storeMount(b)
	buf := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	b.SetBytes(files * size)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for f := range files {
			buf[0], buf[1], buf[2] = byte(i), byte(i>>8), byte(f) // a new content each time: no dedupe, no memo
			writeFile(b, filepath.Join(dir, "f"+strconv.Itoa(f)), buf, size)
		}
		b.StartTimer()
		if _, _, err := m.Capture(); err != nil {
			b.Fatal(err)
		}
	}
}
