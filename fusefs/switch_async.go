package fusefs

import (
	"fmt"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/store"
)

// SwitchViewQueued is SwitchView for callers that hold a lock which
// request admission waits for (the daemon's reconcile): it switches the
// overlay, makes the switched overlay durable, and queues the kernel
// invalidations without waiting for them. Waiting would deadlock: a
// lookup blocked on admission holds its directory's lock in the kernel,
// and an entry invalidation of that directory waits for the same lock.
// The returned channel closes once the invalidations were sent; wait on
// it only after releasing such locks.
//
// The snapshot is rewritten at once because the switch dropped upper files
// of inodes the new view now contains: an older snapshot would name them.
func (m *Mount) SwitchViewQueued(root store.ID) (<-chan struct{}, error) {
	return m.SwitchViewQueuedLinks(root, nil)
}

// SwitchViewQueuedLinks is SwitchViewQueued to a generation with hard-link
// groups (store.Generation.Links).
func (m *Mount) SwitchViewQueuedLinks(root store.ID, links [][]string) (<-chan struct{}, error) {
	var notes []note
	seq := m.switchStarted.Add(1)
	failpoint.Hit("switch.before")
	if _, err := m.ov.switchView(root, links, &notes); err != nil {
		m.queueNotify([]func(){func() { m.switchNotified.Store(seq) }}) // in order behind earlier switches' notes
		return nil, err
	}
	failpoint.Hit("switch.after-overlay")
	fns := make([]func(), 0, len(notes)+1)
	for _, nt := range notes {
		fns = append(fns, func() { m.sendNote(nt) })
	}
	fns = append(fns, func() { m.switchNotified.Store(seq) })
	done := m.queueNotify(fns)
	if err := m.writeSnapshot(); err != nil {
		return done, fmt.Errorf("switch view: persist overlay: %w", err)
	}
	return done, nil
}
