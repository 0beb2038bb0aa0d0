package daemon

import (
	"context"

	"github.com/acyclicfs/acyclicfs/workspace"
)

// queuedPull is a git pull waiting for a mount's final close.
type queuedPull struct {
	env []string // the client's git identity variables
}

// QueuePull queues a git pull of ws for its mount's final close; it
// reports false when ws is not mounted here or no lease is open any more
// (the caller then pulls at once). The lease check and the queueing hold
// the mount's lock, which the final close holds too: a pull is never
// queued after the close that should have run it.
func (d *Daemon) QueuePull(ws string, env []string) bool {
	s := d.Get(ws)
	if s == nil || !s.acquire(admitWait) {
		return false
	}
	defer s.release()
	if len(s.leases) == 0 || s.closing {
		return false
	}
	s.pull = &queuedPull{env: env}
	return true
}

// runQueuedPull runs a pull queued for this final close (called with
// s.lock held, after the capture was published and the view switched);
// the close's outcome becomes the pull's. A failed pull is logged and
// leaves res.
func (s *Mount) runQueuedPull(res workspace.Result) workspace.Result {
	q := s.pull
	if q == nil {
		return res
	}
	s.pull = nil
	pr, err := s.d.m.GitPull(context.Background(), s.ws, q.env)
	if err != nil {
		s.d.logger.Printf("%s: queued git pull: %v", s.ws, err)
		return res
	}
	if pr.Already {
		return res
	}
	s.d.logger.Printf("%s: queued git pull: %s %s..%s", s.ws, pr.Outcome, short12(pr.Old), short12(pr.New))
	if err := s.switchToHead(); err != nil {
		s.d.logger.Printf("%s: queued git pull: %v", s.ws, err)
	}
	return pr.Result
}

// short12 shortens a git object name for the log.
func short12(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	if s == "" {
		return "-"
	}
	return s
}
