package sessions

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// Process descriptions for write attribution. A pid's command name and
// argv are read once, from /proc, when the tracker first resolves the
// pid (Admit's slow path), while the process runs; the daemon looks
// them up by pid when a capture names the pid as a writer. Entries of
// processes that are gone are dropped by PruneProcs, which the daemon
// calls after it recorded a capture's attribution.

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

// Proc returns what the tracker read about pid when it first saw it.
func (t *Tracker) Proc(pid uint32) (ProcInfo, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	pi, ok := t.procs[pid]
	return pi, ok
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
