package uring

import "errors"

// ErrUnavailable is returned when the kernel does not serve FUSE over
// io_uring (module parameter off or missing, io_uring disabled, the rings
// refused). Its text is the one fusefs.ErrUringUnavailable always had.
var ErrUnavailable = errors.New("fusefs: FUSE over io_uring is not available")
