package fusefs

import (
	"bytes"
	"context"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
	"github.com/acyclicfs/acyclicfs/store"
)

// Getattr answers from the overlay, and for upper files from the backing
// file (passthrough writes bypass the daemon).
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.m.daemonGetattrs.Add(1)
	if e := n.m.admit(ctx); e != 0 {
		return e
	}
	n.m.ov.mu.Lock()
	a := snapAttr(n.in)
	n.m.ov.mu.Unlock()
	n.m.fill(&a, &out.Attr)
	out.SetTimeout(n.m.timeout(&a))
	return 0
}

// Access answers access(2) and the kernel's permission probe for chdir,
// which only mounts without default_permissions send (mountOptions). It
// reads the attributes without admitting the caller: a probe reads no
// content, so it opens no lease. Otherwise a harness that starts a tool with
// its working directory in the mount would pin the view for the harness's
// own, long-lived session, and no reconcile would follow the tool's end.
//
// The check is the kernel's generic one: root passes, except that exec
// needs an exec bit on something that is not a directory; others match
// owner, group, then other bits (without supplementary groups: such
// callers only reach mounts that keep default_permissions). Asking to
// write on a read-only mount is EROFS, as on a read-only native mount.
func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	const rBit, wBit, xBit = 4, 2, 1
	mask &= rBit | wBit | xBit
	if mask&wBit != 0 {
		if e := n.m.refuseChange(); e != 0 {
			return e
		}
	}
	n.m.ov.mu.Lock()
	mode, uid, gid := n.in.mode, n.in.uid, n.in.gid
	dir := n.in.isDir()
	n.m.ov.mu.Unlock()
	c, _ := fuse.FromContext(ctx)
	if !accessAllowed(c, mode, uid, gid, dir, mask) {
		return syscall.EACCES
	}
	return 0
}

// accessAllowed is generic_permission's answer for caller c (nil: root).
func accessAllowed(c *fuse.Caller, mode, uid, gid uint32, dir bool, mask uint32) bool {
	if c == nil || c.Uid == 0 {
		return mask&1 == 0 || dir || mode&0o111 != 0
	}
	bits := mode
	switch {
	case c.Uid == uid:
		bits = mode >> 6
	case c.Gid == gid:
		bits = mode >> 3
	}
	return bits&mask == mask
}

// Setattr handles truncate, chmod, chown and utimens. Truncating a clean
// file copies it up (or starts an empty upper file when truncating to 0).
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.m.admit(ctx); e != 0 {
		return e
	}
	if e := n.m.refuseChange(); e != 0 {
		return e
	}
	ov := n.m.ov
	ino := n.in
	if size, ok := in.GetSize(); ok {
		if ino.isDir() {
			return syscall.EISDIR
		}
		if !ino.isReg() {
			return syscall.EINVAL
		}
		if err := ov.copyUp(ino, size == 0); err != nil {
			return toErrno(err)
		}
		if h := asHandle(f); h != nil && !h.blob {
			if err := syscall.Ftruncate(h.fd, int64(size)); err != nil {
				return toErrno(err)
			}
		} else if err := syscall.Truncate(ov.upperPath(ino.num), int64(size)); err != nil {
			return toErrno(err)
		}
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	ov.mu.Lock()
	now := time.Now().UnixNano()
	changed := false
	if mode, ok := in.GetMode(); ok {
		ino.mode = ino.mode&syscall.S_IFMT | mode&0o7777
		changed = true
	}
	if uid, ok := in.GetUID(); ok {
		ino.uid = uid
		changed = true
	}
	if gid, ok := in.GetGID(); ok {
		ino.gid = gid
		changed = true
	}
	if in.Valid&fuse.FATTR_KILL_SUIDGID != 0 && !ino.isDir() {
		// A chown of a file (killpriv, see killprivCaps): drop set-uid,
		// and set-gid where it means set-gid (group exec on), as
		// notify_change does on a native file.
		kill := uint32(syscall.S_ISUID)
		if ino.mode&0o010 != 0 {
			kill |= syscall.S_ISGID
		}
		if ino.mode&kill != 0 {
			ino.mode &^= kill
			changed = true
		}
	}
	if mok || aok {
		if mok {
			ino.mtime = mtime.UnixNano()
		}
		if aok {
			ino.atime = atime.UnixNano()
		}
		if ino.upper {
			ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
			if aok {
				ts[0] = unix.NsecToTimespec(ino.atime)
			}
			if mok {
				ts[1] = unix.NsecToTimespec(ino.mtime)
			}
			var err error
			if ino.upperFile != nil { // open (tar's futimens): no path lookup
				err = futimens(int(ino.upperFile.Fd()), &ts)
			} else {
				err = unix.UtimesNanoAt(unix.AT_FDCWD, ov.upperPath(ino.num), ts[:], 0)
			}
			if err != nil {
				ov.mu.Unlock()
				return toErrno(err)
			}
		}
		changed = true
	}
	if changed {
		ino.ctime = now
		ov.touch(ino)
		cl := ov.callerOf(ctx)
		ov.noteWriter(ino, &cl)
	}
	a := snapAttr(ino)
	ov.mu.Unlock()
	n.m.fill(&a, &out.Attr)
	out.SetTimeout(n.m.timeout(&a))
	return 0
}

