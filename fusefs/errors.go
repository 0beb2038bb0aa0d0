package fusefs

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/acyclicfs/acyclicfs/store"
)

var (
	// ErrBadSnapshot is returned when the overlay snapshot in a StateDir is
	// torn, has a bad checksum, or describes an impossible inode table.
	ErrBadSnapshot = errors.New("fusefs: corrupt overlay snapshot")
	// ErrNoObjects is returned when a Config or RecoverCapture call has no
	// Objects implementation.
	ErrNoObjects = errors.New("fusefs: no object store configured")
	// ErrNotAdmitted is a convenience sentinel an Admitter may wrap to make a
	// request fail with EAGAIN (any other admission error maps to EIO).
	ErrNotAdmitted = errors.New("fusefs: request not admitted")
	// ErrReadOnly is what a change to a read-only mount fails with (EROFS);
	// see Mount.SetReadOnly.
	ErrReadOnly = errors.New("fusefs: mount is read-only")
	// ErrInUse is what UnmountUnused fails with while other processes use
	// the mount (a *BusyError names them).
	ErrInUse = errors.New("mount in use")
)

// toErrno is the one place that maps Go errors to FUSE errnos. Unlike
// go-fuse's ToErrno it follows %w chains, so wrapped store or syscall
// errors keep their meaning.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	switch {
	case errors.Is(err, ErrNotAdmitted):
		return syscall.EAGAIN
	case errors.Is(err, ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, store.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist), errors.Is(err, store.ErrExists):
		return syscall.EEXIST
	case errors.Is(err, fs.ErrPermission):
		return syscall.EPERM
	}
	return syscall.EIO
}
