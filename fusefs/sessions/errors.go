package sessions

import "errors"

var (
	// ErrInvalidLeaseBy is returned by ParseBy when the value is not one of
	// "sid", "pgid" or "pid".
	ErrInvalidLeaseBy = errors.New("invalid lease-by value (want sid, pgid or pid)")
	// ErrBadStat is returned when a /proc/<pid>/stat (or status) file cannot
	// be parsed.
	ErrBadStat = errors.New("malformed /proc stat")
	// ErrNoProcess is returned when the process named by a pid does not exist
	// (it exited, or it is not visible in the configured proc tree).
	ErrNoProcess = errors.New("no such process")
	// ErrClosed is returned by Admit when a request needs a new lease after
	// the Tracker was closed.
	ErrClosed = errors.New("session tracker is closed")
	// ErrInvalidConfig is returned by New when the Config is unusable.
	ErrInvalidConfig = errors.New("invalid session tracker config")
)

// ErrInvalidHarness is returned by DeclareHarness for a pid that cannot be
// a harness: init, the daemon itself, or not a positive pid.
var ErrInvalidHarness = errors.New("not a process that can be a harness")
