package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is every file, directory, symlink and special file of the floor:
// its attributes and, for a regular file, its content, all in memory.
// Directory entries are go-fuse's own children of the node's Inode, so
// LOOKUP, READDIR and READDIRPLUS are answered by the bridge from them
// with no code here.
type node struct {
	gofs.Inode

	mu     sync.Mutex // protects the fields below
	mode   uint32     // type and permission bits
	uid    uint32
	gid    uint32
	rdev   uint32
	nlink  uint32
	atime  time.Time
	mtime  time.Time
	ctime  time.Time
	data   []byte // regular file content (while pt is nil)
	size   int64  // the content's length, as fill last saw it
	target []byte // symlink target
	// pt holds the content while the file is open by passthrough: an
	// in-memory file (memfd) the kernel reads and writes directly, as it
	// does acyclicfs's upper files. It stays after the last such open
	// (see retainMemfds) or goes back into data.
	pt *memFile
	// cachedOpens counts opens served through the daemon and the page
	// cache; passthrough starts only when there are none (the kernel
	// refuses to mix the two on an inode).
	cachedOpens int
	// stalePages: the content changed by passthrough since the page
	// cache last saw it; the next cached open drops the cached pages.
	stalePages bool
	// stored: the content is in the kernel's page cache by a store at
	// open (cleared when the content changes).
	stored bool
}

// memFile is a memfd holding a file's content during passthrough opens.
type memFile struct {
	fd    int
	opens int
	seen  time.Time // the memfd's mtime when the floor last looked
	// path is the file's name under -persist (a real file in place of
	// the memfd, deleted with it); "" for a memfd.
	path string
}

// look records the memfd's mtime as seen (after a change the floor made
// itself, whose times it sets).
func (f *memFile) look() {
	var st unix.Stat_t
	if unix.Fstat(f.fd, &st) == nil {
		f.seen = time.Unix(st.Mtim.Unix())
	}
}

// The operations the floor answers; everything else is ENOSYS, which
// the kernel remembers per connection where it can (FLUSH, FSYNC,
// ACCESS, xattrs) and then stops asking.
var (
	_ gofs.NodeGetattrer  = (*node)(nil)
	_ gofs.NodeSetattrer  = (*node)(nil)
	_ gofs.NodeOpener     = (*node)(nil)
	_ gofs.NodeReader     = (*node)(nil)
	_ gofs.NodeWriter     = (*node)(nil)
	_ gofs.NodeReadlinker = (*node)(nil)
	_ gofs.NodeCreater    = (*node)(nil)
	_ gofs.NodeMkdirer    = (*node)(nil)
	_ gofs.NodeMknoder    = (*node)(nil)
	_ gofs.NodeSymlinker  = (*node)(nil)
	_ gofs.NodeLinker     = (*node)(nil)
	_ gofs.NodeUnlinker   = (*node)(nil)
	_ gofs.NodeRmdirer    = (*node)(nil)
	_ gofs.NodeRenamer    = (*node)(nil)
	_ gofs.NodeStatfser   = (*node)(nil)
	_ gofs.NodeAllocater  = (*node)(nil)
)

func newNode(mode, uid, gid uint32) *node {
	now := time.Now()
	return &node{mode: mode, uid: uid, gid: gid, nlink: 1, atime: now, mtime: now, ctime: now}
}

func (n *node) fill(a *fuse.Attr) {
	if n.pt != nil {
		// The kernel writes to the memfd: its size is the file's, and a
		// change of its mtime since the floor last looked is a write.
		var st unix.Stat_t
		if unix.Fstat(n.pt.fd, &st) == nil {
			n.size = st.Size
			if m := time.Unix(st.Mtim.Unix()); !m.Equal(n.pt.seen) {
				n.mtime, n.ctime, n.pt.seen = m, m, m
			}
		}
	} else {
		n.size = int64(len(n.data))
	}
	a.Mode = n.mode
	a.Uid, a.Gid = n.uid, n.gid
	a.Rdev = n.rdev
	a.Nlink = n.nlink
	switch n.mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		a.Size = uint64(n.size)
	case syscall.S_IFLNK:
		a.Size = uint64(len(n.target))
	case syscall.S_IFDIR:
		a.Size = 4096
		a.Nlink = 2
	}
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 4096
	a.SetTimes(&n.atime, &n.mtime, &n.ctime)
}

