package fusefs

import "syscall"

// Read-only mounts. A mount made read-only (Config.ReadOnly, or
// SetReadOnly while mounted) refuses every change with EROFS: create,
// mknod, O_TMPFILE, mkdir, symlink, link, unlink, rmdir, rename, setattr
// (truncate, chmod, chown, utimens), an open for writing or with O_TRUNC,
// setxattr, removexattr, and write and fallocate on handles the daemon
// serves. Lookups, reads, readdir, readlink, getattr, fsync, locks and
// xattr reads keep working, and Capture still captures what was changed
// before.
//
// Caveat: a file opened for writing before the switch whose I/O the kernel
// does by passthrough (Config.Passthrough) keeps writing to its upper file
// until it is closed: the kernel does not ask the daemon. Those writes are
// captured like any earlier change.

// SetReadOnly makes the mount refuse (ro) or accept (!ro) changes from the
// next request on. It is safe to call at any time from any goroutine.
func (m *Mount) SetReadOnly(ro bool) { m.readOnly.Store(ro) }

// ReadOnly reports whether the mount refuses changes.
func (m *Mount) ReadOnly() bool { return m.readOnly.Load() }

// refuseChange is the errno of a change request: EROFS while read-only.
func (m *Mount) refuseChange() syscall.Errno {
	if m.readOnly.Load() {
		return toErrno(ErrReadOnly)
	}
	return 0
}

// refuseOpen is the errno of an open with flags: EROFS for an open that
// writes or truncates while read-only.
func (m *Mount) refuseOpen(flags uint32) syscall.Errno {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return m.refuseChange()
	}
	return 0
}
