package store

import (
	"context"
	"fmt"

	"github.com/acyclicfs/acyclicfs/meta"
)

// WatchHead reports commits to workspace name's head log through the
// metadata plane's watch (meta.Watcher: events after the call, coalesced,
// possibly spurious; re-read the head on each). ok is false, with no
// error, when the plane cannot watch. The channel closes when ctx ends.
func (s *Store) WatchHead(ctx context.Context, name string) (ch <-chan meta.Event, ok bool, err error) {
	w, ok := s.meta.(meta.Watcher)
	if !ok {
		return nil, false, nil
	}
	if err := ValidWorkspaceName(name); err != nil {
		return nil, false, fmt.Errorf("watch head: %w", err)
	}
	ch, err = w.Watch(ctx, headsSpace(name).Prefix(nil))
	if err != nil {
		return nil, false, fmt.Errorf("watch head of %q: %w", name, err)
	}
	return ch, true, nil
}