// daemonGetattrs counts GETATTR requests (tests: replies' timeouts keep
// the kernel from asking again).
var daemonGetattrs atomic.Int64

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	daemonGetattrs.Add(1)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fill(&out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if m, ok := in.GetMode(); ok {
		n.mode = n.mode&syscall.S_IFMT | m&07777
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok {
		n.uid = uid
	}
	if gok {
		n.gid = gid
	}
	if (uok || gok) && in.Valid&fuse.FATTR_KILL_SUIDGID != 0 {
		// handle_killpriv_v2, as acyclicfs: a chown clears set-id bits.
		n.mode &^= syscall.S_ISUID | syscall.S_ISGID
	}
	if sz, ok := in.GetSize(); ok {
		if n.mode&syscall.S_IFMT != syscall.S_IFREG {
			return syscall.EINVAL
		}
		if n.pt != nil {
			if err := unix.Ftruncate(n.pt.fd, int64(sz)); err != nil {
				return gofs.ToErrno(err)
			}
		} else {
			n.truncate(int(sz))
		}
		n.mtime = now
	}
	if t, ok := in.GetATime(); ok {
		n.atime = t
	}
	if t, ok := in.GetMTime(); ok {
		n.mtime = t
	}
	n.ctime = now
	if n.pt != nil {
		n.pt.look() // a truncation here is no write to report
	}
	n.fill(&out.Attr)
	out.Ino = n.StableAttr().Ino
	out.SetTimeout(time.Hour) // the bridge leaves SETATTR's at 0
	return 0
}

// truncate sets the content's length; n.mu is held.
func (n *node) truncate(sz int) {
	n.stored = false
	if sz <= cap(n.data) {
		old := len(n.data)
		n.data = n.data[:sz]
		if sz > old {
			clear(n.data[old:])
		}
		return
	}
	d := make([]byte, sz)
	copy(d, n.data)
	n.data = d
}

// ptHandle is an open served by passthrough on the node's memfd.
type ptHandle struct{ n *node }

// PassthroughFd offers the memfd to the kernel (go-fuse registers it once
// per inode while opens use it).
func (h *ptHandle) PassthroughFd() (int, bool) {
	h.n.mu.Lock()
	defer h.n.mu.Unlock()
	return h.n.pt.fd, true
}

// cachedHandle is an open served through the daemon and the page cache.
type cachedHandle struct{ n *node }

var _ gofs.FilePassthroughFder = (*ptHandle)(nil)

// Open serves a writer, and every open while a writer's passthrough
// lasts, by passthrough on a memfd, as acyclicfs serves its upper files
// (Config.Passthrough); other opens read from memory through the daemon
// and keep the page cache across opens, as acyclicfs's clean files.
// daemonOpens counts OPEN requests (tests: -no-open stops them).
var daemonOpens atomic.Int64

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	daemonOpens.Add(1)
	if *noOpen {
		// The kernel remembers ENOSYS for the connection (no_open): it
		// sends no OPEN and no RELEASE again, created files' included,
		// and serves every open as FOPEN_KEEP_CACHE with handle 0.
		return nil, 0, syscall.ENOSYS
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if n.pt != nil || (write && *passthrough && n.cachedOpens == 0) {
		if errno := n.startPT(); errno != 0 {
			return nil, 0, errno
		}
		return &ptHandle{n}, 0, 0
	}
	n.cachedOpens++
	if n.stalePages {
		n.stalePages = false
		return &cachedHandle{n}, 0, 0
	}
	if !n.stored && n.cachedOpens == 1 && len(n.data) > 0 && len(n.data) <= storePagesMax {
		// As acyclicfs (Mount.storePages): a small file's content goes
		// into the page cache at its first open, so no READ follows and
		// nothing drops the cached atime. Only with no other open, so no
		// reader holds a page locked waiting for a READ that needs n.mu.
		if n.WriteCache(0, n.data) == 0 {
			n.stored = true
		}
	}
	return &cachedHandle{n}, fuse.FOPEN_KEEP_CACHE, 0
}

// storePagesMax is acyclicfs's bound on the files an open stores.
const storePagesMax = 64 << 10

// startPT counts a passthrough open, moving the content into a memfd if
// it is the first; n.mu is held.
func (n *node) startPT() syscall.Errno {
	if n.pt != nil {
		n.pt.opens++
		return 0
	}
	fd, path, err := newBackingFile()
	if err != nil {
		return gofs.ToErrno(err)
	}
	if len(n.data) > 0 {
		if _, err := unix.Pwrite(fd, n.data, 0); err != nil {
			unix.Close(fd)
			return gofs.ToErrno(err)
		}
	}
	n.pt = &memFile{fd: fd, opens: 1, path: path}
	n.pt.look()
	liveMemfds.Add(1)
	n.data = nil
	return 0
}

// Release ends an open; the last passthrough open takes the content back
// from the memfd into memory.
func (n *node) Release(ctx context.Context, fh gofs.FileHandle) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch fh.(type) {
	case *cachedHandle:
		n.cachedOpens--
	case *ptHandle:
		n.pt.opens--
		if n.pt.opens > 0 {
			return 0
		}
		if n.nlink == 0 {
			n.dropPT()
			return 0
		}
		if liveMemfds.Load() <= retainMemfds {
			return 0 // kept: later opens are passthrough too
		}
		var a fuse.Attr
		n.fill(&a) // size and times from the memfd
		data := make([]byte, n.size)
		if _, err := unix.Pread(n.pt.fd, data, 0); err != nil && n.size > 0 {
			return gofs.ToErrno(err)
		}
		n.dropPT()
		n.data, n.stalePages, n.stored = data, true, false
	}
	return 0
}

