package daemon

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// settleWait bounds how long refuseIfActive waits for the final closes
// (capture, reconcile) of sessions that have ended, and for a reconcile
// in progress: as long as a new session waits for one.
const settleWait = admitWait

// settleSweeps bounds the sweeps refuseIfActive runs: another one only
// when a session's last process exited after the previous sweep's scan.
const settleSweeps = 3

// listedProcs is how many processes of one lease a busy message names.
const listedProcs = 5

// RefuseIfActive fails for a workspace whose window is open: its head may
// only move at the window's final close. A session whose processes have
// all exited does not count: the periodic sweep would notice it within
// its interval (sessions.DefaultSweepInterval), so this sweeps now and
// waits, bounded by settleWait, for the final close it starts (or one
// already running) to finish. What stays open is really in use; the
// error (an *OpenLeasesError, wrapping workspace.ErrBusy) names each lease
// and its live processes.
func (d *Daemon) RefuseIfActive(ws string) error {
	s := d.Get(ws)
	if s == nil {
		return nil
	}
	return s.refuseIfActive(settleWait)
}

// OpenLeasesError is RefuseIfActive's refusal.
type OpenLeasesError struct {
	Workspace string
	Holders   []string // one per open lease: its owner and processes
}

func (e *OpenLeasesError) Error() string {
	return fmt.Sprintf("%v: %s has open leases: %s", workspace.ErrBusy, e.Workspace, strings.Join(e.Holders, "; "))
}

func (e *OpenLeasesError) Unwrap() error { return workspace.ErrBusy }

// openLease is a copy of one held lease for the busy message.
type openLease struct {
	owner    sessions.Owner
	label    string
	explicit bool
	id       string
}

// refuseIfActive is daemon.refuseIfActive for this mount, waiting at most
// wait.
func (s *Mount) refuseIfActive(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	left := func() time.Duration { return max(time.Until(deadline), time.Millisecond) }
	gaveUp := func() error {
		return fmt.Errorf("%w: %s is reconciling (a final close, or a rebase onto its parent); gave up after %v", workspace.ErrBusy, s.ws, wait)
	}
	for sweep := 0; ; sweep++ {
		// The first look needs no sweep when no lease is open; a final
		// close in progress holds the lock, and is waited for here.
		if sweep > 0 && !s.sweepNow(left()) {
			return gaveUp()
		}
		if !s.acquire(left()) {
			return gaveUp()
		}
		open := make([]openLease, 0, len(s.leases))
		for o, hl := range s.leases {
			open = append(open, openLease{owner: o, label: hl.label, explicit: hl.explicit, id: hl.holder.Lease().ID.String()})
		}
		if len(open) == 0 {
			// A capture owed (it failed, for space say) holds changes the
			// head lacks: store them first, or refuse.
			err := s.storeOwedCapture()
			s.release()
			return err
		}
		s.release()
		if sweep == 0 {
			continue
		}
		sort.Slice(open, func(i, j int) bool { return open[i].owner < open[j].owner })
		holders, ended := s.describeLeases(open)
		if !ended || sweep == settleSweeps {
			return &OpenLeasesError{Workspace: s.ws, Holders: holders}
		}
	}
}

// sweepNow runs the session tracker's sweep and reports whether it (and
// the final closes it ran) finished within wait. A sweep in progress is
// waited for first: it may be running the very final close we wait for.
// When wait passes, the sweep goes on in the background.
func (s *Mount) sweepNow(wait time.Duration) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.tracker.Sweep()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// describeLeases names each lease's owner and live processes, e.g.
// "sid:1234 (pid 1234 sleep, pid 1240 sh)". ended reports a session
// lease none of whose processes is left: it exited after the sweep looked.
func (s *Mount) describeLeases(open []openLease) (holders []string, ended bool) {
	for _, l := range open {
		procs, err := s.tracker.Processes(l.owner)
		var parts []string
		// Session leases: implicit ones, and exec's (its command's session).
		session := !l.explicit || strings.HasPrefix(l.label, "exec ")
		switch {
		case !session:
			parts = append(parts, "lease "+l.id)
		case l.explicit:
			parts = append(parts, "exec")
		}
		for i, p := range procs {
			if i == listedProcs {
				parts = append(parts, fmt.Sprintf("and %d more", len(procs)-i))
				break
			}
			parts = append(parts, fmt.Sprintf("pid %d %s", p.PID, p.Comm))
		}
		if len(procs) == 0 && session {
			if err != nil {
				parts = append(parts, fmt.Sprintf("processes unknown: %v", err))
			} else {
				parts = append(parts, "no process left")
				ended = true
			}
		}
		holders = append(holders, fmt.Sprintf("%s (%s)", l.owner, strings.Join(parts, ", ")))
	}
	return holders, ended
}

// storeOwedCapture retries a capture that failed, if one is owed, and
// fails while it still cannot be stored: the head lacks what the mount
// holds. Called with s.lock held and no lease open.
func (s *Mount) storeOwedCapture() error {
	if s.failed == nil {
		return nil
	}
	s.retryLocked()
	if s.failed != nil {
		return fmt.Errorf("%s's mount holds changes no capture could store yet: %w", s.ws, s.failedErr())
	}
	return nil
}
