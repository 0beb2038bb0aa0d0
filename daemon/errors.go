package daemon

import "errors"

// ErrBadLeaseID: a lease id given by the user does not parse.
var ErrBadLeaseID = errors.New("not a lease id")