// Readlink returns a symlink's target (new ones from memory, lower ones
// from their blob).
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return nil, e
	}
	ov := n.m.ov
	ov.mu.Lock()
	if !n.in.isSymlink() {
		ov.mu.Unlock()
		return nil, syscall.EINVAL
	}
	if t := n.in.target; t != nil {
		ov.mu.Unlock()
		return t, 0
	}
	id := n.in.lower.ID
	ov.mu.Unlock()
	b, err := ov.objects.ReadBlob(id)
	if err != nil {
		return nil, toErrno(err)
	}
	return b, 0
}

// Open opens a file; see Mount.open.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return nil, 0, e
	}
	if e := n.m.refuseOpen(flags); e != 0 {
		return nil, 0, e
	}
	return n.m.openNode(n.EmbeddedInode(), n.in, flags, callerPID(ctx))
}

// Fsync on a file syncs its upper file and the overlay snapshot; on a
// directory (fsyncdir) the snapshot, which makes every name durable.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if e := n.m.admit(ctx); e != 0 {
		return e
	}
	if h := asHandle(f); h != nil {
		return h.Fsync(ctx, flags)
	}
	return toErrno(n.m.writeSnapshot())
}

// Statfs reports the file system holding the state directory.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(n.m.cfg.StateDir, &s); err != nil {
		return toErrno(err)
	}
	out.FromStatfsT(&s)
	out.NameLen = nameMax
	return 0
}

// Extended attributes live in the overlay only (persisted in the
// snapshot, never captured into trees). Only the user namespace is
// accepted; lookups of others (security.capability, asked by the kernel
// before writes) fail fast with ENODATA.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	n.m.daemonGetxattrs.Add(1)
	if !strings.HasPrefix(attr, "user.") {
		return 0, syscall.ENODATA // only user.* can be set: no lock needed
	}
	if e := n.m.admit(ctx); e != 0 {
		return 0, e
	}
	ov := n.m.ov
	ov.mu.Lock()
	defer ov.mu.Unlock()
	v, ok := n.in.xattrs[attr]
	if !ok {
		return 0, syscall.ENODATA
	}
	if len(dest) == 0 {
		return uint32(len(v)), 0
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// Setxattr sets a user.* attribute.
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if e := n.m.admit(ctx); e != 0 {
		return e
	}
	if e := n.m.refuseChange(); e != 0 {
		return e
	}
	if !strings.HasPrefix(attr, "user.") {
		return syscall.EOPNOTSUPP
	}
	ov := n.m.ov
	ov.mu.Lock()
	defer ov.mu.Unlock()
	_, exists := n.in.xattrs[attr]
	if flags&unix.XATTR_CREATE != 0 && exists {
		return syscall.EEXIST
	}
	if flags&unix.XATTR_REPLACE != 0 && !exists {
		return syscall.ENODATA
	}
	if n.in.xattrs == nil {
		n.in.xattrs = map[string][]byte{}
	}
	n.in.xattrs[attr] = bytes.Clone(data)
	n.in.ctime = time.Now().UnixNano()
	ov.touch(n.in)
	cl := ov.callerOf(ctx)
	ov.noteWriter(n.in, &cl)
	return 0
}

// Removexattr removes an attribute.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if e := n.m.admit(ctx); e != 0 {
		return e
	}
	if e := n.m.refuseChange(); e != 0 {
		return e
	}
	ov := n.m.ov
	ov.mu.Lock()
	defer ov.mu.Unlock()
	if _, ok := n.in.xattrs[attr]; !ok {
		return syscall.ENODATA
	}
	delete(n.in.xattrs, attr)
	n.in.ctime = time.Now().UnixNano()
	ov.touch(n.in)
	cl := ov.callerOf(ctx)
	ov.noteWriter(n.in, &cl)
	return 0
}

