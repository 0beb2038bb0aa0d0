package etcdmeta_test

import (
	"context"
	"fmt"
	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"path/filepath"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
)

// BenchmarkAppend: one head-log style append per op (reverse scan for the
// newest entry, put the next, read and bump a counter), through a 3-member
// cluster on loopback (fsync off), and through the local bbolt plane
// (NoSync, to match) for scale.
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name string
		open func(*testing.B) meta.Store
	}{
		{"etcd", func(b *testing.B) meta.Store { return etcdmeta.New(etcdtest.Start(b).Client(), "bench") }},
		{"bolt", func(b *testing.B) meta.Store {
			s, err := meta.OpenBolt(filepath.Join(b.TempDir(), "meta.db"), meta.BoltOptions{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := bc.open(b)
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				if err := s.Update(ctx, appendEntry(fmt.Sprint(i), true)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
