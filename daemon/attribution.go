package daemon

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/acyclicfs/acyclicfs/fusefs"
	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Write attribution and the session log (workspace/attribution.go).
// Each lease's entry is opened by BeginLease and completed by the final
// close of its window: the capture's writers (fusefs TakeWriters) are
// resolved to processes through the tracker, stored with the generation
// the capture produced, and every lease of the window gets its entry
// with the paths its processes changed.

// attrState is the attribution bookkeeping of one window. Guarded by
// Mount.lock.
type attrState struct {
	// leaseOf maps the owners seen in this window to their lease ids.
	leaseOf map[sessions.Owner]string
	// ended: entries of the leases that ended in this window, completed
	// by its final close.
	ended []workspace.SessionEntry
	// pending: writers taken from the overlay by a capture not yet
	// published (a failed capture is retried with them).
	pending []fusefs.PathWriters
	// gen and paths: the latest capture of this window that was published.
	gen   store.ID
	paths []workspace.PathAttribution
}

// leaseKind names what opened a lease.
func leaseKind(explicit bool, label string) string {
	switch {
	case !explicit:
		return "session"
	case strings.HasPrefix(label, "exec "):
		return "exec"
	default:
		return "lease"
	}
}

// ownerPID is the pid an owner key names ("sid:N" → N); 0 if none.
func ownerPID(o sessions.Owner) uint32 {
	s := string(o)
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseUint(s[i+1:], 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

// leaderArgv is the command line of owner's session leader: as the
// tracker saw it while it made requests, else as /proc shows it now.
func (s *Mount) leaderArgv(owner sessions.Owner) []string {
	pid := ownerPID(owner)
	if pid == 0 || s.tracker == nil {
		return nil
	}
	if pi, ok := s.tracker.Proc(pid); ok && len(pi.Argv) > 0 {
		return pi.Argv
	}
	return s.tracker.ReadProcess(pid).Argv
}

// noteLeaseBegun remembers a new lease for the window's records. Called
// with s.lock held.
func (s *Mount) noteLeaseBegun(hl *heldLease) {
	if s.attr.leaseOf == nil {
		s.attr.leaseOf = map[sessions.Owner]string{}
	}
	s.attr.leaseOf[hl.owner] = hl.id.String()
	hl.leader = s.leaderArgv(hl.owner)
	s.leaseMu.Lock()
	if s.leaseInfo == nil {
		s.leaseInfo = map[sessions.Owner]leaseDesc{}
	}
	s.leaseInfo[hl.owner] = leaseDesc{id: hl.id.String(), kind: leaseKind(hl.explicit, hl.label), leader: hl.leader, start: hl.since.UnixNano()}
	s.leaseMu.Unlock()
}

// leaseDesc is what the overlay log records of a lease with its writers.
type leaseDesc struct {
	id, kind string
	leader   []string
	start    int64
}

// describeWriter describes a writer for the overlay log
// (fusefs.Config.DescribeWriter): its program as the tracker read it,
// its session and that session's lease. Called by the overlay while it
// serves, once per writer per log; takes neither s.lock nor anything
// the overlay waits for.
func (s *Mount) describeWriter(w fusefs.WriterRef) fusefs.WriterInfo {
	info := fusefs.WriterInfo{Ref: w}
	if s.tracker == nil {
		return info
	}
	pi, ok := s.tracker.ProcExec(w.PID, w.Exec)
	if !ok {
		return info
	}
	info.Comm, info.Argv, info.ArgvTruncated, info.Session = pi.Comm, pi.Argv, pi.Truncated, string(pi.Owner)
	s.leaseMu.Lock()
	if l, ok := s.leaseInfo[pi.Owner]; ok {
		info.Lease, info.LeaseKind, info.Leader, info.LeaseStart = l.id, l.kind, l.leader, l.start
	}
	s.leaseMu.Unlock()
	return info
}

// noteLeaseEnded queues hl's entry for the window's final close. Called
// with s.lock held.
func (s *Mount) noteLeaseEnded(hl *heldLease) {
	leader := s.leaderArgv(hl.owner) // exec's leader has exec'd its command by now
	if len(leader) == 0 {
		leader = hl.leader
	}
	if leader == nil {
		leader = []string{}
	}
	s.attr.ended = append(s.attr.ended, workspace.SessionEntry{
		Workspace: s.ws, Lease: hl.id.String(), Owner: string(hl.owner), Kind: leaseKind(hl.explicit, hl.label),
		Leader: leader, Start: hl.since.UnixMilli(), StartNS: hl.since.UnixNano(), End: time.Now().UnixMilli(),
	})
}

// takeWriters moves the overlay's writers into the pending set before a
// capture. Called with s.lock held.
func (s *Mount) takeWriters() {
	ws := s.view.TakeWriters()
	if len(ws) == 0 {
		return
	}
	if len(s.attr.pending) == 0 {
		s.attr.pending = ws
		return
	}
	byPath := map[string]int{}
	for i, p := range s.attr.pending {
		byPath[p.Path] = i
	}
	for _, w := range ws {
		i, ok := byPath[w.Path]
		if !ok {
			byPath[w.Path] = len(s.attr.pending)
			s.attr.pending = append(s.attr.pending, w)
			continue
		}
		p := &s.attr.pending[i]
		for _, x := range w.Writers {
			if !slices.Contains(p.Writers, x) {
				p.Writers = append(p.Writers, x)
			}
		}
		p.Last = max(p.Last, w.Last)
	}
}

// recordCapture stores the attribution of the published capture gen;
// with attribution off (noAttr) none: the window's session entries still
// name gen. Called with s.lock held; a failure is logged, never fails the
// close.
func (s *Mount) recordCapture(gen store.ID) {
	pending := s.attr.pending
	s.attr.pending = nil
	if s.noAttr {
		s.attr.gen = gen
		return
	}
	// Blame looks paths up by binary search: merged retries appended.
	slices.SortFunc(pending, func(a, b fusefs.PathWriters) int { return strings.Compare(a.Path, b.Path) })
	paths := make([]workspace.PathAttribution, 0, len(pending))
	for _, p := range pending {
		pa := workspace.PathAttribution{Path: p.Path}
		for _, x := range p.Writers {
			w := workspace.Writer{PID: x.PID, Argv: []string{}, First: p.First / 1e6, Last: p.Last / 1e6}
			if s.tracker != nil {
				if pi, ok := s.tracker.ProcExec(x.PID, x.Exec); ok {
					w.Comm, w.ArgvTruncated, w.Session = pi.Comm, pi.Truncated, string(pi.Owner)
					if pi.Argv != nil {
						w.Argv = pi.Argv
					}
					w.Lease = s.attr.leaseOf[pi.Owner]
				}
			}
			pa.Writers = append(pa.Writers, w)
		}
		paths = append(paths, pa)
	}
	s.attr.gen, s.attr.paths = gen, append(s.attr.paths, paths...)
	sessionsOf := []string{}
	for _, id := range s.attr.leaseOf {
		sessionsOf = append(sessionsOf, id)
	}
	a := &workspace.Attribution{Generation: gen, Workspace: s.ws, Time: time.Now().UnixMilli(), Sessions: sessionsOf, Paths: paths}
	if err := s.d.m.RecordAttribution(a, nil); err != nil {
		s.d.logger.Printf("%s: record attribution of %s: %v", s.ws, gen.Short(), err)
	}
}

// recordWindow completes and stores the entries of the leases of the
// window that just closed with outcome. Called with s.lock held.
func (s *Mount) recordWindow(outcome workspace.Outcome) {
	entries := s.attr.ended
	for i := range entries {
		e := &entries[i]
		e.Outcome, e.Generation, e.Paths = string(outcome), s.attr.gen, []string{}
		for _, pa := range s.attr.paths {
			for _, w := range pa.Writers {
				if w.Session == e.Owner {
					e.Paths = append(e.Paths, pa.Path)
					break
				}
			}
		}
		e.PathCount = len(e.Paths)
	}
	if err := s.d.m.RecordAttribution(nil, entries); err != nil {
		s.d.logger.Printf("%s: record %d session entries: %v", s.ws, len(entries), err)
	}
	s.attr = attrState{}
	s.leaseMu.Lock()
	s.leaseInfo = nil
	s.leaseMu.Unlock()
	if s.tracker != nil {
		s.tracker.PruneProcs()
	}
}

// recoveredOutcome is the outcome of the session entries a recovery
// writes for the leases of a dead daemon.
const recoveredOutcome = "recovered"

// orphanLeases lists the leases the window of ws still holds (a dead
// daemon's, before recovery claims the window).
func (d *Daemon) orphanLeases(ws string) []window.LeaseRecord {
	snap, err := d.m.Windows().Inspect(context.Background(), ws)
	if err != nil || snap.Phase.Kind != window.PhaseActive {
		return nil
	}
	out := make([]window.LeaseRecord, 0, len(snap.Phase.Leases))
	for _, l := range snap.Phase.Leases {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b window.LeaseRecord) int { return strings.Compare(a.ID.String(), b.ID.String()) })
	return out
}

// recordRecovered stores what a recovery learnt from a dead mount's
// overlay log: the attribution of its capture gen (zero: it captured
// nothing) and a session entry, outcome "recovered", for each lease of
// the dead daemon that has none — the ones its writers name, the ones
// its window still held, and the ones the attribution of its last
// published capture (that of head, the workspace's head before the
// recovery) names: a daemon killed between storing a capture's
// attribution and its window's entries. A failure is logged, never
// fails the recovery.
func (d *Daemon) recordRecovered(ws string, head, gen store.ID, paths []fusefs.RecoveredPath, orphans []window.LeaseRecord) {
	now := time.Now()
	have := map[string]bool{}
	if es, err := d.m.Sessions(ws, 0, false); err == nil {
		for _, e := range es {
			have[e.Lease] = true
		}
	}
	type lease struct {
		e     workspace.SessionEntry
		known bool // described by a writer record
	}
	leases := map[string]*lease{}
	var order []string
	add := func(id string) *lease {
		l := leases[id]
		if l == nil {
			l = &lease{e: workspace.SessionEntry{Workspace: ws, Lease: id, Leader: []string{}, Outcome: recoveredOutcome,
				Generation: gen, Paths: []string{}, End: now.UnixMilli()}}
			leases[id] = l
			order = append(order, id)
		}
		return l
	}
	var recs []workspace.PathAttribution
	for _, p := range paths {
		pa := workspace.PathAttribution{Path: p.Path}
		for _, w := range p.Writers {
			argv := w.Argv
			if argv == nil {
				argv = []string{}
			}
			pa.Writers = append(pa.Writers, workspace.Writer{PID: w.Ref.PID, Comm: w.Comm, Argv: argv, ArgvTruncated: w.ArgvTruncated,
				Session: w.Session, Lease: w.Lease, First: p.First / 1e6, Last: p.Last / 1e6})
			if w.Lease == "" {
				continue
			}
			l := add(w.Lease)
			if !l.known {
				l.known = true
				l.e.Owner, l.e.Kind, l.e.StartNS = w.Session, w.LeaseKind, w.LeaseStart
				if w.Leader != nil {
					l.e.Leader = w.Leader
				}
			}
			if !slices.Contains(l.e.Paths, p.Path) {
				l.e.Paths = append(l.e.Paths, p.Path)
			}
		}
		recs = append(recs, pa)
	}
	if a, ok, err := d.m.Attribution(head); err == nil && ok && a.Workspace == ws && !head.IsZero() {
		for _, id := range a.Sessions {
			if have[id] {
				continue
			}
			l := add(id)
			if l.known {
				continue
			}
			l.known = true
			l.e.Generation, l.e.Kind, l.e.StartNS = head, "", now.UnixNano()+int64(len(order))
			for _, pa := range a.Paths {
				for _, w := range pa.Writers {
					if w.Lease != id {
						continue
					}
					l.e.Owner = w.Session
					if !slices.Contains(l.e.Paths, pa.Path) {
						l.e.Paths = append(l.e.Paths, pa.Path)
					}
					if w.PID == ownerPID(sessions.Owner(w.Session)) && len(w.Argv) > 0 {
						l.e.Leader = w.Argv
					}
				}
			}
		}
	}
	for i, o := range orphans {
		l := add(o.ID.String())
		if !l.known {
			// Known by its label only: an implicit session's label is its
			// owner, an exec's "exec OWNER"; its start is not recorded.
			l.e.Owner, l.e.StartNS = strings.TrimPrefix(o.Owner, "exec "), now.UnixNano()+int64(i)
		}
		if l.e.Kind == "" {
			l.e.Kind = orphanKind(o.Owner) // the label tells an exec's lease
		}
	}
	entries := make([]workspace.SessionEntry, 0, len(order))
	for _, id := range order {
		e := leases[id].e
		if have[id] {
			continue
		}
		if e.Kind == "" {
			e.Kind = orphanKind(e.Owner)
		}
		e.Start, e.PathCount = e.StartNS/1e6, len(e.Paths)
		entries = append(entries, e)
	}
	var a *workspace.Attribution
	if !gen.IsZero() && len(recs) > 0 {
		ids := []string{}
		for _, id := range order {
			if leases[id].e.Generation == gen {
				ids = append(ids, id)
			}
		}
		a = &workspace.Attribution{Generation: gen, Workspace: ws, Time: now.UnixMilli(), Sessions: ids, Paths: recs}
	}
	if err := d.m.RecordAttribution(a, entries); err != nil {
		d.logger.Printf("%s: record recovered attribution: %v", ws, err)
	}
}

// orphanKind is the kind of a lease known only by its label.
func orphanKind(label string) string {
	switch {
	case strings.HasPrefix(label, "exec "):
		return "exec"
	case strings.HasPrefix(label, "sid:"), strings.HasPrefix(label, "pgid:"), strings.HasPrefix(label, "pid:"):
		return "session"
	default:
		return "lease"
	}
}
