package sessions

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Handler opens and closes implicit leases on behalf of the Tracker.
type Handler interface {
	// Begin opens a lease for owner. It may block (for example while the
	// mount reconciles). An error makes the Admit that caused it fail and
	// leaves the owner without a lease.
	Begin(owner Owner) error
	// End closes owner's lease: its last process is gone or it idled out.
	// It is called exactly once per successful Begin and never concurrently
	// with Begin for the same owner.
	End(owner Owner)
}

// Config configures a Tracker.
type Config struct {
	// By selects the owner key; BySID by default.
	By By
	// MountPoint is the absolute mount path. Idle-close looks for working
	// directories and open files under it.
	MountPoint string
	// IdleClose, when positive, ends a lease that had no request for this
	// long and whose processes have no cwd or open fd under MountPoint.
	IdleClose time.Duration
	// KeepWaitingShells keeps the lease of a session whose processes are
	// all shells waiting for their next command on stdin (shell.go);
	// by default, with a MountPoint, a sweep ends it.
	KeepWaitingShells bool
	// SweepInterval is the background sweep period; 0 means 200ms and a
	// negative value disables the background loop (tests call Sweep).
	SweepInterval time.Duration
	// Handler receives Begin/End; required.
	Handler Handler
	// ProcRoot is the proc tree to read; "/proc" by default.
	ProcRoot string
	// IgnorePIDs are admitted without a lease (e.g. the daemon itself).
	IgnorePIDs []int
	// Now is the clock used for idle-close and status; time.Now by default.
	// Tests inject a fake clock instead of sleeping.
	Now func() time.Time
}

// DefaultSweepInterval is used when Config.SweepInterval is zero.
const DefaultSweepInterval = 200 * time.Millisecond

// OwnerInfo describes one owner for status output.
type OwnerInfo struct {
	Owner    Owner
	Explicit bool // bound by the daemon (exec, lease begin); never swept
	Pending  bool // Begin still running
	// LastRequest is the time of the owner's last request, rounded up to the
	// sweep that observed it.
	LastRequest time.Time
	LivePIDs    int // processes of the owner seen by the last sweep
}

// phase is an owner's lease lifecycle state.
type phase uint8

const (
	phasePending phase = iota // Begin running; done closes when it returns
	phaseHeld                 // lease open (implicit, or explicit when binds > 0)
	phaseEnding               // End running; done closes when it returns
	phaseGone                 // removed from Tracker.owners; cached pointers are stale
)

// ownerState is one owner's lease. Every field except seenEpoch is guarded
// by Tracker.mu (owner and id never change after creation).
type ownerState struct {
	owner Owner
	id    int  // numeric id for liveness matching; -1 for foreign (explicit) owners
	tree  bool // a harness's tool tree: id is its root child, matched by ancestry
	phase phase
	binds int           // explicit Bind count; > 0 means never swept
	done  chan struct{} // closed when a pending Begin or an ending End finishes
	err   error         // Begin's error, set with phaseGone

	lastRequest time.Time // refreshed by sweeps from seenEpoch
	sweptEpoch  uint64    // seenEpoch already folded into lastRequest
	livePIDs    int       // from the last sweep

	// seenEpoch is the sweep epoch of the latest request; written by Admit
	// under Tracker.mu.RLock, hence atomic. Sweeps turn it into lastRequest,
	// which keeps the clock off the hot path.
	seenEpoch atomic.Uint64
}

// touch records a request in epoch e. It loads before storing so that a
// steady stream of requests does not bounce the cache line between cores.
func (o *ownerState) touch(e uint64) {
	if o.seenEpoch.Load() != e {
		o.seenEpoch.Store(e)
	}
}