// Listxattr lists attribute names, NUL-terminated, in sorted order.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return 0, e
	}
	ov := n.m.ov
	ov.mu.Lock()
	names := make([]string, 0, len(n.in.xattrs))
	for k := range n.in.xattrs {
		names = append(names, k)
	}
	ov.mu.Unlock()
	sort.Strings(names)
	var b []byte
	for _, k := range names {
		b = append(b, k...)
		b = append(b, 0)
	}
	if len(dest) == 0 {
		return uint32(len(b)), 0
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

// open returns a handle sharing the inode's single backing file: the
// upper file (O_RDWR) for dirty files and writers, the blob file
// (O_RDONLY) for clean readers.
func (m *Mount) open(in *inode, flags, pid uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return m.openNode(nil, in, flags, pid)
}

// openNode is open for the kernel inode fin (nil: a create's, whose
// content is new), which a small clean file's first open fills with its
// content (storePages).
func (m *Mount) openNode(fin *fs.Inode, in *inode, flags, pid uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ov := m.ov
	ov.mu.Lock()
	isReg := in.isReg()
	lowerID, clean := in.lower.ID, in.hasLower && !in.upper
	size, stored := in.lower.Size, in.pagesID == in.lower.ID
	ov.mu.Unlock()
	if !isReg {
		return nil, 0, syscall.EISDIR
	}
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	var pages []byte
	if clean {
		// Hash a not-yet-verified blob here, not under the overlay lock; a
		// small one whose content goes to the page cache is read once for
		// both.
		var err error
		if fin != nil && !write && !stored && size > 0 && size <= storePagesMax && m.cfg.Passthrough && !m.cfg.PassthroughClean {
			pages, err = verifyReadPages(ov.objects, lowerID, size) // nil: the reads will go through READ
		} else {
			err = verifyBlob(ov.objects, lowerID)
		}
		if err != nil {
			return nil, 0, toErrno(err)
		}
	}
	trunc := flags&syscall.O_TRUNC != 0
	if (write || trunc) && m.cfg.Passthrough && m.cfg.PassthroughClean {
		// The blob is the kernel's backing file for open readers; no other
		// open of this inode can be served until they close. The kernel
		// sends RELEASE after close returns, so a reader that just closed
		// is waited for, briefly.
		if !ov.waitBlobReleased(in, releaseWait) {
			return nil, 0, syscall.ETXTBSY
		}
	}
	if write || trunc {
		if err := ov.copyUp(in, trunc); err != nil {
			return nil, 0, toErrno(err)
		}
	}
	ov.mu.Lock()
	defer ov.mu.Unlock()
	h := &handle{m: m, in: in}
	if in.upper {
		if in.upperFile == nil {
			f, err := osfile.Open(ov.upperPath(in.num), os.O_RDWR, 0)
			if err != nil {
				return nil, 0, toErrno(err)
			}
			in.upperFile = f
		}
		h.fd = int(in.upperFile.Fd())
		in.upperOpens++
		if write || trunc {
			h.writable = true
			in.wopens++
			cl := ov.pidCaller(pid)
			ov.noteWriter(in, &cl)
			ov.fsmOpened(in)
		}
	} else {
		if in.blobOpens > 0 && in.blobID != in.lower.ID {
			// A view switch changed the content under open readers; they
			// keep the old blob (registered with the kernel as backing
			// file), so this reader gets its own file, uncached.
			f, err := openBlob(ov.objects, in.lower.ID)
			if err != nil {
				return nil, 0, toErrno(err)
			}
			h.fd, h.own, h.blob = int(f.Fd()), f, true
			in.opens++
			ov.openHandles++
			if m.cfg.Passthrough && m.cfg.PassthroughClean && in.plainOpens == 0 {
				// The kernel keeps serving the old blob registered for the
				// readers still open (documented caveat).
				return in.passthrough(h), 0, 0
			}
			return in.plain(h), fuse.FOPEN_DIRECT_IO, 0
		}
		if in.blobOpens == 0 {
			in.blobID = in.lower.ID
		}
		h.fd = -1
		if in.blobFile == nil && m.cfg.Passthrough && m.cfg.PassthroughClean {
			// A passthrough handle needs its backing file now; a handle
			// served through the page cache opens it at its first read
			// (handle.lazyBlobFd): a reader whose pages the kernel has
			// cached (a second grep) costs the daemon no open and close.
			f, err := openBlob(ov.objects, in.lower.ID)
			if err != nil {
				return nil, 0, toErrno(err)
			}
			in.blobFile = f
		}
		if in.blobFile != nil {
			h.fd = int(in.blobFile.Fd())
		}
		h.blob = true
		in.blobOpens++
	}
	in.opens++
	ov.openHandles++
	// The kernel's rules (fs/fuse/iomode.c): while an inode has a
	// passthrough open, every open must be passthrough with the same
	// backing file, else open fails with EIO; while it has a cached open,
	// a passthrough open fails with EIO. go-fuse adds one more: a plain
	// handle must not be open when a passthrough one is given out
	// (inode.plainOpens).
	keep := uint32(fuse.FOPEN_KEEP_CACHE)
	if in.stalePages && in.blobOpens+in.upperOpens == 1 {
		// The first open after the readers of an old blob went: the
		// kernel drops the pages they may have cached (an open without
		// FOPEN_KEEP_CACHE, or a passthrough one, invalidates them).
		in.stalePages = false
		keep = 0
	}
	switch {
	case !m.cfg.Passthrough:
		return in.plain(h), keep, 0
	case h.blob && !m.cfg.PassthroughClean:
		// Clean readers use the page cache (kept across opens), so a
		// writer can still copy the file up and open it.
		if pages != nil && keep != 0 {
			m.storePages(fin, in, h, lowerID, pages)
		}
		return in.plain(h), keep, 0
	case in.plainOpens > 0:
		// Cached readers of the blob, or handles opened while they were,
		// are open (as far as the daemon has seen their RELEASE): this
		// open goes through the daemon, uncached.
		return in.plain(h), fuse.FOPEN_DIRECT_IO, 0
	}
	return in.passthrough(h), 0, 0
}

// plain records h as a handle served without passthrough; a blob handle
// is redirected to the upper file if a copy-up comes while it is open.
// Caller holds mu.
func (in *inode) plain(h *handle) fs.FileHandle {
	in.plainOpens++
	if h.blob {
		if in.readers == nil {
			in.readers = map[*handle]struct{}{}
		}
		in.readers[h] = struct{}{}
	}
	return h
}

// passthrough returns h for the kernel to serve by passthrough. Caller
// holds mu.
func (in *inode) passthrough(h *handle) fs.FileHandle {
	h.pt = true
	return &ptHandle{h}
}

// releaseWait bounds how long a writer waits for readers' RELEASE.
const releaseWait = 250 * time.Millisecond

// waitBlobReleased waits until in has no open blob handles (or it has an
// upper file), at most d.
func (o *overlay) waitBlobReleased(in *inode, d time.Duration) bool {
	deadline := time.Now().Add(d)
	timer := time.AfterFunc(d, func() {
		o.mu.Lock()
		o.released.Broadcast()
		o.mu.Unlock()
	})
	defer timer.Stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for !in.upper && in.blobOpens > 0 {
		if !time.Now().Before(deadline) {
			return false
		}
		o.released.Wait()
	}
	return true
}

// storePagesMax bounds the files whose content an open pushes into the
// kernel's page cache (storePages).
const storePagesMax = 64 << 10

// readPages reads a small blob whole for storePages; nil on any error
// (the file's reads then go through READ, which reports it).
func readPages(objects Objects, id store.ID, size int64) []byte {
	f, err := openBlob(objects, id)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); err != nil || int64(n) != size {
		return nil
	}
	return b
}

// storePages hands a small clean file's content to the kernel's page
// cache (FUSE_NOTIFY_STORE) before its first cached open returns, so that
// no READ follows: one round trip fewer per file in a first grep, and no
// GETATTR in the second (the kernel drops the cached atime when a READ
// completes, not when pages are stored). The caller holds ov.mu, so a view
// switch cannot change the content in between and its invalidation, sent
// later, comes after the store. It is sent only when this is the inode's
// only open handle: no reader can then hold a page of the inode locked
// while waiting for a READ that this daemon would have to serve. A store
// the kernel refuses (the inode is gone from its cache) costs nothing.
func (m *Mount) storePages(fin *fs.Inode, in *inode, h *handle, id store.ID, pages []byte) {
	if in.opens != 1 || in.lower.ID != id || in.blobID != id || in.pagesID == id || h.own != nil {
		return
	}
	if fin.WriteCache(0, pages) == 0 {
		in.pagesID = id
		m.storedPages.Add(1)
	}
}
