package etcdmeta

import (
	"context"

	"github.com/acyclicfs/acyclicfs/meta"
)

// WatchFrom is Watch from revision rev on, as a watch that lost its
// stream resumes.
func WatchFrom(ctx context.Context, st meta.Store, prefix meta.Key, rev int64) <-chan meta.Event {
	out := make(chan meta.Event, 1)
	go st.(*Store).watchLoop(ctx, string(prefix), rev, out)
	return out
}

// PauseSession stops renewing st's session lease without revoking it, as
// a process stopped by SIGSTOP does: the lease expires after its TTL. It
// returns the lease.
func PauseSession(st meta.Store) int64 {
	s := st.(*Store)
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.lease
	if s.stopKA != nil {
		s.stopKA()
	}
	return int64(id)
}
