package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirHandle is one listing of a directory. The kernel never opens
// directories here (dirsFS answers OPENDIR with ENOSYS, so it caches every
// listing itself); dirsFS opens a dirHandle through the bridge for each
// uncached pass and keeps it between the pass's chunks. The kernel drops
// its cached listing when it changes the directory through this mount, and
// a view switch drops it for every directory whose names changed.
type dirHandle struct {
	m  *Mount
	ds fs.DirStream
}

// OpendirHandle snapshots the listing (the flags are not seen by the
// kernel; see dirsFS).
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, e := n.Readdir(ctx)
	if e != 0 {
		return nil, 0, e
	}
	return &dirHandle{m: n.m, ds: ds}, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

// Readdirent returns the next entry, or nil at the end.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if !d.ds.HasNext() {
		return nil, 0
	}
	e, errno := d.ds.Next()
	return &e, errno
}

// Seekdir repositions the listing (telldir/seekdir).
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if sd, ok := d.ds.(fs.FileSeekdirer); ok {
		return sd.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

// Releasedir closes the listing.
func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) { d.ds.Close() }

// Fsyncdir makes every name in the mount durable (the overlay snapshot).
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return toErrno(d.m.writeSnapshot())
}
