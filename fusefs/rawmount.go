package fusefs

import (
	"errors"
	"fmt"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/acyclicfs/acyclicfs/internal/fusectl"
)

// RawMount is a go-fuse file system mounted by MountRaw: the same
// transports a Mount uses, without the overlay. The benchmark harness's
// floor server (test/bench/floorfs) mounts through it, so that it and
// acyclicfs differ in what answers requests, not in how they arrive.
type RawMount struct {
	Server *fuse.Server
	uring  *uringTransport
	done   chan struct{}
}

// MountRaw mounts fsys at mountpoint with opts and serves it, over
// io_uring when uring is set (ErrUringUnavailable where the kernel does
// not offer it) and through /dev/fuse otherwise. It returns once the
// kernel serves the mount; Wait returns after it is unmounted.
func MountRaw(fsys fuse.RawFileSystem, mountpoint string, opts *fuse.MountOptions, uring bool) (*RawMount, error) {
	o := *opts
	if uring {
		if err := UringAvailable(); err != nil {
			return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
		}
		o.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	}
	server, fuseFD, err := newServer(fsys, mountpoint, &o, uring)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	go server.Serve()
	m := &RawMount{Server: server, done: make(chan struct{})}
	if uring {
		if err := m.startUring(fsys, fuseFD, &o); err != nil {
			_ = fusectl.AbortAt(mountpoint)
			_ = server.Unmount()
			server.Wait()
			if !errors.Is(err, ErrUringUnavailable) {
				err = fmt.Errorf("%w: %w", ErrUringUnavailable, err)
			}
			return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
		}
	}
	if err := server.WaitMount(); err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	go func() {
		server.Wait()
		if m.uring != nil {
			m.uring.stop()
		}
		close(m.done)
	}()
	return m, nil
}

func (m *RawMount) startUring(fsys fuse.RawFileSystem, fuseFD int, opts *fuse.MountOptions) error {
	if fuseFD < 0 {
		return fmt.Errorf("%w: the mount's /dev/fuse descriptor could not be told apart", ErrUringUnavailable)
	}
	kernel := m.Server.KernelSettings()
	if kernel.Flags64()&fuse.CAP_OVER_IO_URING == 0 {
		return fmt.Errorf("%w: the kernel did not offer it at INIT", ErrUringUnavailable)
	}
	t, err := startUring(fuse.NewProtocolServer(fsys, opts), fuseFD, kernel, opts.MaxWrite, nil)
	if err != nil {
		return err
	}
	m.uring = t
	return nil
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
