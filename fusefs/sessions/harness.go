package sessions

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
)

// Harnesses (docs/windows.md "Harnesses"). A coding agent's harness is one
// long-lived process that keeps its working directory in the project,
// reads and edits files itself and starts a tool process now and then.
// Declared with DeclareHarness, it holds no lease: its own requests, from
// any of its threads, are admitted at once and see the current view, and
// its cwd and open files pin nothing. Every process tree it starts — its
// direct child C and all of C's descendants, whatever session or process
// group they make — is one owner, "harness-child:C", whose lease is
// pinned while any process of the tree lives (a shell of the tree waiting
// at its prompt aside, as for sessions). Membership is by ancestry through
// /proc's PPid; each sweep remembers the members it saw, so a descendant
// reparented to init after its parent exited stays in its tree.

// harnessChildPrefix names the owner of a harness's tool tree.
const harnessChildPrefix = "harness-child:"

// HarnessChildOwner is the owner of the process tree rooted at the
// harness's direct child c.
func HarnessChildOwner(c int) Owner { return Owner(harnessChildPrefix + strconv.Itoa(c)) }

// harnessChildOf inverts HarnessChildOwner.
func harnessChildOf(o Owner) (int, bool) {
	s, ok := strings.CutPrefix(string(o), harnessChildPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0
}

// treeMember is what a sweep saw of a process in a harness's tree.
type treeMember struct {
	start uint64
	child int // the harness's direct child whose tree it is
}

// maxAncestry bounds a walk up the parent chain.
const maxAncestry = 256

// DeclareHarness makes pid (a process; a thread id means its process) a
// harness of this mount: see above. The declaration lasts while the
// process lives (its start time identifies it). Requests already cached
// are resolved again, so a child that started before the declaration
// moves to its tree's lease; the harness's former session lease ends at
// the next sweep if nothing else of that session is left.
func (t *Tracker) DeclareHarness(pid int) error { return t.DeclareHarnessStarted(pid, 0) }

// StartTime is pid's start time (stat field 22), which tells it from a
// later process that reuses the pid.
func StartTime(pid int) (uint64, error) {
	tgid, err := readTgid("/proc", pid)
	if err != nil {
		return 0, err
	}
	var buf [statBufSize]byte
	si, err := readStat("/proc", tgid, buf[:])
	return si.start, err
}

// DeclareHarnessStarted is DeclareHarness for the process pid that started
// at start (StartTime; 0: whichever runs now): if pid now names another
// process, it fails with ErrNoProcess.
func (t *Tracker) DeclareHarnessStarted(pid int, want uint64) error {
	if pid <= 1 {
		return fmt.Errorf("declare harness %d: %w", pid, ErrInvalidHarness)
	}
	tgid, err := readTgid(t.procRoot, pid)
	if err != nil {
		return fmt.Errorf("declare harness %d: %w", pid, err)
	}
	if t.ignoreTgid[tgid] || tgid <= 1 {
		return fmt.Errorf("declare harness %d: the daemon itself or init: %w", pid, ErrInvalidHarness)
	}
	var buf [statBufSize]byte
	si, err := readStat(t.procRoot, tgid, buf[:])
	if err != nil {
		return fmt.Errorf("declare harness %d: %w", pid, err)
	}
	if want != 0 && si.start != want {
		return fmt.Errorf("declare harness %d: it exited (the pid is another process's now): %w", pid, ErrNoProcess)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("declare harness %d: %w", pid, ErrClosed)
	}
	if s, ok := t.harnesses[tgid]; ok && s == si.start {
		return nil
	}
	h := maps.Clone(t.harnesses)
	if h == nil {
		h = map[int]uint64{}
	}
	h[tgid] = si.start
	t.harnesses = h
	// Every cached resolution may have changed (a child of the harness was
	// keyed by its session): resolve again on the next request.
	for p, e := range t.pids {
		if !e.ignored {
			closeComm(e.comm)
			delete(t.pids, p)
		}
	}
	return nil
}

// Harnesses lists the declared harnesses still alive as the last sweep saw.
func (t *Tracker) Harnesses() []int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]int, 0, len(t.harnesses))
	for p := range t.harnesses {
		out = append(out, p)
	}
	return out
}

