package daemon

import (
	"errors"
	"fmt"
	"slices"

	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
)

// Harnesses (docs/windows.md "Harnesses"): a coding agent's long-lived
// process declared with `lease harness PID` holds no lease; each process
// tree it starts is one lease (sessions.Tracker.DeclareHarness).

// DeclareHarness makes pid a harness of this mount.
func (s *Mount) DeclareHarness(pid int) error {
	if err := s.tracker.DeclareHarness(pid); err != nil {
		return fmt.Errorf("%s: %w", s.mp, err)
	}
	return nil
}

// DeclareHarness makes pid a harness of every mount this daemon serves and
// of the ones it mounts later, while pid lives; it returns the
// mountpoints it applies to now.
func (d *Daemon) DeclareHarness(pid int) ([]string, error) {
	start, err := sessions.StartTime(pid)
	if err != nil {
		return nil, fmt.Errorf("harness %d: %w", pid, err)
	}
	h := declared{pid, start}
	d.mu.Lock()
	// Harnesses that exited are forgotten here (and by applyHarnesses).
	d.harnesses = slices.DeleteFunc(d.harnesses, func(x declared) bool {
		st, err := sessions.StartTime(x.pid)
		return err != nil || st != x.start
	})
	if !slices.Contains(d.harnesses, h) {
		d.harnesses = append(d.harnesses, h)
	}
	d.mu.Unlock()
	var mps []string
	for _, s := range d.All() {
		if err := s.tracker.DeclareHarnessStarted(pid, start); err != nil {
			d.forgetHarness(h)
			return nil, fmt.Errorf("%s: %w", s.mp, err)
		}
		mps = append(mps, s.mp)
	}
	return mps, nil
}

// declared is a daemon-wide harness: its pid and start time.
type declared struct {
	pid   int
	start uint64
}

func (d *Daemon) forgetHarness(h declared) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.harnesses = slices.DeleteFunc(d.harnesses, func(x declared) bool { return x == h })
}

// applyHarnesses declares the daemon-wide harnesses to a new mount's
// tracker; one that exited meanwhile is forgotten.
func (d *Daemon) applyHarnesses(tr *sessions.Tracker) {
	d.mu.Lock()
	hs := slices.Clone(d.harnesses)
	d.mu.Unlock()
	for _, h := range hs {
		if err := tr.DeclareHarnessStarted(h.pid, h.start); errors.Is(err, sessions.ErrNoProcess) {
			d.forgetHarness(h)
		} else if err != nil {
			d.logger.Printf("harness %d: %v", h.pid, err)
		}
	}
}
