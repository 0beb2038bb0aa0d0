// Package lockfile is the one flock(2) helper of acyclicfs: an exclusive
// or shared lock on a file, taken at once or waited for with a timeout
// and a context. It is built on github.com/gofrs/flock.
//
// flock locks belong to the open file description: two Locks on one path
// in one process exclude each other exactly as two processes do, and the
// kernel drops a lock when its holder dies, so a crashed holder never
// blocks the next one. A lock held by another process has no event to
// wait on: Wait polls.
//
// The store (meta.db, whose lock bbolt takes), corestate (record and
// journal lock files) and the daemon (one per store) lock through it.
package lockfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"
)

// ErrHeld is returned when another owner holds the lock for as long as the
// caller was willing to wait.
var ErrHeld = errors.New("lockfile: held by another owner")

// Mode is the kind of lock: one exclusive owner, or any number of shared
// ones.
type Mode int

const (
	// Exclusive excludes every other lock on the file.
	Exclusive Mode = iota
	// Shared excludes only an exclusive lock.
	Shared
)

func (m Mode) String() string {
	if m == Shared {
		return "shared"
	}
	return "exclusive"
}

// Lock is a flock on one file. It opens the file at each attempt and
// keeps it open only while it holds the lock. A Lock is not safe for
// concurrent use by several goroutines.
type Lock struct {
	path string
	fl   *flock.Flock
}

// New returns an unheld lock on path. flag is os.OpenFile's for the file
// (flock needs no write access: os.O_RDONLY|os.O_CREATE makes a missing
// lock file, os.O_RDONLY fails on one); a created file gets mode 0600.
func New(path string, flag int) *Lock {
	return &Lock{path: path, fl: flock.New(path, flock.SetFlag(flag), flock.SetPermissions(0o600))}
}

// Path is the locked file's path.
func (l *Lock) Path() string { return l.path }

// TryLock takes the lock in mode if no other owner holds it, without
// waiting: false, nil means another owner holds it. An error opening the
// file reads "open lock PATH: …", one of flock(2) "lock PATH: …".
func (l *Lock) TryLock(mode Mode) (bool, error) {
	try := l.fl.TryLock
	if mode == Shared {
		try = l.fl.TryRLock
	}
	for {
		ok, err := try()
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Op == "open" {
				return false, fmt.Errorf("open lock %s: %w", l.path, err)
			}
			return false, fmt.Errorf("lock %s: %w", l.path, err)
		}
		return ok, nil
	}
}

// Wait takes the lock in mode: it tries at once and, while another owner
// holds it, again every retry (and once more when the timeout is up) until
// it has waited timeout (timeout <= 0: it tries once) or ctx ends. It
// returns an error wrapping ErrHeld (and, when ctx ended, ctx's cause)
// naming the file if the lock stayed held, and TryLock's errors.
func (l *Lock) Wait(ctx context.Context, mode Mode, timeout, retry time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrHeld, l.path, context.Cause(ctx))
	}
	deadline := time.Now().Add(timeout)
	var t *time.Timer
	for {
		ok, err := l.TryLock(mode)
		if ok || err != nil {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: %s (%s, waited %v)", ErrHeld, l.path, mode, max(timeout, 0))
		}
		if t == nil {
			t = time.NewTimer(min(retry, left))
			defer t.Stop()
		} else {
			t.Reset(min(retry, left))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %w", ErrHeld, l.path, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// Stat describes the file the lock is held on (which may no longer be the
// one path names, if it was replaced or unlinked meanwhile).
func (l *Lock) Stat() (fs.FileInfo, error) {
	fi, err := l.fl.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat lock %s: %w", l.path, err)
	}
	return fi, nil
}

// Unlock releases the lock and closes the file. It does nothing on an
// unheld Lock.
func (l *Lock) Unlock() error {
	if err := l.fl.Unlock(); err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	return nil
}
