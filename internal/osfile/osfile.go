// Package osfile opens regular files with one system call.
//
// os.OpenFile prepares every descriptor for the runtime poller: for a
// regular file it sets O_NONBLOCK (fcntl F_GETFL, F_SETFL), tries
// epoll_ctl, which refuses regular files, and clears O_NONBLOCK again (two
// more fcntl calls) — six system calls for one open. The daemon opens a
// file on the request path of most FUSE requests that touch file content
// (an upper file at CREATE, a blob at OPEN), where those five extra calls
// were 7% of its CPU time in an open/close loop. Open here is openat(2)
// and the one fcntl of os.NewFile; the *os.File it returns reads and
// writes with blocking system calls, as os.OpenFile's does for regular
// files. Do not use it for pipes, sockets or terminals, which os.OpenFile
// makes pollable.
package osfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Open is os.OpenFile for a regular file or directory. Errors are
// *fs.PathError, as os.OpenFile's.
func Open(name string, flag int, perm os.FileMode) (*os.File, error) {
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, uint32(perm.Perm()))
		if err == nil {
			return os.NewFile(uintptr(fd), name), nil
		}
		if err != unix.EINTR {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
}

// tempSeq makes CreateTemp's names unique within the process; the time
// and pid make them unlikely to collide with another process's.
var tempSeq atomic.Uint64

// CreateTemp is os.CreateTemp for a regular file: a new file in dir named
// prefix followed by a unique suffix, opened read-write with mode 0600.
func CreateTemp(dir, prefix string) (*os.File, error) {
	base := prefix + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-" + strconv.Itoa(os.Getpid()) + "-"
	for range 100 {
		name := filepath.Join(dir, base+strconv.FormatUint(tempSeq.Add(1), 36))
		f, err := Open(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
}

// Sync fsyncs the file or directory at path (a directory after entries in
// it were created, renamed or removed), opened with Open.
func Sync(path string) error {
	f, err := Open(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}
