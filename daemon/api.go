package daemon

import (
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Offline is a daemon that serves nothing, for a command run without
// one: it recovers mounts a dead daemon left (RecoverMount).
func Offline(m *workspace.Manager) *Daemon {
	d := &Daemon{m: m, dir: m.Dir(), logger: log.New(io.Discard, "", 0), mounts: map[string]*Mount{}, quit: make(chan struct{})}
	if n := m.Node(); n != nil {
		// A recovery claims the workspace before it publishes (RecoverMount).
		d.claims = n.Claims(os.Getpid(), func() map[string]string { return nil }, nil, d.logger.Printf)
	}
	return d
}

// Manager is the daemon's open store.
func (d *Daemon) Manager() *workspace.Manager { return d.m }

// Lost lists what recoveries run by this daemon could not keep, for
// status.
func (d *Daemon) Lost() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.lost...)
}

// Workspace is the mounted workspace's name.
func (s *Mount) Workspace() string { return s.ws }

// Mountpoint is where the workspace is mounted.
func (s *Mount) Mountpoint() string { return s.mp }

// TTL is the mount's lease lifetime without renewal (mount --lease-ttl).
func (s *Mount) TTL() time.Duration { return s.ttl }

// By is what owns the mount's implicit leases (mount --lease-by).
func (s *Mount) By() sessions.By { return s.by }

// ReadOnly reports whether the mount is a root of a frozen or discarded
// context (context.go).
func (s *Mount) ReadOnly() bool { return s.readOnly.Load() }

// WaitWarm returns once the mount's metadata warm-up has ended.
func (s *Mount) WaitWarm() { s.mnt.WaitWarm() }

// Bind makes the session tracker keep owner's lease until its processes
// are gone (sessions.Tracker.Bind).
func (s *Mount) Bind(owner sessions.Owner) { s.tracker.Bind(owner) }

// Release ends an explicit binding of owner; it reports true when
// processes of owner's session remain, which then keep the lease until
// the sweep ends it (sessions.Tracker.Release).
func (s *Mount) Release(owner sessions.Owner) bool { return s.tracker.Release(owner) }

// OwnerOfLease is the owner of the mount's open lease with the id as
// printed (an error wrapping ErrBadLeaseID if it is not an id).
func (s *Mount) OwnerOfLease(leaseID string) (sessions.Owner, bool, error) {
	id, err := window.ParseLeaseID(leaseID)
	if err != nil {
		return "", false, fmt.Errorf("%q: %w", leaseID, ErrBadLeaseID)
	}
	o, ok := s.ownerOfLease(id)
	return o, ok, nil
}

func (s *Mount) ownerOfLease(id window.LeaseID) (sessions.Owner, bool) {
	s.acquire(0)
	defer s.release()
	for o, hl := range s.leases {
		if hl.holder.Lease().ID == id {
			return o, true
		}
	}
	return "", false
}

// FreeScratch gives back, in every mount, the space of deleted files its
// last snapshot still named (gc runs it first). It returns the bytes freed.
func (d *Daemon) FreeScratch() (int64, error) {
	var freed int64
	for _, s := range d.All() {
		if s == nil || s.mnt == nil { // nil: a mount being set up
			continue
		}
		n, err := s.mnt.FreeScratch()
		freed += n
		if err != nil {
			return freed, fmt.Errorf("scratch of the mount of %s: %w", s.ws, err)
		}
	}
	return freed, nil
}
