package daemon

import (
	"errors"
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
			// head lacks: store them first, or refuse. Changes made with
			// no lease open (a harness's own edits, docs/windows.md
			// "Harnesses") are captured now, so that what lands has them.
			err := s.storeOwedCapture()
			if err == nil {
				if cerr := s.captureAndPublish(nil); cerr != nil && !errors.Is(cerr, errFencedOut) {
					err = fmt.Errorf("capture %s before it moves: %w", s.ws, cerr)
				}
			}
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

// describeLeases names each lease's owner and those of its live
// processes that are in the mount, with what they hold there, e.g.
// "sid:1234 (pid 1240 sleep: cwd inside, 1 open)"; processes elsewhere
// are only counted, and a lease none of whose processes is in the mount
// says how long ago it made its last request (--idle-close ends it).
// ended reports a session lease none of whose processes is left: it
// exited after the sweep looked.
func (s *Mount) describeLeases(open []openLease) (holders []string, ended bool) {
	owners := map[sessions.Owner]sessions.OwnerInfo{}
	for _, o := range s.tracker.Owners() {
		owners[o.Owner] = o
	}
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
		listed, elsewhere := 0, 0
		for _, p := range procs {
			use := s.procUse(p.PID)
			if use == "" {
				elsewhere++
				continue
			}
			if listed == listedProcs {
				parts = append(parts, "more in the mount")
				break
			}
			listed++
			parts = append(parts, fmt.Sprintf("pid %d %s: %s", p.PID, p.Comm, use))
		}
		if elsewhere > 0 {
			parts = append(parts, fmt.Sprintf("%d process(es) outside the mount", elsewhere))
		}
		if listed == 0 && len(procs) > 0 {
			if oi, ok := owners[l.owner]; ok && !oi.LastRequest.IsZero() {
				parts = append(parts, fmt.Sprintf("none in the mount; last request %v ago", time.Since(oi.LastRequest).Round(10*time.Millisecond)))
			}
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

// procUse says what process pid holds in the mount ("cwd inside, 2 open,
// 1 mapped"), or "" for nothing.
func (s *Mount) procUse(pid int) string {
	cwd, open, mapped := mountUse(pid, s.mnt.Dev(), s.mp)
	var use []string
	if cwd {
		use = append(use, "cwd inside")
	}
	if open > 0 {
		use = append(use, fmt.Sprintf("%d open", open))
	}
	if mapped > 0 {
		use = append(use, fmt.Sprintf("%d mapped", mapped))
	}
	return strings.Join(use, ", ")
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
