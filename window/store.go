package window

import "context"

// Store persists one Snapshot per workspace with compare-and-swap. It is kept
// this narrow so that a distributed backend (etcd transactions) can implement
// it; every implementation runs the windowtest conformance suite.
type Store interface {
	// Load returns the workspace's current snapshot, or IdleSnapshot with
	// Revision 0 if none was ever stored. Corrupt or future-version state
	// is an error wrapping ErrIncompatibleState.
	Load(ctx context.Context, workspace string) (Snapshot, error)
	// CompareAndSwap stores next if the current revision is expectRevision
	// (0: nothing stored yet) and reports whether it did. next must have
	// Revision expectRevision+1 and a valid shape, else the call fails with
	// ErrIncompatibleState. Implementations that keep lease gates open,
	// renew and fence them atomically with the swap.
	CompareAndSwap(ctx context.Context, workspace string, expectRevision uint64, next Snapshot) (swapped bool, err error)
}
