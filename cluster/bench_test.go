package cluster

import (
	"context"
	"testing"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
)

// BenchmarkClaimRelease: what a claim adds to a mount and its release to
// an unmount (one Txn each, plus a read before the release), on a session
// already granted; 3 members on loopback.
func BenchmarkClaimRelease(b *testing.B) {
	c := etcdtest.Start(b)
	n := node(b, c, "a", 10)
	cl := n.Claims(1, none, nil, b.Logf)
	defer cl.Close()
	ctx := context.Background()
	if err := cl.Claim(ctx, "warm", "/mnt"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := cl.Claim(ctx, "ws", "/mnt"); err != nil {
			b.Fatal(err)
		}
		if err := cl.Release(ctx, "ws"); err != nil {
			b.Fatal(err)
		}
	}
}
