package sessions

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// By selects which process attribute keys a lease's owner.
type By int

const (
	// BySID keys owners by process session id (setsid); the default.
	BySID By = iota
	// ByPGID keys owners by process group id.
	ByPGID
	// ByPID keys owners by process (thread-group) id.
	ByPID
)

// ParseBy parses the value of --lease-by.
func ParseBy(s string) (By, error) {
	switch s {
	case "sid", "":
		return BySID, nil
	case "pgid":
		return ByPGID, nil
	case "pid":
		return ByPID, nil
	}
	return 0, fmt.Errorf("parse lease-by %q: %w", s, ErrInvalidLeaseBy)
}

// String returns the --lease-by spelling ("sid", "pgid", "pid").
func (b By) String() string {
	switch b {
	case BySID:
		return "sid"
	case ByPGID:
		return "pgid"
	case ByPID:
		return "pid"
	}
	return "By(" + strconv.Itoa(int(b)) + ")"
}

func (b By) valid() bool { return b == BySID || b == ByPGID || b == ByPID }

// Owner names the holder of an implicit or explicit lease, e.g. "sid:1234".
// Owners produced by this package are "<by>:<id>"; Bind accepts any string.
type Owner string

// MakeOwner returns the owner key for id under mode by.
func MakeOwner(by By, id int) Owner {
	return Owner(by.String() + ":" + strconv.Itoa(id))
}

// parseOwner inverts MakeOwner; ok is false for foreign owner strings.
func parseOwner(o Owner) (by By, id int, ok bool) {
	s := string(o)
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return 0, 0, false
	}
	b, err := ParseBy(s[:i])
	if err != nil || i == 0 {
		return 0, 0, false
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 0 {
		return 0, 0, false
	}
	return b, n, true
}

// statInfo is the part of /proc/<pid>/stat the tracker needs.
type statInfo struct {
	pid   int    // field 1 (for /proc/<tid>/stat this is the thread id)
	pgid  int    // field 5
	sid   int    // field 6
	start uint64 // field 22: start time in clock ticks since boot; detects pid reuse
	ppid  int    // field 4: the parent process (a thread's is its process's)
}

// parseStat parses a /proc/<pid>/stat line. The comm field (2) is wrapped in
// parentheses but may itself contain spaces and ')' characters, so the
// numeric fields are located from the LAST ')' in the line.
func parseStat(b []byte) (statInfo, error) {
	var si statInfo
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return si, fmt.Errorf("stat: comm not parenthesised: %w", ErrBadStat)
	}
	pid, ok := parseUint(bytes.TrimSpace(b[:open]))
	if !ok || pid > 1<<31 {
		return si, fmt.Errorf("stat: bad pid field: %w", ErrBadStat)
	}
	si.pid = int(pid)
	rest := b[closing+1:]
	// rest holds fields 3.. ; field k is token index k-3.
	for idx := 0; idx <= 19; idx++ {
		var tok []byte
		tok, rest = nextField(rest)
		if tok == nil {
			return si, fmt.Errorf("stat: only %d fields after comm: %w", idx, ErrBadStat)
		}
		switch idx {
		case 1: // ppid
			v, ok := parseInt(tok)
			if !ok {
				return si, fmt.Errorf("stat: bad field 4: %w", ErrBadStat)
			}
			si.ppid = v
		case 2, 3: // pgrp, session
			v, ok := parseInt(tok)
			if !ok {
				return si, fmt.Errorf("stat: bad field %d: %w", idx+3, ErrBadStat)
			}
			if idx == 2 {
				si.pgid = v
			} else {
				si.sid = v
			}
		case 19: // starttime
			v, ok := parseUint(tok)
			if !ok {
				return si, fmt.Errorf("stat: bad starttime: %w", ErrBadStat)
			}
			si.start = v
		}
	}
	return si, nil
}

// nextField returns the next space-separated token of b and the remainder;
// tok is nil when b holds no further token.
func nextField(b []byte) (tok, rest []byte) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t') {
		i++
	}
	j := i
	for j < len(b) && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' {
		j++
	}
	if i == j {
		return nil, nil
	}
	return b[i:j], b[j:]
}

// parseUint parses a decimal uint64 without allocating.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseInt parses a decimal int32-range integer (pids, pgids and sids are
// pid_t) with an optional leading '-'.
func parseInt(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := parseUint(b)
	if !ok || u > 1<<31 {
		return 0, false
	}
	if neg {
		return -int(u), true
	}
	return int(u), true
}

// statBufSize bounds a stat line: 52 numeric fields plus a comm of at most
// 64 bytes fit comfortably.
const statBufSize = 2048

// readSmall reads a whole small proc file into buf with raw syscalls (no
// *os.File allocation: sweeps read one file per process).
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
	return nil, fmt.Errorf("read %s: larger than %d bytes: %w", path, len(buf), ErrBadStat)
}

func statPath(procRoot string, pid int) string {
	return procRoot + "/" + strconv.Itoa(pid) + "/stat"
}

// readStat reads and parses <procRoot>/<pid>/stat. A missing file reports
// ErrNoProcess.
func readStat(procRoot string, pid int, buf []byte) (statInfo, error) {
	b, err := readSmall(statPath(procRoot, pid), buf)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return statInfo{}, fmt.Errorf("read stat of pid %d: %w", pid, ErrNoProcess)
		}
		return statInfo{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	si, err := parseStat(b)
	if err != nil {
		return statInfo{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return si, nil
}

// readTgid returns the thread-group id of pid (which may be a thread id:
// FUSE requests carry the calling thread's id). A missing status file falls
// back to pid itself, which is right for single-threaded processes and for
// fake proc trees without status files.
func readTgid(procRoot string, pid int) (int, error) {
	var buf [statBufSize]byte
	b, err := readSmall(procRoot+"/"+strconv.Itoa(pid)+"/status", buf[:])
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return pid, nil
		}
		// A status file longer than the buffer still has Tgid near the top.
		if !errors.Is(err, ErrBadStat) {
			return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
		}
		b = buf[:]
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("Tgid:")); ok {
			n, ok := parseInt(bytes.TrimSpace(v))
			if !ok || n <= 0 {
				return 0, fmt.Errorf("status of pid %d: bad Tgid: %w", pid, ErrBadStat)
			}
			return n, nil
		}
	}
	return pid, nil
}

// ownerID returns the numeric owner id of a process under mode by.
func ownerID(procRoot string, pid int, si statInfo, by By) (int, error) {
	switch by {
	case ByPGID:
		return si.pgid, nil
	case ByPID:
		return readTgid(procRoot, pid)
	default:
		return si.sid, nil
	}
}

// OwnerOf returns the lease owner of pid under mode by, reading
// <procRoot>/<pid>/stat (and, for ByPID, status to map a thread to its
// process).
func OwnerOf(procRoot string, pid int, by By) (Owner, error) {
	if !by.valid() {
		return "", fmt.Errorf("owner of pid %d: %w", pid, ErrInvalidLeaseBy)
	}
	var buf [statBufSize]byte
	si, err := readStat(procRoot, pid, buf[:])
	if err != nil {
		return "", err
	}
	id, err := ownerID(procRoot, pid, si, by)
	if err != nil {
		return "", err
	}
	return MakeOwner(by, id), nil
}