// pidEntry caches what the tracker knows about one pid. It is immutable
// except for os and comm, which are guarded by Tracker.mu.
type pidEntry struct {
	owner   Owner
	id      int
	start   uint64 // stat field 22; a different value means the pid was reused
	ignored bool   // Config.IgnorePIDs: admitted without a lease
	harness bool   // a thread of a declared harness: admitted without a lease
	tree    bool   // owner is a harness's tool tree (id: its root child)
	os      *ownerState
	// comm is an open /proc/PID/comm (-1: none), which ExecGen reads
	// to notice an exec (procinfo.go); closed with mu held for writing
	// when the entry goes, read with mu held for reading.
	comm int
}

// Tracker turns per-request pids into lease Begin/End events. See the package
// documentation for the locking rules.
type Tracker struct {
	by        By
	procRoot  string
	mountPt   string
	idleClose time.Duration
	// shellClose ends the leases of sessions waiting at a shell prompt.
	shellClose bool
	handler    Handler
	now        func() time.Time

	// epoch counts sweeps. Admit stamps it into ownerState.seenEpoch.
	epoch atomic.Uint64

	// mu guards pids, owners, closed and the guarded fields of every
	// ownerState and pidEntry. Admit's fast path takes only RLock. Handler
	// methods are never called with mu held.
	mu   sync.RWMutex
	pids map[uint32]*pidEntry
	// ignoreTgid holds Config.IgnorePIDs as thread-group ids; written only
	// by New, read without locks afterwards.
	ignoreTgid map[int]bool
	owners     map[Owner]*ownerState
	closed     bool
	// procs describes the processes seen (procinfo.go), one entry per
	// program a pid ran (index: its exec generation); pruned by
	// PruneProcs, never by sweeps, so that a writer that exited before
	// the capture is still named.
	procs map[uint32][]ProcInfo

	// harnesses are the declared harnesses (pid -> start time) and trees
	// the members of their tool trees the last sweep saw (harness.go);
	// both guarded by mu and replaced, never changed in place.
	harnesses map[int]uint64
	trees     map[int]treeMember

	// sweepMu serialises sweeps (background loop, Sweep, EndAll) so that
	// their proc scans and decisions do not interleave; taken before mu.
	sweepMu sync.Mutex

	stop     chan struct{} // closed by Close to stop the loop
	loopDone chan struct{} // closed when the loop returns; nil without a loop
	stopOnce sync.Once
}

// New validates cfg and starts the background sweeper (unless
// cfg.SweepInterval is negative).
func New(cfg Config) (*Tracker, error) {
	if cfg.Handler == nil {
		return nil, fmt.Errorf("new tracker: nil Handler: %w", ErrInvalidConfig)
	}
	if !cfg.By.valid() {
		return nil, fmt.Errorf("new tracker: %w", ErrInvalidLeaseBy)
	}
	if cfg.IdleClose < 0 {
		return nil, fmt.Errorf("new tracker: negative IdleClose: %w", ErrInvalidConfig)
	}
	mp := ""
	if cfg.MountPoint != "" {
		if !filepath.IsAbs(cfg.MountPoint) {
			return nil, fmt.Errorf("new tracker: mount point %q is not absolute: %w", cfg.MountPoint, ErrInvalidConfig)
		}
		mp = filepath.Clean(cfg.MountPoint)
	} else if cfg.IdleClose > 0 {
		return nil, fmt.Errorf("new tracker: IdleClose needs MountPoint: %w", ErrInvalidConfig)
	}
	t := &Tracker{
		by:         cfg.By,
		procRoot:   cfg.ProcRoot,
		mountPt:    mp,
		idleClose:  cfg.IdleClose,
		shellClose: mp != "" && !cfg.KeepWaitingShells,
		handler:    cfg.Handler,
		now:        cfg.Now,
		pids:       make(map[uint32]*pidEntry),
		procs:      make(map[uint32][]ProcInfo),
		owners:     make(map[Owner]*ownerState),
		stop:       make(chan struct{}),
	}
	if t.procRoot == "" {
		t.procRoot = "/proc"
	}
	if t.now == nil {
		t.now = time.Now
	}
	t.epoch.Store(1)
	for _, p := range cfg.IgnorePIDs {
		if p > 0 && p <= 1<<32-1 {
			t.pids[uint32(p)] = &pidEntry{ignored: true, comm: -1}
			if t.ignoreTgid == nil {
				t.ignoreTgid = map[int]bool{}
			}
			t.ignoreTgid[p] = true
		}
	}
	interval := cfg.SweepInterval
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	if interval > 0 {
		t.loopDone = make(chan struct{})
		go t.loop(interval)
	}
	return t, nil
}

