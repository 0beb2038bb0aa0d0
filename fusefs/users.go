package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Process is a process that uses a mount.
type Process struct {
	PID  int
	Comm string // /proc/PID/comm
}

// BusyError is UnmountUnused's refusal: Users still use the mount.
type BusyError struct {
	Mountpoint string
	Users      []Process
}

// busyListed is how many processes a BusyError names.
const busyListed = 5

func (e *BusyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is in use by", e.Mountpoint)
	for i, p := range e.Users {
		if i == busyListed {
			fmt.Fprintf(&b, " and %d more", len(e.Users)-i)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " pid %d (%s)", p.PID, p.Comm)
	}
	return b.String()
}

func (e *BusyError) Unwrap() error { return ErrInUse }

// Users lists the processes other than this one that use the mount: a
// working directory, root directory, open file or file mapping on it.
// It compares mount ids, not paths: an in-place mount covers DIR, and a
// process that opened DIR's files before the mount uses the directory
// underneath, under the same names. Nothing it does sends a request to
// the mount (statx with AT_STATX_DONT_SYNC, fdinfo). Processes of other
// users are listed only as far as /proc lets this one read them. Once the
// mountpoint's path no longer names this mount (it was detached), it
// lists nobody.
func (m *Mount) Users() ([]Process, error) {
	if m.mntID != 0 {
		// The mount's own identity, not whatever the path names now: after
		// a detach (umount -l) the path is a directory of the parent file
		// system, and every process there would count.
		if !m.ours() {
			return nil, nil
		}
		return mountUsers("/proc", m.mntID, os.Getpid())
	}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, m.mountpoint, unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &st); err != nil {
		return nil, fmt.Errorf("mount id of %s: %w", m.mountpoint, err)
	}
	return mountUsers("/proc", st.Mnt_id, os.Getpid())
}

func mountUsers(proc string, mnt uint64, self int) ([]Process, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if usesMountID(proc+"/"+e.Name(), mnt) {
			comm, _ := os.ReadFile(proc + "/" + e.Name() + "/comm")
			out = append(out, Process{PID: pid, Comm: string(bytes.TrimSpace(comm))})
		}
	}
	return out, nil
}

// usesMountID reports whether the process at /proc/PID (dir) has its
// working directory, root, an open file or a mapped file on mount mnt.
// What cannot be read (the process exited, another user's) is skipped.
func usesMountID(dir string, mnt uint64) bool {
	on := func(p string) bool {
		var st unix.Statx_t
		return unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &st) == nil &&
			st.Mask&unix.STATX_MNT_ID != 0 && st.Mnt_id == mnt
	}
	if on(dir+"/cwd") || on(dir+"/root") {
		return true
	}
	buf := make([]byte, 512)
	for _, fd := range names(dir + "/fd") {
		if fdMountID(dir+"/fdinfo/"+fd, buf) == mnt {
			return true
		}
	}
	for _, m := range names(dir + "/map_files") {
		if on(dir + "/map_files/" + m) {
			return true
		}
	}
	return false
}

// fdMountID reads the mnt_id line of an fdinfo file (0 if unreadable).
func fdMountID(path string, buf []byte) uint64 {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil || n <= 0 {
		return 0
	}
	for line := range bytes.SplitSeq(buf[:n], []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("mnt_id:")); ok {
			id, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0
			}
			return id
		}
	}
	return 0
}

// names lists a /proc directory (nil if unreadable).
func names(dir string) []string {
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	n, _ := f.Readdirnames(-1)
	return n
}
