package store_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/acyclicfs/acyclicfs/internal/weedtest"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

// BenchmarkTierColdRead reads objects that are in S3 (SeaweedFS on
// loopback) but not in the cache: each read fetches, verifies and
// installs the object, then reads it (the cache is one byte: the
// previous object is evicted at each fetch).
func BenchmarkTierColdRead(b *testing.B) {
	srv := weedtest.Start(b)
	srv.SetEnv(b)
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s := storetest.MustOpenDir(b, b.TempDir(), store.Options{NoSync: true, Remote: s3Remote(b, srv), CacheBytes: 1})
			var ids []store.ID
			for i := range 2 {
				p := make([]byte, size)
				binary.LittleEndian.PutUint64(p, uint64(i))
				id, err := s.WriteBlobBytes(p)
				if err != nil {
					b.Fatal(err)
				}
				ids = append(ids, id)
			}
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				if _, err := s.ReadBlob(ids[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTierWrite writes new objects through a store whose remote is
// S3 (SeaweedFS on loopback): local write, then HEAD and PUT before
// WriteBlobBytes returns.
func BenchmarkTierWrite(b *testing.B) {
	srv := weedtest.Start(b)
	srv.SetEnv(b)
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s := storetest.MustOpenDir(b, b.TempDir(), store.Options{NoSync: true, Remote: s3Remote(b, srv)})
			p := make([]byte, size)
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				binary.LittleEndian.PutUint64(p, uint64(i))
				if _, err := s.WriteBlobBytes(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
