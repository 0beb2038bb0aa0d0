package daemon

import (
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/workspace"
)

// Contexts and mounts (docs/contexts.md "Mounted roots"):
//
//   - A mounted workspace that is a root of a frozen or discarded context
//     is read-only: the FUSE mount answers every change with EROFS, and no
//     new lease is opened on it. A tool session whose first request comes
//     after the freeze is admitted without a lease: its requests are served
//     from the mount's current view, it pins no window, and its end
//     reconciles nothing. Explicit leases (lease begin, exec) are refused
//     with ErrContextFrozen (exit 4). Leases open at the freeze run to
//     their end; their final close captures what they wrote before it.
//   - A mounted root of a discarded context is also unmounted once its
//     window closes: at once when it has no open lease, else at the final
//     close of its last lease (reconciled as by unmount, then unmounted).
//   - `context mount CTX` mounts every root at its recorded mountpoint
//     through MountWorkspace; `context unmount CTX` unmounts every mounted
//     root through served.unmount (or the offline recovery of a root whose
//     daemon died).

// applyContextState makes s read-only if its workspace is a root of a
// frozen or discarded context. MountWorkspace calls it before mounting
// (so the mount starts read-only) and again once s is registered: a
// freeze that committed in between and did not see s yet is applied then.
func (d *Daemon) applyContextState(s *Mount) error {
	ctx, ro, err := d.m.ReadOnlyRootOf(s.ws)
	if err != nil {
		return fmt.Errorf("check the contexts of %s: %w", s.ws, err)
	}
	if ro {
		s.setReadOnly(ctx)
	}
	return nil
}

// setReadOnly switches s to read-only (once; never back: frozen and
// discarded contexts stay so).
func (s *Mount) setReadOnly(ctx string) {
	if s.readOnly.Swap(true) {
		return
	}
	if s.mnt != nil { // nil while MountWorkspace prepares it: Config.ReadOnly then
		s.mnt.SetReadOnly(true)
	}
	s.d.logger.Printf("%s at %s: read-only (context %s is frozen or discarded)", s.ws, s.mp, ctx)
}

// refuseReadOnly refuses a new explicit lease on a read-only mount.
func (s *Mount) refuseReadOnly() error {
	if !s.readOnly.Load() {
		return nil
	}
	return fmt.Errorf("%w: %s is a root of a frozen or discarded context; its mount %s is read-only and takes no new leases",
		workspace.ErrContextFrozen, s.ws, s.mp)
}

// afterWindowClosed runs at the end of a window's final close (EndLease,
// with s.lock held): a root of a discarded context is unmounted now that
// its window is closed. The unmount needs s.lock, so it runs on its own
// goroutine; a running unmount (closing) needs no second one.
func (s *Mount) afterWindowClosed() {
	if !s.unmountIdle.Load() || s.closing {
		return
	}
	go s.d.unmountDiscarded(s)
}

// unmountDiscarded unmounts s (a root of a discarded context) unless it is
// gone, being unmounted (or the daemon is stopping), or has leases again
// (their close comes back here).
func (d *Daemon) unmountDiscarded(s *Mount) {
	d.mu.Lock()
	gone := d.stopping || d.mounts[s.ws] != s // shutdown unmounts everything itself
	d.mu.Unlock()
	if gone {
		return
	}
	s.acquire(0)
	busy := s.closing || len(s.leases) > 0
	s.release()
	if busy {
		return
	}
	res, err := s.Unmount(true)
	if err != nil {
		d.logger.Printf("%s: unmount after its context was discarded: %v", s.ws, err)
		return
	}
	d.logger.Printf("%s: unmounted from %s after its context was discarded: %s", s.ws, s.mp, res.Outcome)
	d.stopIfIdle()
}

// stopIfIdle stops a daemon started on demand once nothing is mounted.
func (d *Daemon) stopIfIdle() {
	if !d.exitWhenIdle {
		return
	}
	d.mu.Lock()
	idle := len(d.mounts) == 0
	d.mu.Unlock()
	if idle {
		d.stop()
	}
}

// FreezeMounts makes every mounted root of c read-only at once; notice
// is told of each.
func (d *Daemon) FreezeMounts(c workspace.Context, notice func(format string, args ...any)) {
	for _, r := range c.Roots {
		if s := d.Get(r.Workspace); s != nil {
			s.setReadOnly(c.Name)
			notice("%s: mount %s is read-only", r.Workspace, s.mp)
		}
	}
}

// DiscardMounts makes every mounted root of the discarded contexts cs
// read-only and unmounts it: now if its window is idle, else at its final
// close (afterWindowClosed). notice is told what became of each.
func (d *Daemon) DiscardMounts(cs []workspace.Context, notice func(format string, args ...any)) error {
	var errs []error
	seen := map[string]bool{}
	for _, c := range cs {
		for _, r := range c.Roots {
			s := d.Get(r.Workspace)
			if s == nil || seen[r.Workspace] {
				continue
			}
			seen[r.Workspace] = true
			// Read-only first: from here on no lease can begin, so a count
			// of zero below stays zero; a count above zero ends in a final
			// close, which sees unmountIdle (set before the count).
			s.setReadOnly(c.Name)
			s.unmountIdle.Store(true)
			if !s.acquire(admitWait) {
				errs = append(errs, fmt.Errorf("%w: %s is reconciling; gave up after %v (it unmounts at its next final close)", workspace.ErrBusy, r.Workspace, admitWait))
				continue
			}
			n := len(s.leases)
			s.release()
			if n > 0 {
				notice("%s: read-only; unmounts from %s once its %d open lease(s) close", r.Workspace, s.mp, n)
				continue
			}
			res, err := s.Unmount(true)
			if err != nil {
				errs = append(errs, fmt.Errorf("unmount %s from %s: %w", r.Workspace, s.mp, err))
				continue
			}
			notice("%s: unmounted from %s: %s", r.Workspace, s.mp, res.Outcome)
		}
	}
	return errors.Join(errs...)
}
