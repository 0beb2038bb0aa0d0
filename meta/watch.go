package meta

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
)

// Watcher is implemented by a plane that can tell a process when records
// change, so that a node follows another node's commits without polling
// (the daemon follows the heads of its mounted children's parents).
type Watcher interface {
	// Watch reports commits that wrote under prefix (Space.Prefix, or a
	// full Key): after Watch returns, every such commit is followed by an
	// Event whose Rev is at least the commit's revision. Events come in
	// commit order (Rev increasing); several commits may be coalesced into
	// one event (the newest), and an event may be spurious (nothing under
	// prefix changed), so the receiver re-reads what it watches. The
	// channel is closed when ctx ends. A plane that loses track (a
	// compacted revision, a broken stream) re-establishes the watch and
	// reports an event, so the receiver re-reads and misses nothing.
	Watch(ctx context.Context, prefix Key) (<-chan Event, error)
	// Revision returns the plane's revision: that of the newest commit
	// (0 before any, for a process-local plane).
	Revision(ctx context.Context) (int64, error)
}

// Event says that something under a watched prefix changed at revision
// Rev (the plane's commit counter: etcd's revision, or a process-local
// count of commits for Memory and Bolt).
type Event struct {
	Rev int64
}

// notifier is the in-process Watch of Memory and Bolt: a transaction
// marks the subscriptions its writes touch (no work while nobody
// watches), and the commit sends each one an event, coalesced in a
// one-slot channel.
type notifier struct {
	nsubs atomic.Int32  // len(subs), read without mu on every write
	epoch atomic.Uint64 // bumped by every Watch

	mu   sync.Mutex // protects subs, rev and the sends
	subs map[*subscription]struct{}
	rev  int64
}

type subscription struct {
	prefix string
	epoch  uint64 // the notifier's epoch when it was made
	ch     chan Event
}

// txWatch is one transaction's bookkeeping.
type txWatch struct {
	epoch uint64
	wrote bool
	hit   map[*subscription]bool
}

func (n *notifier) begin() txWatch { return txWatch{epoch: n.epoch.Load()} }

// wrote records a write of key k (or of every key under k, if prefix).
func (n *notifier) wrote(w *txWatch, k Key, prefix bool) {
	w.wrote = true
	if n.nsubs.Load() == 0 {
		return
	}
	ks := string(k)
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.subs {
		if strings.HasPrefix(ks, s.prefix) || (prefix && strings.HasPrefix(s.prefix, ks)) {
			if w.hit == nil {
				w.hit = map[*subscription]bool{}
			}
			w.hit[s] = true
		}
	}
}

// commit sends the events of a committed transaction. A subscription made
// after the transaction began gets one whatever was written (its writes
// before the Watch were not matched against it).
func (n *notifier) commit(w *txWatch) {
	if !w.wrote {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rev++
	for s := range n.subs {
		if w.hit[s] || s.epoch > w.epoch {
			s.send(Event{Rev: n.rev})
		}
	}
}

// send puts ev in the one-slot channel, replacing an event the receiver
// has not taken yet (coalescing). Called with the notifier's mu held, so
// one sender at a time.
func (s *subscription) send(ev Event) {
	for {
		select {
		case s.ch <- ev:
			return
		default:
		}
		select {
		case <-s.ch: // taken back: ev is newer
		default: // the receiver took it meanwhile: send again
		}
	}
}

func (n *notifier) watch(ctx context.Context, prefix Key) (<-chan Event, error) {
	if _, _, err := ParsePrefix(prefix); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &subscription{prefix: string(prefix), epoch: n.epoch.Add(1), ch: make(chan Event, 1)}
	n.mu.Lock()
	if n.subs == nil {
		n.subs = map[*subscription]struct{}{}
	}
	n.subs[s] = struct{}{}
	n.nsubs.Store(int32(len(n.subs)))
	n.mu.Unlock()
	context.AfterFunc(ctx, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.subs, s)
		n.nsubs.Store(int32(len(n.subs)))
		close(s.ch)
	})
	return s.ch, nil
}

func (n *notifier) revision(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rev, nil
}
