package fusefs

import (
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Directory listings without OPENDIR and RELEASEDIR.
//
// dirsFS wraps go-fuse's node bridge and answers OPENDIR with ENOSYS. The
// kernel then sets no_opendir for the connection (fs/fuse/file.c,
// fuse_file_open): it never sends OPENDIR or RELEASEDIR again and opens
// every directory with FOPEN_CACHE_DIR|FOPEN_KEEP_CACHE, so a warm
// readdir costs no request at all. The cached listing of a directory is
// dropped by the kernel when it changes the directory through this mount
// (iversion) and by a view switch (NotifyContent on the directory), as
// before.
//
// READDIR and READDIRPLUS then arrive without a handle (fh 0). dirsFS
// opens a listing through the bridge for them (OpendirHandle, which admits
// the caller), serves the chunk through the bridge (so READDIRPLUS's
// lookups are accounted as usual), and keeps the listing, keyed by
// directory and the offset where the next chunk starts, for the reader's
// next chunk: one listing serves a whole pass, as one opendir did. A
// listing is released at the end of the pass (an empty chunk), or evicted
// when more than maxDirCursors readers stopped half-way. A continuation
// that finds no kept listing gets a fresh one seeked to its offset (the
// offsets are indexes into the name-sorted listing).
type dirsFS struct {
	fuse.RawFileSystem

	opened atomic.Int64 // listings opened (tests)

	// flush writes the overlay log's pending frame, given the mark count
	// marked returned before the request (wal_raw.go); set before the
	// server starts.
	flush  func(before uint64)
	marked func() uint64

	mu      sync.Mutex
	cursors map[cursorKey]dirCursor
}

// cursorKey names a kept listing: the directory and where its next chunk
// starts.
type cursorKey struct{ node, next uint64 }

// dirCursor is a bridge directory handle and the header it was opened with.
type dirCursor struct {
	fh uint64
	in fuse.InHeader
}

// maxDirCursors bounds the listings kept for readers that stopped before
// the end of a directory.
const maxDirCursors = 32

func newDirsFS(raw fuse.RawFileSystem) *dirsFS {
	return &dirsFS{RawFileSystem: raw, cursors: map[cursorKey]dirCursor{}}
}

// OpenDir makes the kernel stop sending OPENDIR (and RELEASEDIR).
func (d *dirsFS) OpenDir(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

// ReadDir serves a chunk of a listing opened without OPENDIR.
func (d *dirsFS) ReadDir(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return d.chunk(cancel, input, out, d.RawFileSystem.ReadDir)
}

// ReadDirPlus serves a chunk of a listing opened without OPENDIR.
func (d *dirsFS) ReadDirPlus(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return d.chunk(cancel, input, out, d.RawFileSystem.ReadDirPlus)
}

// ReleaseDir releases a handle the kernel got from OPENDIR; there are none
// (OPENDIR always fails), so this only guards against a stray request.
func (d *dirsFS) ReleaseDir(input *fuse.ReleaseIn) {
	if input.Fh != 0 {
		d.RawFileSystem.ReleaseDir(input)
	}
}

func (d *dirsFS) chunk(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList,
	read func(<-chan struct{}, *fuse.ReadIn, *fuse.DirEntryList) fuse.Status) fuse.Status {
	if input.Fh != 0 {
		return read(cancel, input, out)
	}
	c, st := d.take(cancel, input)
	if !st.Ok() {
		return st
	}
	in := *input
	in.Fh = c.fh
	st = read(cancel, &in, out)
	if !st.Ok() || out.Offset == input.Offset {
		// An error, or the end of the listing (an empty chunk).
		d.release(c)
		return st
	}
	d.put(cursorKey{node: input.NodeId, next: out.Offset}, c)
	return st
}

// take returns the kept listing whose next chunk starts at the requested
// offset, or opens a new one (the bridge seeks it there).
func (d *dirsFS) take(cancel <-chan struct{}, input *fuse.ReadIn) (dirCursor, fuse.Status) {
	k := cursorKey{node: input.NodeId, next: input.Offset}
	d.mu.Lock()
	c, ok := d.cursors[k]
	if ok {
		delete(d.cursors, k)
	}
	d.mu.Unlock()
	if ok {
		return c, fuse.OK
	}
	var oo fuse.OpenOut
	if st := d.RawFileSystem.OpenDir(cancel, &fuse.OpenIn{InHeader: input.InHeader}, &oo); !st.Ok() {
		return dirCursor{}, st
	}
	d.opened.Add(1)
	return dirCursor{fh: oo.Fh, in: input.InHeader}, fuse.OK
}

// put keeps c for the chunk at k.
func (d *dirsFS) put(k cursorKey, c dirCursor) {
	var evicted []dirCursor
	d.mu.Lock()
	if old, ok := d.cursors[k]; ok {
		evicted = append(evicted, old) // another reader at the same place
		delete(d.cursors, k)
	}
	for ok, v := range d.cursors {
		if len(d.cursors) < maxDirCursors {
			break
		}
		evicted = append(evicted, v)
		delete(d.cursors, ok)
	}
	d.cursors[k] = c
	d.mu.Unlock()
	for _, e := range evicted {
		d.release(e)
	}
}

func (d *dirsFS) release(c dirCursor) {
	d.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: c.in, Fh: c.fh})
}

// kept is the number of listings kept for continuations (tests).
func (d *dirsFS) kept() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.cursors)
}
