package corestate

import (
	"fmt"
	"testing"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
)

// BenchmarkCommitTwoRecords is one two-record read-modify-write commit
// (the shape of a landing's begin or end) on files, on the in-memory
// plane (the envelope codec alone) and on a 3-member etcd in this process
// (one Txn with two compares).
func BenchmarkCommitTwoRecords(b *testing.B) {
	for _, bk := range []struct {
		name string
		open func(b *testing.B) *Store
	}{
		{"file", func(b *testing.B) *Store {
			s, err := Open(b.TempDir(), Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"plane", func(b *testing.B) *Store {
			s, err := OpenPlane(meta.NewMemory(), PlaneOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"etcd", func(b *testing.B) *Store {
			s, err := OpenPlane(etcdmeta.New(etcdtest.Start(b).Client(), "bench"), PlaneOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	} {
		b.Run(bk.name, func(b *testing.B) {
			s := bk.open(b)
			var revs [2]uint64
			for i := 0; b.Loop(); i++ {
				ws := []Write{
					{Family: "a", Key: "x", ExpectRev: revs[0], Value: i},
					{Family: "b", Key: "y", ExpectRev: revs[1], Value: i},
				}
				if err := s.Commit(fmt.Sprint(i), ws); err != nil {
					b.Fatal(err)
				}
				revs[0]++
				revs[1]++
			}
		})
	}
}