// Admit is called at the start of every FUSE request with the caller's pid.
// It returns nil once the caller's owner holds a lease, opening one through
// Handler.Begin on the owner's first request. Concurrent first requests of
// one owner share a single Begin and its result.
//
// For a known pid whose owner holds a lease it does one RLock'd map lookup:
// no syscalls, no allocation.
func (t *Tracker) Admit(pid uint32) error {
	if pid == 0 {
		return nil // kernel-internal or pid outside our namespace
	}
	t.mu.RLock()
	e := t.pids[pid]
	if e != nil {
		if e.ignored || e.harness {
			t.mu.RUnlock()
			return nil
		}
		if o := e.os; o != nil && o.phase == phaseHeld {
			o.touch(t.epoch.Load())
			t.mu.RUnlock()
			return nil
		}
	}
	t.mu.RUnlock()
	return t.admitSlow(pid, e)
}

// AdmitsNow reports whether Admit(pid) would return at once: pid is 0,
// ignored, or its owner holds a lease. It takes the same read lock as
// Admit's fast path and blocks on nothing else.
func (t *Tracker) AdmitsNow(pid uint32) bool {
	if pid == 0 {
		return true
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	e := t.pids[pid]
	return e != nil && (e.ignored || e.harness || e.os != nil && e.os.phase == phaseHeld)
}

// admitSlow resolves pid's owner (from the cache entry e when present,
// otherwise from the proc tree) and waits for or opens its lease.
func (t *Tracker) admitSlow(pid uint32, e *pidEntry) error {
	var owner Owner
	var id int
	var start uint64
	var tree bool
	comm := -1
	if e != nil {
		owner, id, start, tree = e.owner, e.id, e.start, e.tree
	} else {
		// FUSE reports thread ids: a thread of an ignored process (the
		// daemon itself, e.g. go-fuse's mount probe) is ignored too.
		if len(t.ignoreTgid) > 0 {
			// Not cached: a thread id may be reused by a tool's process
			// later, and ignored entries are never pruned. The daemon's own
			// threads rarely touch the mount, so the extra read is cheap.
			if tgid, err := readTgid(t.procRoot, int(pid)); err == nil && t.ignoreTgid[tgid] {
				return nil
			}
		}
		var buf [statBufSize]byte
		si, err := readStat(t.procRoot, int(pid), buf[:])
		if err != nil {
			return fmt.Errorf("admit: %w", err)
		}
		start = si.start
		switch kind, c := t.classify(int(pid), si); kind {
		case harnessSelf:
			return t.admitHarness(pid, start)
		case harnessChild:
			owner, id, tree = HarnessChildOwner(c), c, true
			t.rememberMember(int(pid), c)
		default:
			id, err = ownerID(t.procRoot, int(pid), si, t.by)
			if err != nil {
				return fmt.Errorf("admit: %w", err)
			}
			owner = MakeOwner(t.by, id)
		}
		pi := readProcInfo(t.procRoot, pid, owner, t.now())
		comm = openComm(t.procRoot, pid)
		t.mu.Lock()
		t.procs[pid] = []ProcInfo{pi}
		t.mu.Unlock()
	}
	defer func() { closeComm(comm) }() // unless an entry took it
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return fmt.Errorf("admit pid %d: %w", pid, ErrClosed)
		}
		pe := t.pids[pid]
		if pe == nil || pe.start != start || pe.owner != owner {
			if pe != nil {
				closeComm(pe.comm)
			}
			pe = &pidEntry{owner: owner, id: id, start: start, tree: tree, comm: comm}
			comm = -1
			t.pids[pid] = pe
		}
		o := t.owners[owner]
		switch {
		case o == nil:
			o = &ownerState{owner: owner, id: id, tree: tree, phase: phasePending, done: make(chan struct{})}
			t.owners[owner] = o
			pe.os = o
			t.mu.Unlock()
			return t.begin(o)
		case o.phase == phaseHeld:
			pe.os = o
			o.touch(t.epoch.Load())
			t.mu.Unlock()
			return nil
		case o.phase == phasePending:
			done := o.done
			t.mu.Unlock()
			<-done
			t.mu.Lock()
			err := o.err
			t.mu.Unlock()
			if err != nil {
				return err // the shared result of the Begin we waited for
			}
		default: // phaseEnding: wait for End, then open a fresh lease
			done := o.done
			t.mu.Unlock()
			<-done
		}
	}
}

