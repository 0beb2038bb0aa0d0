package etcdmeta

import (
	"context"
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/meta"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ meta.Watcher = (*Store)(nil)

// Revision implements meta.Watcher: the cluster's revision, read
// linearizably.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	resp, err := s.c.Get(ctx, s.dataKey(""), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdmeta: revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Watch implements meta.Watcher with an etcd watch of the prefix's data
// keys from the revision current when Watch is called. The watch requires
// a leader (a member cut off from the cluster ends it) and is started
// again from the last revision seen whenever it ends (a lost stream, a
// member restarted); if that revision was compacted meanwhile, the
// changes in between are unknown, so it reports an event at the current
// revision and goes on from there.
func (s *Store) Watch(ctx context.Context, prefix meta.Key) (<-chan meta.Event, error) {
	if _, _, err := meta.ParsePrefix(prefix); err != nil {
		return nil, err
	}
	start, err := s.Revision(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan meta.Event, 1)
	go s.watchLoop(ctx, string(prefix), start, out)
	return out, nil
}

// watchLoop delivers the events after revision seen until ctx ends, then
// closes out.
func (s *Store) watchLoop(ctx context.Context, prefix string, seen int64, out chan meta.Event) {
	defer close(out)
	key := s.dataKey(prefix)
	for attempt := 1; ctx.Err() == nil; attempt++ {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range s.c.Watch(wctx, key, clientv3.WithPrefix(), clientv3.WithRev(seen+1)) {
			if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				// Lost track: whatever happened in between is reported as
				// one change at the current revision.
				r, err := s.Revision(ctx)
				if err != nil {
					break
				}
				if r > seen {
					seen = r
				}
				send(out, meta.Event{Rev: seen})
				break
			}
			if resp.Err() != nil {
				break
			}
			if n := len(resp.Events); n > 0 {
				if rev := resp.Events[n-1].Kv.ModRevision; rev > seen {
					seen = rev
					send(out, meta.Event{Rev: rev})
				}
				attempt = 0
			}
		}
		cancel()
		if backoff(ctx, attempt) != nil {
			return
		}
	}
}

// send puts ev in the one-slot channel, replacing an event not taken yet
// (its only sender is the watch loop).
func send(out chan meta.Event, ev meta.Event) {
	for {
		select {
		case out <- ev:
			return
		default:
		}
		select {
		case <-out:
		default:
		}
	}
}
