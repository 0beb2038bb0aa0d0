package sessions

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Process descriptions for write attribution. A pid's command name and
// argv are read once, from /proc, when the tracker first resolves the
// pid (Admit's slow path), while the process runs; the daemon looks
// them up by pid when a capture names the pid as a writer. Entries of
// processes that are gone are dropped by PruneProcs, which the daemon
// calls after it recorded a capture's attribution.
//
// A process that execs keeps its pid but runs another program: the
// mount asks ExecGen before it records a change (not for reads,
// lookups or data writes), which reads the pid's /proc/PID/comm through
// a file the tracker keeps open (one pread, no allocation) and compares
// it with the command name of the program last seen. A different name
// is an exec: the argv is read again and becomes the pid's next exec
// generation, so that changes before the exec keep the old command line
// and changes after it get the new one. An exec of a program with the
// same command name (sh exec'ing sh) is not noticed.

// MaxArgvBytes bounds the command line kept per process (argv joined,
// NUL-separated, as /proc shows it); a longer one is cut and marked.
const MaxArgvBytes = 1024

// ProcInfo describes a process that made requests to the mount.
type ProcInfo struct {
	PID   uint32
	Comm  string
	Argv  []string
	Owner Owner
	// Truncated: Argv was longer than MaxArgvBytes and was cut.
	Truncated bool
	Seen      time.Time
}

// readProcInfo reads pid's command name and argv.
func readProcInfo(procRoot string, pid uint32, owner Owner, now time.Time) ProcInfo {
	pi := ProcInfo{PID: pid, Owner: owner, Seen: now}
	base := procRoot + "/" + strconv.FormatUint(uint64(pid), 10)
	if b, err := os.ReadFile(base + "/comm"); err == nil {
		pi.Comm = strings.TrimRight(string(b), "\n")
	}
	pi.Argv, pi.Truncated = readCmdline(base + "/cmdline")
	return pi
}

// readCmdline reads at most MaxArgvBytes of a /proc cmdline file.
func readCmdline(path string) (argv []string, truncated bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	buf := make([]byte, MaxArgvBytes+1)
	n, _ := f.Read(buf)
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		if m <= 0 || err != nil {
			break
		}
		n += m
	}
	return splitCmdline(buf[:n])
}

// splitCmdline splits the bytes of a /proc cmdline file (NUL-terminated
// arguments) into argv, keeping at most MaxArgvBytes of them.
func splitCmdline(b []byte) (argv []string, truncated bool) {
	if len(b) > MaxArgvBytes {
		b, truncated = b[:MaxArgvBytes], true
	}
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil, truncated
	}
	for _, a := range bytes.Split(b, []byte{0}) {
		argv = append(argv, string(a))
	}
	return argv, truncated
}

// ReadProcess reads pid's description now (for a session leader that
// may not have made a request yet).
func (t *Tracker) ReadProcess(pid uint32) ProcInfo {
	return readProcInfo(t.procRoot, pid, "", t.now())
}

// Proc returns what the tracker read about the program pid ran last.
func (t *Tracker) Proc(pid uint32) (ProcInfo, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	pis := t.procs[pid]
	if len(pis) == 0 {
		return ProcInfo{}, false
	}
	return pis[len(pis)-1], true
}

// ProcExec returns what the tracker read about the program pid ran in
// exec generation gen (ExecGen); the last one it knows if gen is past
// it.
func (t *Tracker) ProcExec(pid, gen uint32) (ProcInfo, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	pis := t.procs[pid]
	if len(pis) == 0 {
		return ProcInfo{}, false
	}
	return pis[min(int(gen), len(pis)-1)], true
}

// maxExecs bounds the exec generations kept per pid; later ones share
// the last.
const maxExecs = 16

// ExecGen returns pid's exec generation: 0 for the program the tracker
// first saw it run, one more for each exec it noticed since. The pid
// must have been admitted; an unknown pid is generation 0.
func (t *Tracker) ExecGen(pid uint32) uint32 {
	t.mu.RLock()
	e := t.pids[pid]
	pis := t.procs[pid]
	if e == nil || e.comm < 0 || len(pis) == 0 {
		t.mu.RUnlock()
		return 0
	}
	gen := uint32(len(pis) - 1)
	var buf [32]byte
	n, err := unix.Pread(e.comm, buf[:], 0)
	same := err != nil || n <= 0 || string(bytes.TrimSuffix(buf[:n], []byte{'\n'})) == pis[gen].Comm
	owner := pis[gen].Owner
	t.mu.RUnlock()
	if same || gen+1 >= maxExecs {
		return gen
	}
	pi := readProcInfo(t.procRoot, pid, owner, t.now())
	t.mu.Lock()
	defer t.mu.Unlock()
	pis = t.procs[pid]
	if len(pis) == 0 {
		return 0
	}
	if last := pis[len(pis)-1]; last.Comm != pi.Comm && len(pis) < maxExecs {
		t.procs[pid] = append(pis, pi)
	}
	return uint32(len(t.procs[pid]) - 1)
}

// openComm opens pid's /proc/PID/comm for ExecGen; -1 if it cannot.
func openComm(procRoot string, pid uint32) int {
	fd, err := unix.Open(procRoot+"/"+strconv.FormatUint(uint64(pid), 10)+"/comm", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

func closeComm(fd int) {
	if fd >= 0 {
		_ = unix.Close(fd)
	}
}

// PruneProcs forgets the descriptions of processes the tracker no longer
// caches (gone, as the sweeps saw).
func (t *Tracker) PruneProcs() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for pid := range t.procs {
		if _, ok := t.pids[pid]; !ok {
			delete(t.procs, pid)
		}
	}
}
