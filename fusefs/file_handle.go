package fusefs

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// handle is one open of a regular file. Its fd belongs to the inode's
// shared backing file and stays open while any handle uses it.
type handle struct {
	m    *Mount
	in   *inode
	fd   int
	blob bool     // fd is the read-only blob file of a clean inode
	own  *os.File // a private backing file (not the inode's shared one)
	pt   bool     // given to the kernel for passthrough (a *ptHandle)
	// writable: opened for writing (counted in the overlay's fsmonitor
	// writers until released).
	writable bool
	// redir is the descriptor (plus one; 0: none) of the inode's upper
	// file once a copy-up moved this blob handle there (overlay.redirect):
	// reads, seeks and fsync use it from then on. The handle then holds a
	// reference on the upper file too (upRef, guarded by overlay.mu), and
	// keeps its blob reference, which requests in flight may still use,
	// until Release.
	redir atomic.Int64
	upRef bool
	// lazy is the descriptor (plus one; 0: not yet) of the inode's shared
	// blob file for a blob handle opened without it (fd -1): it is opened
	// at the handle's first read or seek (lazyBlobFd).
	lazy atomic.Int64

	lockMu   sync.Mutex // protects lockFile
	lockFile *os.File   // private descriptor of the inode's lock file (locks.go)
}

// ptHandle is a handle the kernel may serve by passthrough: go-fuse
// registers its fd as the inode's backing file.
type ptHandle struct{ *handle }

// PassthroughFd offers the backing file for kernel passthrough.
func (h *ptHandle) PassthroughFd() (int, bool) { return h.fd, true }

func asHandle(f fs.FileHandle) *handle {
	switch h := f.(type) {
	case *handle:
		return h
	case *ptHandle:
		return h.handle
	}
	return nil
}

// Read reads from the backing file. The reply is spliced from the file
// to the FUSE device (go-fuse falls back to pread when it cannot splice),
// so the data is not copied through the daemon. The descriptor stays
// open until the reply is written: the kernel sends RELEASE only after
// every request of the handle has completed, and the shared backing file
// is closed only at the last RELEASE.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.m.daemonReads.Add(1)
	fd, errno := h.readFd()
	if errno != 0 {
		return nil, errno
	}
	return fuse.ReadResultFd(uintptr(fd), off, len(dest)), 0
}

// readFd is the descriptor reads use: the upper file once a copy-up
// redirected a blob handle, else the handle's own, else (a blob handle
// opened without it) the inode's shared blob file.
func (h *handle) readFd() (int, syscall.Errno) {
	if fd := h.redir.Load(); fd != 0 {
		return int(fd - 1), 0
	}
	if h.fd >= 0 {
		return h.fd, 0
	}
	return h.lazyBlobFd()
}

// lazyBlobFd opens the inode's shared blob file for a blob handle opened
// without it. The blob is the one the handle was opened on: inode.blobID
// changes only while no blob handle is open. The file stays open until
// the last blob handle's RELEASE, which the kernel sends after the
// handle's last request (a read's reply included) has completed.
func (h *handle) lazyBlobFd() (int, syscall.Errno) {
	if fd := h.lazy.Load(); fd != 0 {
		return int(fd - 1), 0
	}
	ov := h.m.ov
	ov.mu.Lock()
	defer ov.mu.Unlock()
	in := h.in
	if in.blobFile == nil {
		f, err := openBlob(ov.objects, in.blobID)
		if err != nil {
			return -1, toErrno(err)
		}
		in.blobFile = f
	}
	fd := int(in.blobFile.Fd())
	h.lazy.Store(int64(fd) + 1)
	return fd, 0
}

// Write writes to the upper file. A blob-backed handle was opened read-only.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.m.daemonWrites.Add(1)
	if h.blob {
		return 0, syscall.EBADF
	}
	if e := h.m.refuseChange(); e != 0 {
		return 0, e
	}
	n, err := syscall.Pwrite(h.fd, data, off)
	if err != nil {
		return uint32(max(n, 0)), toErrno(err)
	}
	return uint32(n), 0
}

// Flush has nothing to do: data is in the backing file already, and
// locks are dropped at Release. It answers ENOSYS so that the kernel sets
// no_flush and stops sending FLUSH at every close (one round trip fewer
// per open; close still waits for nothing else).
func (h *handle) Flush(ctx context.Context) syscall.Errno { return syscall.ENOSYS }

// Fsync makes the file's data and its names durable: the upper file is
// fsynced, then the overlay snapshot is written.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if !h.blob || h.redir.Load() != 0 {
		fd, errno := h.readFd()
		if errno != 0 {
			return errno
		}
		if err := syscall.Fsync(fd); err != nil {
			return toErrno(err)
		}
	}
	return toErrno(h.m.writeSnapshot())
}

// Release drops the handle's reference to the shared backing file.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.closeLocks()
	ov := h.m.ov
	ov.mu.Lock()
	defer ov.mu.Unlock()
	in := h.in
	in.opens--
	if !h.pt {
		in.plainOpens--
	}
	ov.openHandles--
	ov.released.Broadcast()
	if h.blob {
		delete(in.readers, h)
	}
	if h.upRef {
		h.upRef = false
		in.upperOpens--
		if in.upperOpens == 0 && in.upperFile != nil {
			in.upperFile.Close()
			in.upperFile = nil
		}
	}
	if h.own != nil {
		h.own.Close()
	} else if h.blob {
		in.blobOpens--
		if in.blobID != in.lower.ID && !h.pt {
			in.stalePages = true // see inode.stalePages
		}
		if in.blobOpens == 0 && in.blobFile != nil {
			in.blobFile.Close()
			in.blobFile = nil
		}
	} else {
		in.upperOpens--
		if in.upperOpens == 0 && in.upperFile != nil {
			in.upperFile.Close()
			in.upperFile = nil
		}
	}
	if h.writable {
		ov.fsmReleased(in)
	}
	ov.maybeDropUpper(in)
	return 0
}

// Getattr answers fstat on an open file.
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	n := &node{m: h.m, in: h.in}
	return n.Getattr(ctx, h, out)
}

// Lseek supports SEEK_DATA and SEEK_HOLE by asking the backing file.
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	fd, errno := h.readFd()
	if errno != 0 {
		return 0, errno
	}
	n, err := unix.Seek(fd, int64(off), int(whence))
	if err != nil {
		return 0, toErrno(err)
	}
	return uint64(n), 0
}

// Allocate implements fallocate on the upper file.
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if h.blob {
		return syscall.EBADF
	}
	if e := h.m.refuseChange(); e != 0 {
		return e
	}
	return toErrno(unix.Fallocate(h.fd, mode, int64(off), int64(size)))
}
