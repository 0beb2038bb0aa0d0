package daemon

import "errors"

// ErrBadLeaseID: a lease id given by the user does not parse.
var ErrBadLeaseID = errors.New("not a lease id")

// ErrStuckDaemon: a killed daemon has not exited, even after its FUSE
// connections were aborted (ReapDead), and still holds the store.
var ErrStuckDaemon = errors.New("killed daemon cannot exit")