// begin runs Handler.Begin for the pending owner o and publishes the result.
// The deferred publish also runs if Begin panics, so waiters never hang.
func (t *Tracker) begin(o *ownerState) (err error) {
	ok := false
	defer func() {
		t.mu.Lock()
		if ok {
			o.phase = phaseHeld
			o.lastRequest = t.now()
			e := t.epoch.Load()
			o.seenEpoch.Store(e)
			o.sweptEpoch = e
		} else {
			if err == nil {
				err = fmt.Errorf("begin lease for %s: handler panicked", o.owner)
			}
			o.phase = phaseGone
			o.err = err
			if t.owners[o.owner] == o {
				delete(t.owners, o.owner)
			}
		}
		close(o.done)
		t.mu.Unlock()
	}()
	if herr := t.handler.Begin(o.owner); herr != nil {
		return fmt.Errorf("begin lease for %s: %w", o.owner, herr)
	}
	ok = true
	return nil
}

// Bind records an explicit lease the daemon opened for owner (exec's child
// session, lease begin): Admit treats owner as holding a lease and sweeps
// never end it. Binds nest; each needs an Unbind.
//
// If owner holds an implicit lease, that lease is ended first (Handler.End,
// synchronously) so that one owner never holds two leases; an implicit Begin
// in flight is waited for.
func (t *Tracker) Bind(owner Owner) {
	for {
		t.mu.Lock()
		o := t.owners[owner]
		switch {
		case o == nil:
			t.owners[owner] = t.newExplicit(owner)
			t.mu.Unlock()
			return
		case o.binds > 0:
			o.binds++
			t.mu.Unlock()
			return
		case o.phase == phaseHeld: // implicit: end it, then replace it
			o.phase = phaseEnding
			o.done = make(chan struct{})
			t.mu.Unlock()
			t.handler.End(owner)
			t.mu.Lock()
			o.phase = phaseGone
			t.owners[owner] = t.newExplicit(owner)
			close(o.done)
			t.mu.Unlock()
			return
		default: // pending or ending
			done := o.done
			t.mu.Unlock()
			<-done
		}
	}
}

// newExplicit returns a held, bound owner state. Caller holds mu.
func (t *Tracker) newExplicit(owner Owner) *ownerState {
	id := -1
	if by, n, ok := parseOwner(owner); ok && by == t.by {
		id = n
	}
	o := &ownerState{owner: owner, id: id, phase: phaseHeld, binds: 1, lastRequest: t.now()}
	e := t.epoch.Load()
	o.seenEpoch.Store(e)
	o.sweptEpoch = e
	return o
}

// Unbind releases one Bind of owner. When the last Bind is released the
// owner is forgotten without an End call (the daemon closes explicit leases
// itself); a later request from it opens an implicit lease.
func (t *Tracker) Unbind(owner Owner) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.owners[owner]
	if o == nil || o.binds == 0 {
		return
	}
	o.binds--
	if o.binds == 0 {
		o.phase = phaseGone
		delete(t.owners, owner)
	}
}

