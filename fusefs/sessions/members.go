package sessions

import (
	"bytes"
	"slices"
)

// Process is one live process of an owner, for messages that name who
// holds a lease.
type Process struct {
	PID  int
	Comm string // the command name (stat field 2, at most maxComm bytes)
}

// maxComm bounds a Process's Comm. The kernel's own bound is 15 bytes
// (TASK_COMM_LEN); this one only guards against odd proc trees.
const maxComm = 64

// Processes lists owner's live processes (those its key matches: the
// session, process group or process), sorted by pid, from a fresh scan of
// the proc tree. A foreign owner (an explicit lease's name) or one keyed
// by another By has none. Only the busy paths call it; it allocates.
func (t *Tracker) Processes(owner Owner) ([]Process, error) {
	var match func(p procRec) bool
	if c, ok := harnessChildOf(owner); ok {
		match = func(p procRec) bool { return p.tree == c }
	} else if by, id, ok := parseOwner(owner); ok && by == t.by {
		match = func(p procRec) bool { return p.id == id }
	} else {
		return nil, nil
	}
	procs, err := t.scan()
	if err != nil {
		return nil, err
	}
	var out []Process
	buf := make([]byte, statBufSize)
	for _, p := range procs {
		if !match(p) {
			continue
		}
		b, err := readSmall(statPath(t.procRoot, p.pid), buf)
		if err != nil {
			continue // exited since the scan
		}
		out = append(out, Process{PID: p.pid, Comm: statComm(b)})
	}
	slices.SortFunc(out, func(a, b Process) int { return a.PID - b.PID })
	return out, nil
}

// statComm is the comm field of a stat line: between the first '(' and the
// last ')' (a comm may hold both), cut to maxComm bytes.
func statComm(b []byte) string {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return "?"
	}
	c := b[open+1 : closing]
	if len(c) > maxComm {
		c = c[:maxComm]
	}
	return string(c)
}
