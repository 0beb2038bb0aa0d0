package daemon

import (
	"context"

	"github.com/acyclicfs/acyclicfs/store"
)

// A mounted child follows its parent's head through the metadata plane's
// watch (meta.Watcher via store.WatchHead): a land into the parent by
// another node (or another process on a shared plane) reaches the mount
// as parentAdvanced, as a land through this daemon does through the
// manager's hook. Both paths meet in parentAdvanced, which handles each
// parent head once (parentSeen), so the watch echoing a land the hook
// already delivered does nothing, and the final close rebases once.

// followParent starts following the parent of s's workspace until the
// mount is gone. A plane without watches, or a workspace without a
// parent, is left alone.
func (s *Mount) followParent() {
	w, err := s.d.m.Get(s.ws)
	if err != nil || w.Parent == "" {
		return
	}
	p, err := s.d.m.Get(w.Parent)
	if err != nil {
		return
	}
	s.followMu.Lock()
	if s.parentSeen.IsZero() {
		s.parentSeen = p.Head // what the mount starts from: not news
	}
	s.followMu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	ch, ok, err := s.d.m.Store().WatchHead(ctx, w.Parent)
	if err != nil || !ok {
		cancel()
		if err != nil {
			s.d.logger.Printf("%s: not following parent %s: %v", s.ws, w.Parent, err)
		}
		return
	}
	go func() {
		defer cancel()
		// The parent may have moved between the read above and the watch.
		s.parentMaybeMoved(w.Parent)
		for {
			select {
			case <-s.gone:
				return
			case _, open := <-ch:
				if !open {
					return
				}
				s.parentMaybeMoved(w.Parent)
			}
		}
	}()
}

// parentMaybeMoved reads parent's head and hands it to parentAdvanced,
// which ignores a head it has handled.
func (s *Mount) parentMaybeMoved(parent string) {
	p, err := s.d.m.Get(parent)
	if err != nil {
		s.d.logger.Printf("%s: parent %s: %v", s.ws, parent, err)
		return
	}
	s.parentAdvanced(p.Head)
}

// newParentHead records h as handled and reports whether it was new.
// Called with followMu held.
func (s *Mount) newParentHead(h store.ID) bool {
	if h == s.parentSeen {
		return false
	}
	s.parentSeen = h
	return true
}
