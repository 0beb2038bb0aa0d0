package daemon

import (
	"context"
	"time"

	"github.com/acyclicfs/acyclicfs/store"
)

// A mounted child follows its parent's head through the metadata plane's
// watch (meta.Watcher via store.WatchHead): a land into the parent by
// another node (or another process on a shared plane) reaches the mount
// as parentAdvanced, as a land through this daemon does through the
// manager's hook. Both paths meet in parentAdvanced, which handles each
// parent head once (parentSeen), so the watch echoing a land the hook
// already delivered does nothing, and the final close rebases once. No
// lock is held while a head is handled: two different heads may be
// handled at once, as before the watch (the window coalesces them).

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

// followWait bounds how long a second report of a parent head waits for
// the first one's handling: the hook's caller may hold the very lock that
// handling waits for (a command on the mount), and must not wait forever.
const followWait = 10 * time.Second

// takeParentHead takes on parent head h: first is true (and done is to be
// closed when the handling is over) if h is new. A report of the head
// being handled waits until that handling is over (at most followWait),
// so that the hook's caller returns with the child following, as before
// the watch.
func (s *Mount) takeParentHead(h store.ID) (done chan struct{}, first bool) {
	s.followMu.Lock()
	if h == s.parentSeen {
		wait := s.followDone
		s.followMu.Unlock()
		if wait != nil {
			t := time.NewTimer(followWait)
			defer t.Stop()
			select {
			case <-wait:
			case <-t.C:
			}
		}
		return nil, false
	}
	done = make(chan struct{})
	s.parentSeen, s.followDone = h, done
	s.followMu.Unlock()
	return done, true
}

// forgetParentHead undoes takeParentHead(h) if nothing newer was taken.
func (s *Mount) forgetParentHead(h store.ID) {
	s.followMu.Lock()
	defer s.followMu.Unlock()
	if s.parentSeen == h {
		s.parentSeen = store.ID{}
	}
}
