package store_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

// BenchmarkReadBlob measures the verified read paths of a stored blob
// (whole, streamed, and the mount's first-open file) and of a missing one
// (what the base-reference fallback costs a miss).
func BenchmarkReadBlob(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		s := storetest.MustOpenDir(b, b.TempDir(), store.Options{NoSync: true})
		buf := bytes.Repeat([]byte{0x5a}, size)
		binary.LittleEndian.PutUint64(buf, uint64(size))
		id, err := s.WriteBlobBytes(buf)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("ReadBlob/size=%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := s.ReadBlob(id); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("OpenBlob/size=%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				rc, err := s.OpenBlob(id)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, rc); err != nil {
					b.Fatal(err)
				}
				rc.Close()
			}
		})
		b.Run(fmt.Sprintf("OpenBlobFile/size=%d", size), func(b *testing.B) {
			for b.Loop() {
				f, err := s.OpenBlobFile(id)
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
	s := storetest.MustOpenDir(b, b.TempDir(), store.Options{NoSync: true})
	missing := store.BlobID([]byte("missing"))
	b.Run("HasBlob/missing", func(b *testing.B) {
		for b.Loop() {
			if ok, err := s.HasBlob(missing); ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}
