package uring

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// serverMu makes NewServer's descriptor census exact: every mount of
// package fusefs opens /dev/fuse through NewServer, under it, and nothing
// else in the process opens it.
var serverMu sync.Mutex

// NewServer is fuse.NewServer, which mounts and answers INIT; with wantFD
// it also returns the connection's /dev/fuse descriptor, which go-fuse
// keeps to itself (Start submits on it), or -1 when the census cannot tell
// it (Start then refuses, and the caller aborts the mount).
func NewServer(fsys fuse.RawFileSystem, mountpoint string, opts *fuse.MountOptions, wantFD bool) (*fuse.Server, int, error) {
	serverMu.Lock()
	defer serverMu.Unlock()
	if !wantFD {
		s, err := fuse.NewServer(fsys, mountpoint, opts)
		return s, -1, err
	}
	before := fuseFDs()
	s, err := fuse.NewServer(fsys, mountpoint, opts)
	if err != nil {
		return nil, -1, err
	}
	fd := -1
	for n := range fuseFDs() {
		if !before[n] {
			if fd >= 0 {
				return s, -1, nil // more than one: cannot tell
			}
			fd = n
		}
	}
	return s, fd, nil
}

// fuseFDs lists the process's open /dev/fuse descriptors.
func fuseFDs() map[int]bool {
	m := map[int]bool{}
	ds, _ := os.ReadDir("/proc/self/fd")
	for _, d := range ds {
		n, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", d.Name())); err == nil && l == "/dev/fuse" {
			m[n] = true
		}
	}
	return m
}
