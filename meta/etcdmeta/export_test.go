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
