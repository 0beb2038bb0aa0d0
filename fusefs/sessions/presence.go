package sessions

import (
	"bufio"
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// No lease without presence or work (docs/windows.md "Idle sessions").
// With IdleClose, an owner that made no request for that long ends its
// lease when every live process of it is either
//   - absent from the mount: no working directory, open file or mapping
//     in it; or
//   - present only by its working directory and waiting for input from
//     outside the mount: every thread blocked reading or polling (read,
//     readv, recvfrom, recvmsg, poll, ppoll, select, pselect6, epoll_wait,
//     epoll_pwait, epoll_pwait2; no fd of the process is in the mount, so
//     none of those fds is either), in futex (waiting for another thread),
//     or waiting for children (wait4, waitid, rt_sigsuspend, pause) all of
//     which belong to the same owner — their own state decides.
// A process that runs, sleeps (nanosleep: `sleep 30` waits, but not for
// input), is inside any other system call, waits for a child outside the
// owner or holds a file or mapping in the mount keeps the lease. Anything
// unreadable counts as busy: a lease must not end on a guess.

// absent reports whether every process of pids has no presence or work
// in the mount (above); kids maps a pid to its live children.
func (t *Tracker) absent(pids []int, kids map[int][]int) bool {
	in := make(map[int]bool, len(pids))
	for _, p := range pids {
		in[p] = true
	}
	for _, pid := range pids {
		base := t.procRoot + "/" + strconv.Itoa(pid)
		if t.fdsInside(base) || t.mapsInside(base) {
			return false
		}
		cwdIn, err := t.linkInside(base + "/cwd")
		if err != nil {
			if gone(err) {
				continue
			}
			return false
		}
		if cwdIn && !t.waitingForInput(base, func() bool {
			cs := kids[pid]
			if len(cs) == 0 {
				return false
			}
			for _, c := range cs {
				if !in[c] {
					return false
				}
			}
			return true
		}) {
			return false
		}
	}
	return true
}

// syscallWait classifies a thread's /proc/.../syscall line.
type syscallWait uint8

const (
	waitBusy  syscallWait = iota // running, or in any other system call
	waitInput                    // reading or polling
	waitPeer                     // futex: waiting for another thread
	waitChild                    // waiting for children or a signal
)

// classifySyscall parses a /proc/PID/task/TID/syscall line.
func classifySyscall(sc []byte) syscallWait {
	f := bytes.Fields(sc)
	if len(f) < 2 {
		return waitBusy // "running", or not readable
	}
	nr, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil {
		return waitBusy
	}
	switch nr {
	case unix.SYS_READ, unix.SYS_READV, unix.SYS_RECVFROM, unix.SYS_RECVMSG,
		unix.SYS_POLL, unix.SYS_PPOLL, unix.SYS_SELECT, unix.SYS_PSELECT6,
		unix.SYS_EPOLL_WAIT, unix.SYS_EPOLL_PWAIT, unix.SYS_EPOLL_PWAIT2:
		return waitInput
	case unix.SYS_FUTEX:
		return waitPeer
	case unix.SYS_WAIT4, unix.SYS_WAITID, unix.SYS_RT_SIGSUSPEND, unix.SYS_PAUSE:
		return waitChild
	}
	return waitBusy
}

// waitingForInput reports whether every thread of the process at base
// waits (above): for input, for another thread, or — when childrenOwned
// says its children all belong to the same owner — for its children; and
// at least one waits for input or children.
func (t *Tracker) waitingForInput(base string, childrenOwned func() bool) bool {
	d, err := os.Open(base + "/task")
	if err != nil {
		return false
	}
	tids, err := d.Readdirnames(-1)
	d.Close()
	if err != nil || len(tids) == 0 {
		return false
	}
	waiting := false
	buf := make([]byte, 512)
	for _, tid := range tids {
		sc, err := readSmall(base+"/task/"+tid+"/syscall", buf)
		if err != nil {
			return false
		}
		switch classifySyscall(sc) {
		case waitInput:
			waiting = true
		case waitPeer:
		case waitChild:
			if !childrenOwned() {
				return false
			}
			waiting = true
		default:
			return false
		}
	}
	return waiting
}

// mapsInside reports whether the process at base maps a file of the mount
// (a path in /proc/PID/maps); unreadable counts as inside.
func (t *Tracker) mapsInside(base string) bool {
	f, err := os.Open(base + "/maps")
	if err != nil {
		return !gone(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		// address perms offset dev inode path: only the path has a '/'.
		if i := bytes.IndexByte(line, '/'); i >= 0 && t.inside(string(line[i:])) {
			return true
		}
	}
	return sc.Err() != nil
}
