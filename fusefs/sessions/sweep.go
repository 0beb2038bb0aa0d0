package sessions

import (
	"cmp"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// procRec is one process found by a proc scan.
type procRec struct {
	pid   int
	id    int // owner id under the tracker's By; -1 for harnesses and their trees
	start uint64
	ppid  int
	tree  int // harness.go: -1 a harness, C > 0 in harness child C's tree, 0 neither
}

// idleCandidate is an owner past its idle deadline whose processes still
// have to be checked for a cwd or open fd inside the mount.
type idleCandidate struct {
	o    *ownerState
	pids []int
}

// owns reports whether scanned process p belongs to owner o.
func (o *ownerState) owns(p procRec) bool {
	if o.tree {
		return p.tree == o.id
	}
	return p.id == o.id
}

func (t *Tracker) loop(interval time.Duration) {
	defer close(t.loopDone)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.Sweep()
		}
	}
}

// Sweep scans the proc tree once and ends implicit leases whose owner has no
// live process, or (with IdleClose) that idled out. It returns after the
// resulting Handler.End calls have returned. If the proc tree cannot be
// listed nothing is ended: a transient failure must not close every lease.
func (t *Tracker) Sweep() {
	t.sweepMu.Lock()
	defer t.sweepMu.Unlock()

	// Requests admitted from here on stamp this epoch; an owner stamped with
	// it may have a process the scan below missed, so it is never ended by
	// this sweep.
	epoch := t.epoch.Add(1)
	procs, err := t.scan()
	if err != nil {
		return
	}
	live := make(map[int]uint64, len(procs)) // pid -> start time
	counts := make(map[int]int)              // owner id -> live processes
	treeCounts := make(map[int]int)          // harness child -> live processes of its tree
	var trees map[int]treeMember
	for _, p := range procs {
		live[p.pid] = p.start
		switch {
		case p.tree > 0:
			treeCounts[p.tree]++
			if trees == nil {
				trees = map[int]treeMember{}
			}
			trees[p.pid] = treeMember{start: p.start, child: p.tree}
		case p.tree == 0:
			counts[p.id]++
		}
	}
	checked := t.checkUnlisted(live)
	now := t.now()

	var ending []*ownerState
	var idle, shells []idleCandidate
	t.mu.Lock()
	// Members remembered since the scan began (an admission resolved
	// them) stay while they live.
	for pid, m := range t.trees {
		if _, ok := trees[pid]; !ok && live[pid] == m.start {
			if trees == nil {
				trees = map[int]treeMember{}
			}
			trees[pid] = m
		}
	}
	t.trees = trees
	if len(t.harnesses) > 0 {
		h := make(map[int]uint64, len(t.harnesses))
		for pid, start := range t.harnesses {
			if live[pid] == start {
				h[pid] = start // a harness that exited is forgotten
			}
		}
		t.harnesses = h
	}
	for pid, e := range t.pids {
		if e.ignored {
			continue
		}
		if start, ok := live[int(pid)]; ok {
			if start != e.start {
				delete(t.pids, pid) // pid reused since it was cached
				closeComm(e.comm)
			}
		} else if alive, ok := checked[pid]; ok && !alive {
			delete(t.pids, pid)
			closeComm(e.comm)
		}
	}
	for _, o := range t.owners {
		if o.phase != phaseHeld {
			continue
		}
		seen := o.seenEpoch.Load()
		if seen != o.sweptEpoch {
			o.lastRequest = now // the request happened before now: errs late, never early
			o.sweptEpoch = seen
		}
		switch {
		case o.tree:
			o.livePIDs = treeCounts[o.id]
		case o.id >= 0:
			o.livePIDs = counts[o.id]
		}
		if o.binds > 0 || seen == epoch {
			continue
		}
		switch {
		case o.livePIDs == 0:
			o.phase = phaseEnding
			o.done = make(chan struct{})
			ending = append(ending, o)
		case o.tree: // pinned while it lives; a shell at its prompt aside
			if t.shellClose {
				shells = append(shells, idleCandidate{o: o})
			}
		case t.idleClose > 0 && now.Sub(o.lastRequest) >= t.idleClose:
			idle = append(idle, idleCandidate{o: o})
		case t.shellClose && o.id >= 0:
			shells = append(shells, idleCandidate{o: o})
		}
	}
	t.mu.Unlock()

	if len(idle) > 0 {
		ending = append(ending, t.closeIdle(idle, procs)...)
	}
	if len(shells) > 0 {
		ending = append(ending, t.closeWaitingShells(shells, procs)...)
	}
	t.runEnds(ending)
}

// closeIdle checks the idle candidates' processes (outside any lock: it
// reads the proc tree) and marks as ending those with no presence or work
// in the mount (presence.go), provided no request arrived meanwhile.
func (t *Tracker) closeIdle(idle []idleCandidate, procs []procRec) []*ownerState {
	withPIDs(idle, procs)
	var kids map[int][]int // pid -> live children
	for _, p := range procs {
		if kids == nil {
			kids = map[int][]int{}
		}
		kids[p.ppid] = append(kids[p.ppid], p.pid)
	}
	var ending []*ownerState
	for _, c := range idle {
		if !t.absent(c.pids, kids) {
			continue
		}
		if t.markEndingIfQuiet(c.o) {
			ending = append(ending, c.o)
		}
	}
	return ending
}