// liveMemfds counts the memfds held; up to retainMemfds of them stay with
// their files after the last open, as acyclicfs keeps a written file's
// upper file as its backing file (Config.RetainUpperBytes), so that reading
// what a tool wrote is passthrough there and here. The bound leaves room
// in the process's descriptor limit (20,000 on this machine).
var liveMemfds atomic.Int64

const retainMemfds = 8192

// persistDir is the -persist flag: where passthrough content lives in
// real files instead of memfds ("": memfds).
var persistDir string

// persistSeq names the files under persistDir.
var persistSeq atomic.Uint64

// newBackingFile makes the file passthrough content lives in: a memfd, or
// under -persist a new file on disk, as acyclicfs makes an upper file.
func newBackingFile() (int, string, error) {
	if persistDir == "" {
		fd, err := unix.MemfdCreate("floorfs", unix.MFD_CLOEXEC)
		return fd, "", err
	}
	path := filepath.Join(persistDir, strconv.FormatUint(persistSeq.Add(1), 10))
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	return fd, path, err
}

// dropPT closes the memfd (under -persist, deletes its file); n.mu is
// held.
func (n *node) dropPT() {
	if n.pt.path != "" {
		_ = unix.Unlink(n.pt.path)
	}
	unix.Close(n.pt.fd)
	n.pt = nil
	liveMemfds.Add(-1)
}

// Flush has nothing to do: ENOSYS makes the kernel stop sending it, as
// acyclicfs's handles do.
func (n *node) Flush(ctx context.Context, fh gofs.FileHandle) syscall.Errno { return syscall.ENOSYS }

// daemonReads counts reads that reached the daemon (tests).
var daemonReads atomic.Int64

func (n *node) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	daemonReads.Add(1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pt != nil {
		k, err := unix.Pread(n.pt.fd, dest, off)
		if err != nil {
			return nil, gofs.ToErrno(err)
		}
		return fuse.ReadResultData(dest[:k]), 0
	}
	if off >= int64(len(n.data)) {
		return fuse.ReadResultData(nil), 0
	}
	k := copy(dest, n.data[off:])
	return fuse.ReadResultData(dest[:k]), 0
}

// daemonWrites counts writes that reached the daemon (tests: passthrough
// keeps them in the kernel).
var daemonWrites atomic.Int64

func (n *node) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	daemonWrites.Add(1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pt != nil {
		k, err := unix.Pwrite(n.pt.fd, data, off)
		if err != nil {
			return 0, gofs.ToErrno(err)
		}
		return uint32(k), 0
	}
	end := int(off) + len(data)
	if end > len(n.data) {
		if end > cap(n.data) {
			d := make([]byte, end, max(end, 2*cap(n.data)))
			copy(d, n.data)
			n.data = d
		} else {
			old := len(n.data)
			n.data = n.data[:end]
			clear(n.data[old:off])
		}
	}
	copy(n.data[off:], data)
	n.stored = false
	n.mtime = time.Now()
	n.ctime = n.mtime
	return uint32(len(data)), 0
}