// Release is Unbind for the end of exec's command: when the last Bind of
// owner is released while processes it keys (its session, group or
// process) are still alive — the command left children behind, which may
// still be reading and writing in the mount — the owner stays, held as an
// implicit lease is, and the sweeper ends it once none of them is left.
// Ending it now would capture and switch the view under them. It reports
// whether it kept the owner; if not, the owner is forgotten as by Unbind.
func (t *Tracker) Release(owner Owner) bool {
	t.mu.Lock()
	o := t.owners[owner]
	if o == nil || o.binds == 0 {
		t.mu.Unlock()
		return false
	}
	if o.binds > 1 || o.id < 0 {
		t.mu.Unlock()
		t.Unbind(owner)
		return false
	}
	t.mu.Unlock()
	alive := t.anyAlive(o.id)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.owners[owner] != o || o.binds == 0 {
		return false // released meanwhile
	}
	o.binds--
	if o.binds == 0 && alive {
		o.lastRequest = t.now()
		return true // phaseHeld, unbound: the sweeper's from now on
	}
	if o.binds == 0 {
		o.phase = phaseGone
		delete(t.owners, owner)
	}
	return false
}

// anyAlive reports whether a process with owner id id is alive: first the
// request cache's threads of that owner (each checked by its start time),
// then a scan of the proc tree (a child that has not sent a request yet;
// true when the tree cannot be read: keeping a lease is the safe side).
func (t *Tracker) anyAlive(id int) bool {
	cs := t.cachedPids(func(_ uint32, e *pidEntry) bool { return e.id == id && !e.tree && !e.harness })
	buf := make([]byte, statBufSize)
	for _, c := range cs {
		if t.running(c, buf) {
			return true
		}
	}
	procs, err := t.scan()
	if err != nil {
		return true
	}
	for _, p := range procs {
		if p.id == id {
			return true
		}
	}
	return false
}

// admitHarness caches pid as a thread of a harness: admitted at once, no
// lease. Its description is kept for write attribution.
func (t *Tracker) admitHarness(pid uint32, start uint64) error {
	pi := readProcInfo(t.procRoot, pid, "harness", t.now())
	comm := openComm(t.procRoot, pid)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		closeComm(comm)
		return nil
	}
	if pe := t.pids[pid]; pe != nil {
		closeComm(pe.comm)
	}
	t.pids[pid] = &pidEntry{id: -1, start: start, harness: true, comm: comm}
	t.procs[pid] = []ProcInfo{pi}
	return nil
}

// cachedPid is a request cache entry's thread and its start time.
type cachedPid struct {
	pid   uint32
	start uint64
}

// cachedPids copies out the request cache's entries, ignored ones left out,
// that keep accepts; it takes the read lock itself.
func (t *Tracker) cachedPids(keep func(pid uint32, e *pidEntry) bool) []cachedPid {
	var out []cachedPid
	t.mu.RLock()
	defer t.mu.RUnlock()
	for pid, e := range t.pids {
		if !e.ignored && keep(pid, e) {
			out = append(out, cachedPid{pid, e.start})
		}
	}
	return out
}

// running reports whether c's thread still runs: its stat reads, with the
// same start time (buf is readStat's buffer).
func (t *Tracker) running(c cachedPid, buf []byte) bool {
	si, err := readStat(t.procRoot, int(c.pid), buf)
	return err == nil && si.start == c.start
}

// Owners lists the current owners (held, pending or ending) sorted by name
// for status output.
func (t *Tracker) Owners() []OwnerInfo {
	now := t.now()
	t.mu.RLock()
	out := make([]OwnerInfo, 0, len(t.owners))
	for _, o := range t.owners {
		last := o.lastRequest
		if o.phase == phaseHeld && o.seenEpoch.Load() != o.sweptEpoch {
			last = now // a request the next sweep has not folded in yet
		}
		out = append(out, OwnerInfo{
			Owner:       o.owner,
			Explicit:    o.binds > 0,
			Pending:     o.phase == phasePending,
			LastRequest: last,
			LivePIDs:    o.livePIDs,
		})
	}
	t.mu.RUnlock()
	sortOwners(out)
	return out
}
