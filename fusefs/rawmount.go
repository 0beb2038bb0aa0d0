package fusefs

import (
	"errors"
	"fmt"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/acyclicfs/acyclicfs/fusefs/uring"
	"github.com/acyclicfs/acyclicfs/internal/fusectl"
)

// RawMount is a go-fuse file system mounted by MountRaw: the same
// transports a Mount uses, without the overlay. The benchmark harness's
// floor server (test/bench/floorfs) mounts through it, so that it and
// acyclicfs differ in what answers requests, not in how they arrive.
type RawMount struct {
	Server *fuse.Server
	uring  *uring.Transport
	done   chan struct{}
}

// MountRaw mounts fsys at mountpoint with opts and serves it, over
// io_uring when useRings is set (ErrUringUnavailable where the kernel does
// not offer it) and through /dev/fuse otherwise. It returns once the
// kernel serves the mount; Wait returns after it is unmounted.
func MountRaw(fsys fuse.RawFileSystem, mountpoint string, opts *fuse.MountOptions, useRings bool) (*RawMount, error) {
	o := *opts
	if useRings {
		if err := UringAvailable(); err != nil {
			return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
		}
		o.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	}
	server, fuseFD, err := uring.NewServer(fsys, mountpoint, &o, useRings)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	go server.Serve()
	m := &RawMount{Server: server, done: make(chan struct{})}
	if useRings {
		t, err := uring.Start(server, fsys, &o, fuseFD, nil)
		if err != nil {
			_ = fusectl.AbortAt(mountpoint)
			_ = server.Unmount()
			server.Wait()
			if !errors.Is(err, ErrUringUnavailable) {
				err = fmt.Errorf("%w: %w", ErrUringUnavailable, err)
			}
			return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
		}
		m.uring = t
	}
	if err := server.WaitMount(); err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	go func() {
		server.Wait()
		if m.uring != nil {
			m.uring.Stop()
		}
		close(m.done)
	}()
	return m, nil
}

// Transport is "io_uring" or "dev-fuse".
func (m *RawMount) Transport() string {
	if m.uring != nil {
		return "io_uring"
	}
	return "dev-fuse"
}

// Wait blocks until the mount is gone and its server has stopped.
func (m *RawMount) Wait() { <-m.done }

// WithoutOpendir wraps a go-fuse node bridge as a Mount's: OPENDIR is
// answered with ENOSYS, so the kernel never sends OPENDIR or RELEASEDIR and
// caches every directory's listing (rawdirs.go).
func WithoutOpendir(raw fuse.RawFileSystem) fuse.RawFileSystem { return newDirsFS(raw) }
