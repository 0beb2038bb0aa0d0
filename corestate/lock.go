package corestate

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fileLock is an exclusive flock(2) on one lock file. flock locks belong to
// the open file description, so two handles in one process exclude each
// other exactly like two processes do, and the kernel drops the lock when a
// process dies.
type fileLock struct {
	path string
	f    *os.File
}

// acquireLock takes an exclusive lock on path, retrying every retry until
// timeout. With timeout <= 0 it tries exactly once. After acquiring, it
// checks that path still names the locked inode: lock files are unlinked
// when their record disappears, and a waiter that locked the unlinked inode
// must start over instead of believing it owns the new file.
func acquireLock(path string, timeout, retry time.Duration) (*fileLock, error) {
	deadline := time.Now().Add(timeout)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("corestate: open lock %s: %w", path, err)
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err == nil {
				break
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if !errors.Is(err, unix.EWOULDBLOCK) {
				f.Close()
				return nil, fmt.Errorf("corestate: lock %s: %w", path, err)
			}
			if !time.Now().Before(deadline) {
				f.Close()
				return nil, fmt.Errorf("%w: %s", ErrLockTimeout, path)
			}
			time.Sleep(retry)
		}
		same, err := sameFile(f, path)
		if err != nil {
			f.Close()
			return nil, err
		}
		if same {
			return &fileLock{path: path, f: f}, nil
		}
		// Locked an unlinked inode; closing drops that lock.
		f.Close()
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%w: %s", ErrLockTimeout, path)
		}
	}
}

func sameFile(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("corestate: stat lock %s: %w", path, err)
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
	// Closing the last descriptor releases the flock.
	_ = l.f.Close()
}