// snapshot returns the harness and tree maps (immutable: replaced, never
// changed in place).
func (t *Tracker) harnessMaps() (map[int]uint64, map[int]treeMember) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.harnesses, t.trees
}

// harnessKind is how a requesting pid relates to the declared harnesses.
type harnessKind uint8

const (
	notHarness   harnessKind = iota
	harnessSelf              // a thread of a harness
	harnessChild             // in the tree of the harness's child c
)

// classify resolves pid (a thread id; si its stat) against the harnesses:
// a thread of one, or a descendant of one (then c is the tree's root),
// by walking up the parent chain. Anything it cannot read ends the walk:
// the pid is then keyed as without harnesses.
func (t *Tracker) classify(pid int, si statInfo) (kind harnessKind, c int) {
	h, trees := t.harnessMaps()
	if len(h) == 0 {
		return notHarness, 0
	}
	tgid, err := readTgid(t.procRoot, pid)
	if err != nil {
		return notHarness, 0
	}
	var buf [statBufSize]byte
	start, ppid := si.start, si.ppid
	if tgid != pid {
		psi, err := readStat(t.procRoot, tgid, buf[:])
		if err != nil {
			return notHarness, 0
		}
		start, ppid = psi.start, psi.ppid
	}
	if s, ok := h[tgid]; ok && s == start {
		return harnessSelf, 0
	}
	cur, curStart := tgid, start
	for range maxAncestry {
		if m, ok := trees[cur]; ok && m.start == curStart {
			return harnessChild, m.child
		}
		if ppid <= 1 {
			return notHarness, 0
		}
		psi, err := readStat(t.procRoot, ppid, buf[:])
		if err != nil {
			return notHarness, 0
		}
		if s, ok := h[ppid]; ok && s == psi.start {
			return harnessChild, cur
		}
		cur, curStart, ppid = ppid, psi.start, psi.ppid
	}
	return notHarness, 0
}

// assignTrees sets each scanned process's tree: -1 for a harness, the
// root child's pid for a member of a harness's tree, 0 otherwise; members
// are taken out of their session's (group's, process's) count (id -1).
func assignTrees(procs []procRec, h map[int]uint64, trees map[int]treeMember) {
	if len(h) == 0 {
		return
	}
	byPID := make(map[int]int, len(procs))
	for i, p := range procs {
		byPID[p.pid] = i
	}
	const unknown = -2
	memo := make([]int, len(procs))
	for i := range memo {
		memo[i] = unknown
	}
	var resolve func(i, depth int) int
	resolve = func(i, depth int) int {
		if memo[i] != unknown {
			return memo[i]
		}
		p := procs[i]
		v := 0
		if s, ok := h[p.pid]; ok && s == p.start {
			v = -1
		} else if m, ok := trees[p.pid]; ok && m.start == p.start {
			v = m.child
		} else if j, ok := byPID[p.ppid]; ok && depth < maxAncestry {
			memo[i] = 0 // a cycle (pid reuse mid-scan) resolves to none
			switch pv := resolve(j, depth+1); {
			case pv == -1:
				v = p.pid
			case pv > 0:
				v = pv
			}
		}
		memo[i] = v
		return v
	}
	for i := range procs {
		procs[i].tree = resolve(i, 0)
		if procs[i].tree != 0 {
			procs[i].id = -1
		}
	}
}

// rememberMember records that process pid (a thread id is resolved to its
// process) is in harness child c's tree, so that it stays there if its
// parent exits before the next sweep saw it.
func (t *Tracker) rememberMember(pid, c int) {
	tgid, err := readTgid(t.procRoot, pid)
	if err != nil {
		return
	}
	var buf [statBufSize]byte
	si, err := readStat(t.procRoot, tgid, buf[:])
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if m, ok := t.trees[tgid]; ok && m == (treeMember{si.start, c}) {
		return
	}
	tr := maps.Clone(t.trees)
	if tr == nil {
		tr = map[int]treeMember{}
	}
	tr[tgid] = treeMember{si.start, c}
	t.trees = tr
}