func (n *node) Allocate(ctx context.Context, fh gofs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	if mode != 0 {
		return syscall.EOPNOTSUPP
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pt != nil {
		return gofs.ToErrno(unix.Fallocate(n.pt.fd, 0, int64(off), int64(size)))
	}
	if end := int(off + size); end > len(n.data) {
		n.truncate(end)
	}
	return 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.target, 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize, out.Frsize = 4096, 4096
	out.Blocks, out.Bfree, out.Bavail = 1<<30, 1<<29, 1<<29
	out.Files, out.Ffree = 1<<30, 1<<29
	out.NameLen = 255
	return 0
}

// child makes a node for a new name under n and fills out for it.
func (n *node) child(ctx context.Context, mode uint32, out *fuse.EntryOut) (*node, *gofs.Inode) {
	uid, gid := uint32(0), uint32(0)
	if c, ok := ctx.(*fuse.Context); ok {
		uid, gid = c.Owner.Uid, c.Owner.Gid
	}
	c := newNode(mode, uid, gid)
	c.fill(&out.Attr)
	n.touch()
	return c, n.NewInode(ctx, c, gofs.StableAttr{Mode: mode & syscall.S_IFMT})
}

// touch updates a directory's times after a change of its entries.
func (n *node) touch() {
	n.mu.Lock()
	n.mtime = time.Now()
	n.ctime = n.mtime
	n.mu.Unlock()
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	c, in := n.child(ctx, syscall.S_IFREG|mode&07777, out)
	c.mu.Lock()
	defer c.mu.Unlock()
	if *noOpen && liveMemfds.Load() >= retainMemfds {
		// Without RELEASE (no_open) a memfd is never given back: past
		// the bound, new files are written through the daemon.
		return in, nil, fuse.FOPEN_KEEP_CACHE, 0
	}
	if !*passthrough {
		c.cachedOpens++
		return in, &cachedHandle{c}, fuse.FOPEN_KEEP_CACHE, 0
	}
	if errno := c.startPT(); errno != 0 {
		return nil, nil, 0, errno
	}
	return in, &ptHandle{c}, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	_, in := n.child(ctx, syscall.S_IFDIR|mode&07777, out)
	return in, 0
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	c, in := n.child(ctx, mode, out)
	c.rdev = dev
	out.Attr.Rdev = dev
	return in, 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	c, in := n.child(ctx, syscall.S_IFLNK|0o777, out)
	c.target = []byte(target)
	out.Attr.Size = uint64(len(target))
	return in, 0
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok || t.mode&syscall.S_IFMT == syscall.S_IFDIR {
		return nil, syscall.EPERM
	}
	t.mu.Lock()
	t.nlink++
	t.ctime = time.Now()
	t.fill(&out.Attr)
	t.mu.Unlock()
	n.touch()
	return t.EmbeddedInode(), 0
}

// dropLink counts a name of c gone.
func dropLink(c *gofs.Inode) {
	if cn, ok := c.Operations().(*node); ok {
		cn.mu.Lock()
		if cn.nlink > 0 {
			cn.nlink--
		}
		cn.ctime = time.Now()
		if cn.nlink == 0 && cn.pt != nil && cn.pt.opens == 0 {
			cn.dropPT() // the last name of a closed file: its content goes
		}
		cn.mu.Unlock()
	}
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	c := n.GetChild(name)
	if c == nil {
		return syscall.ENOENT
	}
	if c.IsDir() {
		return syscall.EISDIR
	}
	dropLink(c)
	n.touch()
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	c := n.GetChild(name)
	if c == nil {
		return syscall.ENOENT
	}
	if !c.IsDir() {
		return syscall.ENOTDIR
	}
	if len(c.Children()) > 0 {
		return syscall.ENOTEMPTY
	}
	n.touch()
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np := newParent.EmbeddedInode()
	src := n.GetChild(name)
	if src == nil {
		return syscall.ENOENT
	}
	dst := np.GetChild(newName)
	switch {
	case flags&gofs.RENAME_EXCHANGE != 0:
		if dst == nil {
			return syscall.ENOENT
		}
	case dst != nil && flags&renameNoReplace != 0:
		return syscall.EEXIST
	case dst != nil && dst != src:
		if src.IsDir() != dst.IsDir() {
			if dst.IsDir() {
				return syscall.EISDIR
			}
			return syscall.ENOTDIR
		}
		if dst.IsDir() && len(dst.Children()) > 0 {
			return syscall.ENOTEMPTY
		}
		if !dst.IsDir() {
			dropLink(dst)
		}
	}
	n.touch()
	if pn, ok := newParent.(*node); ok && pn != n {
		pn.touch()
	}
	return 0
}

// load copies the tree at dir into the root's children: the floor starts
// with what every other system starts with, in memory.
func load(ctx context.Context, root *node, dir string) error {
	dirs := map[string]*gofs.Inode{dir: root.EmbeddedInode()}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		c := newNode(st.Mode, st.Uid, st.Gid)
		c.mtime = info.ModTime()
		c.atime, c.ctime = c.mtime, c.mtime
		switch info.Mode().Type() {
		case 0:
			if c.data, err = os.ReadFile(path); err != nil {
				return err
			}
		case fs.ModeSymlink:
			t, err := os.Readlink(path)
			if err != nil {
				return err
			}
			c.target = []byte(t)
		case fs.ModeDir:
		default:
			c.rdev = uint32(st.Rdev)
		}
		parent := dirs[filepath.Dir(path)]
		if parent == nil {
			return fmt.Errorf("load %s: parent not loaded", path)
		}
		in := parent.NewPersistentInode(ctx, c, gofs.StableAttr{Mode: st.Mode & syscall.S_IFMT})
		parent.AddChild(d.Name(), in, false)
		if d.IsDir() {
			dirs[path] = in
		}
		return nil
	})
}

// renameNoReplace is RENAME_NOREPLACE (go-fuse names only RENAME_EXCHANGE).
const renameNoReplace = 1
