package fusefs

import "github.com/acyclicfs/acyclicfs/fusefs/uring"

// The FUSE-over-io_uring transport lives in fusefs/uring; a mount starts
// it through uring.NewServer and uring.Start (mount.go, rawmount.go). These
// are its switches as the package's callers know them.

// ErrUringUnavailable means the kernel does not serve FUSE over io_uring
// (module parameter off or missing, io_uring disabled); it is
// uring.ErrUnavailable.
var ErrUringUnavailable = uring.ErrUnavailable

// UringAvailable reports whether this kernel serves FUSE over io_uring
// (uring.Available).
func UringAvailable() error { return uring.Available() }

// TurnOnUring turns the fuse module's enable_uring on where it exists and
// the caller may write it (root), then reports UringAvailable
// (uring.TurnOn). A process that turns it on should call RestoreUring
// before it exits: the parameter is the whole machine's.
func TurnOnUring() error { return uring.TurnOn() }

// RestoreUring turns enable_uring off again if TurnOnUring of this process
// turned it on (uring.Restore).
func RestoreUring() error { return uring.Restore() }
