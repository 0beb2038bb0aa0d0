package corestate

import (
	// Aliased: the package's tests declare a type named context.
	stdcontext "context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/lockfile"
)

// fileLock is an exclusive flock(2) on one lock file (internal/lockfile).
// flock locks belong to the open file description, so two handles in one
// process exclude each other exactly like two processes do, and the kernel
// drops the lock when a process dies.
type fileLock struct {
	path string
	l    *lockfile.Lock
}

// acquireLock takes an exclusive lock on path, retrying every retry until
// timeout. With timeout <= 0 it tries exactly once. After acquiring, it
// checks that path still names the locked inode: lock files are unlinked
// when their record disappears, and a waiter that locked the unlinked inode
// must start over instead of believing it owns the new file.
func acquireLock(path string, timeout, retry time.Duration) (*fileLock, error) {
	deadline := time.Now().Add(timeout)
	for {
		l := lockfile.New(path, os.O_RDWR|os.O_CREATE)
		if err := l.Wait(stdcontext.Background(), lockfile.Exclusive, time.Until(deadline), retry); err != nil {
			if errors.Is(err, lockfile.ErrHeld) {
				return nil, fmt.Errorf("%w: %s", ErrLockTimeout, path)
			}
			return nil, fmt.Errorf("corestate: %w", err)
		}
		same, err := sameFile(l, path)
		if err != nil {
			_ = l.Unlock()
			return nil, err
		}
		if same {
			return &fileLock{path: path, l: l}, nil
		}
		// Locked an unlinked inode; closing drops that lock.
		_ = l.Unlock()
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%w: %s", ErrLockTimeout, path)
		}
	}
}

func sameFile(l *lockfile.Lock, path string) (bool, error) {
	held, err := l.Stat()
	if err != nil {
		return false, fmt.Errorf("corestate: %w", err)
	}
	named, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("corestate: stat lock %s: %w", path, err)
	}
	return os.SameFile(held, named), nil
}

// release unlocks; with unlink it first removes the lock file while still
// holding it so no other owner can be holding the same name meanwhile.
func (l *fileLock) release(unlink bool) {
	if unlink {
		_ = os.Remove(l.path)
	}
	_ = l.l.Unlock()
}