// withPIDs fills each candidate's pids from a scan.
func withPIDs(cands []idleCandidate, procs []procRec) {
	for _, p := range procs {
		for i := range cands {
			if cands[i].o.owns(p) {
				cands[i].pids = append(cands[i].pids, p.pid)
			}
		}
	}
}

// markEndingIfQuiet marks o as ending, unless it changed since the sweep
// chose it (a request arrived, it was bound, ended or replaced).
func (t *Tracker) markEndingIfQuiet(o *ownerState) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o.phase != phaseHeld || o.binds != 0 || t.owners[o.owner] != o || o.seenEpoch.Load() != o.sweptEpoch {
		return false
	}
	o.phase = phaseEnding
	o.done = make(chan struct{})
	return true
}

// runEnds calls Handler.End for every owner already marked ending, in
// parallel (closing a lease can be slow), and removes them once End returns.
func (t *Tracker) runEnds(ending []*ownerState) {
	var wg sync.WaitGroup
	for _, o := range ending {
		wg.Go(func() {
			defer t.finishEnd(o)
			t.handler.End(o.owner)
		})
	}
	wg.Wait()
}

// finishEnd retires o after its End returned and wakes requests waiting to
// open a fresh lease for the same owner.
func (t *Tracker) finishEnd(o *ownerState) {
	t.mu.Lock()
	o.phase = phaseGone
	if t.owners[o.owner] == o {
		delete(t.owners, o.owner)
	}
	close(o.done)
	t.mu.Unlock()
}

// scan lists the numeric entries of the proc tree and reads each stat once.
// Processes that vanish mid-scan are skipped.
func (t *Tracker) scan() ([]procRec, error) {
	d, err := os.Open(t.procRoot)
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, statBufSize)
	procs := make([]procRec, 0, len(names))
	for _, name := range names {
		pid, ok := parseInt([]byte(name))
		if !ok || pid <= 0 {
			continue
		}
		si, err := readStat(t.procRoot, pid, buf)
		if err != nil {
			continue
		}
		id := si.sid
		switch t.by {
		case ByPGID:
			id = si.pgid
		case ByPID:
			id = pid // listed entries are thread-group leaders
		}
		procs = append(procs, procRec{pid: pid, id: id, start: si.start, ppid: si.ppid})
	}
	h, trees := t.harnessMaps()
	assignTrees(procs, h, trees)
	return procs, nil
}

// checkUnlisted re-reads the stat of cached pids the scan did not list.
// FUSE requests carry thread ids, which /proc resolves but does not list, so
// such entries are kept while the thread lives with the same start time.
func (t *Tracker) checkUnlisted(live map[int]uint64) map[uint32]bool {
	todo := t.cachedPids(func(pid uint32, _ *pidEntry) bool {
		_, ok := live[int(pid)]
		return !ok
	})
	checked := make(map[uint32]bool, len(todo))
	buf := make([]byte, statBufSize)
	for _, c := range todo {
		checked[c.pid] = t.running(c, buf)
	}
	return checked
}

// linkInside reads a /proc link (cwd, fd/N) and reports whether it
// points under the mount point. readlink on /proc never enters the FUSE
// mount, so this cannot deadlock against our own request handlers.
func (t *Tracker) linkInside(path string) (bool, error) {
	target, err := os.Readlink(path)
	if err != nil {
		return false, err
	}
	return t.inside(target), nil
}

// inside reports whether path is the mount point or below it. A deleted
// cwd/file reads as "<path> (deleted)", which still matches by prefix.
func (t *Tracker) inside(path string) bool {
	mp := t.mountPt
	if mp == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == mp || strings.HasPrefix(path, mp+"/") || strings.HasPrefix(path, mp+" (deleted)")
}

// gone reports whether err means the process or fd disappeared.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}

// EndAll ends every implicit lease (unmount, shutdown), waiting for Begins in
// flight and ending them too. Explicit owners are left to the daemon. Stop
// the mount's requests first: an Admit racing EndAll can open a new lease.
func (t *Tracker) EndAll() {
	t.sweepMu.Lock()
	defer t.sweepMu.Unlock()
	for {
		var ending []*ownerState
		var waits []chan struct{}
		t.mu.Lock()
		for _, o := range t.owners {
			if o.binds > 0 {
				continue
			}
			switch o.phase {
			case phaseHeld:
				o.phase = phaseEnding
				o.done = make(chan struct{})
				ending = append(ending, o)
			case phasePending, phaseEnding:
				waits = append(waits, o.done)
			}
		}
		t.mu.Unlock()
		if len(ending) == 0 && len(waits) == 0 {
			return
		}
		t.runEnds(ending)
		for _, w := range waits {
			<-w
		}
	}
}

// Close stops the background sweeper and waits for it. Afterwards Admit
// still admits owners that hold a lease but refuses to open new ones
// (ErrClosed). Close does not end leases; call EndAll first.
func (t *Tracker) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.stopOnce.Do(func() { close(t.stop) })
	if t.loopDone != nil {
		<-t.loopDone
	}
	t.mu.Lock()
	for _, e := range t.pids {
		closeComm(e.comm)
		e.comm = -1
	}
	t.mu.Unlock()
}

func sortOwners(s []OwnerInfo) {
	slices.SortFunc(s, func(a, b OwnerInfo) int { return cmp.Compare(a.Owner, b.Owner) })
}
