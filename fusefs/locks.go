package fusefs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// File locks (flock and fcntl) are implemented like go-fuse's loopback:
// each open handle gets its own descriptor of a per-inode lock file in
// StateDir/locks/, and the host kernel's OFD locks and flock on that
// descriptor provide conflicts, blocking waits and release on close. The
// lock file is separate from the data file so a copy-up or a view switch
// never drops a lock, and so two mounts sharing a blob never share locks.
// As with the loopback, conflicts are per open file description.

func (o *overlay) lockPath(num uint64) string {
	return filepath.Join(o.stateDir, "locks", strconv.FormatUint(num, 10))
}

// lockFd returns the handle's private lock-file descriptor.
func (h *handle) lockFd() (int, syscall.Errno) {
	h.lockMu.Lock()
	defer h.lockMu.Unlock()
	if h.lockFile == nil {
		p := h.m.ov.lockPath(h.in.num)
		f, err := osfile.Open(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return -1, toErrno(err)
		}
		h.lockFile = f
	}
	return int(h.lockFile.Fd()), 0
}

// Getlk reports a conflicting lock.
func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	fd, e := h.lockFd()
	if e != 0 {
		return e
	}
	var flk syscall.Flock_t
	lk.ToFlockT(&flk)
	err := syscall.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &flk)
	out.FromFlockT(&flk)
	return toErrno(err)
}

// Setlk takes or drops a lock without waiting.
func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.setLock(lk, flags, false)
}

// Setlkw takes a lock, waiting for conflicting ones to go.
func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.setLock(lk, flags, true)
}

func (h *handle) setLock(lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	fd, e := h.lockFd()
	if e != 0 {
		return e
	}
	if flags&fuse.FUSE_LK_FLOCK != 0 {
		var op int
		switch lk.Typ {
		case syscall.F_RDLCK:
			op = syscall.LOCK_SH
		case syscall.F_WRLCK:
			op = syscall.LOCK_EX
		case syscall.F_UNLCK:
			op = syscall.LOCK_UN
		default:
			return syscall.EINVAL
		}
		if !wait {
			op |= syscall.LOCK_NB
		} else {
			h.m.lockWaits.Add(1)
			defer h.m.lockWaits.Add(-1)
		}
		return toErrno(syscall.Flock(fd, op))
	}
	var flk syscall.Flock_t
	lk.ToFlockT(&flk)
	op := unix.F_OFD_SETLK
	if wait {
		op = unix.F_OFD_SETLKW
		h.m.lockWaits.Add(1)
		defer h.m.lockWaits.Add(-1)
	}
	return toErrno(syscall.FcntlFlock(uintptr(fd), op, &flk))
}

func (h *handle) closeLocks() {
	h.lockMu.Lock()
	defer h.lockMu.Unlock()
	if h.lockFile != nil {
		h.lockFile.Close()
		h.lockFile = nil
	}
}
