package s3blobs_test

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/internal/weedtest"
)

// BenchmarkS3 puts and gets objects of 4 KiB and 1 MiB on a SeaweedFS
// server on loopback (each put new content: no dedup skip).
func BenchmarkS3(b *testing.B) {
	srv := weedtest.Start(b)
	srv.SetEnv(b)
	var n atomic.Int64
	for _, size := range []int{4 << 10, 1 << 20} {
		s := openB(b, srv, &n)
		content := func(i int) []byte {
			p := make([]byte, size)
			binary.LittleEndian.PutUint64(p, uint64(i)+uint64(size)<<32)
			return p
		}
		var ids []blobs.ID
		b.Run(fmt.Sprintf("Put/size=%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				id, err := s.PutBytes(content(len(ids)))
				if err != nil {
					b.Fatal(err)
				}
				ids = append(ids, id)
			}
		})
		b.Run(fmt.Sprintf("Get/size=%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				if _, err := s.Read(ids[i%len(ids)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
