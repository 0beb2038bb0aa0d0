package store_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

func BenchmarkWriteBlob(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, synced := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%d/sync=%v", size, synced), func(b *testing.B) {
				s := storetest.MustOpenDir(b, b.TempDir(), store.Options{NoSync: !synced})
				buf := bytes.Repeat([]byte{0x5a}, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					// Unique content each time, so nothing deduplicates.
					binary.LittleEndian.PutUint64(buf, uint64(i))
					if _, err := s.WriteBlobBytes(buf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkBlobBatch4KiB(b *testing.B) {
	s := storetest.MustOpenDir(b, b.TempDir(), store.Options{})
	buf := bytes.Repeat([]byte{0x5a}, 4<<10)
	b.SetBytes(int64(len(buf)))
	batch := s.NewBlobBatch()
	for i := 0; b.Loop(); i++ {
		binary.LittleEndian.PutUint64(buf, uint64(i))
		if _, err := batch.WriteBlobBytes(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := batch.Commit(); err != nil {
		b.Fatal(err)
	}
}

func benchTree(n int) *store.Tree {
	t := &store.Tree{}
	for i := range n {
		t.Entries = append(t.Entries, store.Entry{
			Name: fmt.Sprintf("file-%05d.go", i), Kind: store.KindFile,
			Size: int64(i * 100), Mtime: 1700000000000000000 + int64(i), ID: store.BlobID([]byte{byte(i)}),
		})
	}
	return t
}

func BenchmarkTreeEncodeDecode(b *testing.B) {
	tr := benchTree(256)
	b.ReportAllocs()
	for b.Loop() {
		enc, err := tr.Encode()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.DecodeTree(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetTree(b *testing.B) {
	s := storetest.MustOpen(b)
	id, err := s.PutTree(benchTree(256))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.GetTree(id); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHeadAppend(b *testing.B) {
	for _, synced := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", synced), func(b *testing.B) {
			s := storetest.MustOpenDir(b, b.TempDir(), store.Options{NoSync: !synced})
			g0 := storetest.PutGen(b, s, "main", store.GenCreate, map[string]string{"a": "0"})
			g1 := storetest.PutGen(b, s, "main", store.GenCommit, map[string]string{"a": "1"})
			storetest.MustCreate(b, s, "main", "", g0, store.ID{})
			head, next := g0, g1
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.CompareAndAppend("main", head, store.HeadEntry{Gen: next, Kind: store.GenCommit}, nil); err != nil {
					b.Fatal(err)
				}
				head, next = next, head
			}
		})
	}
}

// BenchmarkGetGeneration reads one generation (not cached: one read
// transaction, the hot path of every head walk).
func BenchmarkGetGeneration(b *testing.B) {
	s := storetest.MustOpen(b)
	g := storetest.PutGen(b, s, "main", store.GenCreate, map[string]string{"a": "0"})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.GetGeneration(g); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHasTree asks whether a tree is stored (one read transaction,
// no decoding).
func BenchmarkHasTree(b *testing.B) {
	s := storetest.MustOpen(b)
	id, err := s.PutTree(benchTree(256))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := s.HasTree(id); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
