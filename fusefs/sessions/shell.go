package sessions

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Persistent shells (docs/windows.md "Persistent shells"). Some agent
// harnesses keep one long-lived shell per agent, its working directory in
// the mount, and write each command to its stdin. The shell and the
// commands it runs are one session, so by the ordinary rule the shell
// would hold the window for its whole life. Instead, a session whose every
// process is a shell waiting for its next command holds no lease: a sweep
// ends it, and the next command's first request opens a new one, pinned
// for that command's duration.
//
// A process counts as such a shell when all of these hold:
//   - its name (stat's comm) and argv[0] are a shell's (sh, bash, dash,
//     zsh, ksh, mksh, ash, busybox' sh);
//   - it reads its commands from stdin: no -c and no script operand (or
//     -s);
//   - it is asleep in read(2) on fd 0, or (an interactive shell at a
//     terminal) in select/poll with fd 0 a terminal;
//   - fd 0 is not a file in the mount, and no other fd is either (its
//     working directory may be).
// A command the shell runs is another process of the session (make, git,
// sleep, a subshell), so while it runs the session is busy; a `read`
// inside an `sh -c` script is not a shell reading commands. Ordinary tools
// that are quiet for a while keep their view as before.

// shellNames are the programs that read commands from stdin.
var shellNames = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true, "yash": true}

// waitingShell reports whether pid is a shell waiting for its next command
// (see above). Anything it cannot read makes it false: a lease must not
// end on a guess.
func (t *Tracker) waitingShell(pid int) bool {
	base := t.procRoot + "/" + strconv.Itoa(pid)
	comm, err := os.ReadFile(base + "/comm")
	if err != nil || !shellNames[strings.TrimSpace(string(comm))] {
		return false
	}
	cmdline, err := os.ReadFile(base + "/cmdline")
	if err != nil || !readsCommandsFromStdin(cmdline) {
		return false
	}
	sc, err := os.ReadFile(base + "/syscall")
	if err != nil || !waitsOnStdin(sc, func() bool { return t.stdinIsTerminal(base) }) {
		return false
	}
	return !t.fdsInside(base)
}

// readsCommandsFromStdin parses a shell's NUL-separated argv: true when it
// takes commands from stdin (no -c, no script operand, or -s).
func readsCommandsFromStdin(cmdline []byte) bool {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) == 0 || !shellNames[strings.TrimPrefix(filepath.Base(args[0]), "-")] {
		return false
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-s":
			return true
		case a == "--":
			return i+1 == len(args)
		case a == "--rcfile" || a == "--init-file" || a == "-o" || a == "+o" || a == "-O" || a == "+O":
			i++ // takes a value
		case strings.HasPrefix(a, "--"):
		case strings.HasPrefix(a, "-") || strings.HasPrefix(a, "+"):
			if strings.ContainsRune(a[1:], 's') {
				return true
			}
			if strings.ContainsRune(a[1:], 'c') {
				return false
			}
		default:
			return false // a script operand
		}
	}
	return true
}

// waitsOnStdin parses /proc/PID/syscall: read(0, …), or a select/poll
// family call when stdin is a terminal (an interactive shell's line
// editor waits there).
func waitsOnStdin(sc []byte, stdinTTY func() bool) bool {
	f := bytes.Fields(sc)
	if len(f) < 2 {
		return false // "running", or not in a system call
	}
	nr, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil {
		return false
	}
	switch nr {
	case unix.SYS_READ:
		return string(f[1]) == "0x0"
	case unix.SYS_PSELECT6, unix.SYS_PPOLL, unix.SYS_POLL, unix.SYS_SELECT:
		return stdinTTY()
	}
	return false
}

func (t *Tracker) stdinIsTerminal(base string) bool {
	target, err := os.Readlink(base + "/fd/0")
	return err == nil && (strings.HasPrefix(target, "/dev/pts/") || strings.HasPrefix(target, "/dev/tty")) && !t.inside(target)
}

// fdsInside reports whether any open fd of the process (its cwd aside) is
// under the mount; unreadable counts as inside.
func (t *Tracker) fdsInside(base string) bool {
	d, err := os.Open(base + "/fd")
	if err != nil {
		return true
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return true
	}
	for _, n := range names {
		in, err := t.linkInside(base + "/fd/" + n)
		if (err != nil && !gone(err)) || in {
			return true
		}
	}
	return false
}

// closeWaitingShells marks as ending the candidates whose every live
// process is a shell waiting for its next command, provided no request
// arrived meanwhile (as closeIdle does).
func (t *Tracker) closeWaitingShells(cands []idleCandidate, procs []procRec) []*ownerState {
	withPIDs(cands, procs)
	var ending []*ownerState
	for _, c := range cands {
		if len(c.pids) == 0 || slices.ContainsFunc(c.pids, func(pid int) bool { return !t.waitingShell(pid) }) {
			continue
		}
		if t.markEndingIfQuiet(c.o) {
			ending = append(ending, c.o)
		}
	}
	return ending
}
