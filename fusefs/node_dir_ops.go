package fusefs

import (
	"context"
	"sort"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/store"
)

// Lookup finds name in the directory, loading the lower tree on first use.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.m.daemonLookups.Add(1)
	if len(name) > nameMax {
		return nil, syscall.ENAMETOOLONG
	}
	if e := n.m.admit(ctx); e != 0 {
		return nil, e
	}
	ov := n.m.ov
	var c *inode
	var a attrSnapshot
	err := ov.update(func() error {
		ch, err := ov.children(n.in)
		if err != nil {
			return err
		}
		if c = ch[name]; c == nil {
			return syscall.ENOENT
		}
		a = snapAttr(c)
		return nil
	})
	if err != nil {
		return nil, toErrno(err)
	}
	return n.child(ctx, name, c, &a, out), 0
}

// Readdir lists the directory in name order with the overlay's inode numbers.
func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return nil, e
	}
	ov := n.m.ov
	var list []fuse.DirEntry
	var lowers []store.ID
	var nums []uint64
	err := ov.update(func() error {
		ch, err := ov.children(n.in)
		if err != nil {
			return err
		}
		list = make([]fuse.DirEntry, 0, len(ch))
		lowers = make([]store.ID, 0, len(ch))
		nums = make([]uint64, 0, len(ch))
		for name, c := range ch {
			list = append(list, fuse.DirEntry{Name: name, Mode: c.mode & syscall.S_IFMT, Ino: c.ino})
			lowers = append(lowers, c.lowerIDOrZero())
			nums = append(nums, c.num)
		}
		return nil
	})
	if err != nil {
		return nil, toErrno(err)
	}
	for i := range list { // outside the lock: may ask the store
		list[i].Ino = n.m.reportedIno(list[i].Ino, nums[i], lowers[i])
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	// "." and "..", first, as a local directory lists them (ls -a, and
	// tools that count a directory's entries, expect them); the kernel
	// makes no dentries of them.
	self := n.StableAttr().Ino
	parent := self // the mount's root: its own, as a file system's root
	if _, p := n.Parent(); p != nil {
		parent = p.StableAttr().Ino
	}
	dots := []fuse.DirEntry{{Name: ".", Mode: syscall.S_IFDIR, Ino: self}, {Name: "..", Mode: syscall.S_IFDIR, Ino: parent}}
	return fs.NewListDirStream(append(dots, list...)), 0
}

// nameMax is the longest name a directory entry takes (statfs reports it
// as f_namemax), as on the local file systems tools come from: a longer
// one could be captured but never exported or materialized.
const nameMax = 255

// nameErrno checks a name a request would create: ENAMETOOLONG past
// nameMax, EINVAL for one no tree can hold.
func nameErrno(name string) syscall.Errno {
	if len(name) > nameMax {
		return syscall.ENAMETOOLONG
	}
	if !store.ValidName(name) {
		return syscall.EINVAL
	}
	return 0
}

// addNew creates a new inode of the given mode as n/name, running init on
// it under the lock before it becomes visible.
func (n *node) addNew(ctx context.Context, name string, mode uint32, out *fuse.EntryOut, init func(c *inode) error) (*inode, *fs.Inode, syscall.Errno) {
	if e := nameErrno(name); e != 0 {
		return nil, nil, e
	}
	ov := n.m.ov
	uid, gid := callerOwner(ctx, ov)
	var c *inode
	var a attrSnapshot
	err := ov.update(func() error {
		ch, err := ov.children(n.in)
		if err != nil {
			return err
		}
		if ch[name] != nil {
			return syscall.EEXIST
		}
		if n.in.mode&syscall.S_ISGID != 0 {
			gid = n.in.gid
			if mode&syscall.S_IFMT == syscall.S_IFDIR {
				mode |= syscall.S_ISGID
			}
		}
		c = ov.newInode(mode, uid, gid)
		if init != nil {
			if err := init(c); err != nil {
				return err
			}
		}
		ov.addLink(n.in, name, c)
		ov.touch(c)
		cl := ov.callerOf(ctx)
		ov.noteWriter(c, &cl)
		a = snapAttr(c)
		return nil
	})
	if err != nil {
		return nil, nil, toErrno(err)
	}
	return c, n.child(ctx, name, c, &a, out), 0
}

// Mkdir makes an empty directory.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return nil, e
	}
	if e := n.m.refuseChange(); e != 0 {
		return nil, e
	}
	_, ch, e := n.addNew(ctx, name, syscall.S_IFDIR|mode&0o7777, out, nil)
	return ch, e
}

// Symlink makes a symbolic link; its target lives in memory until capture.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return nil, e
	}
	if e := n.m.refuseChange(); e != 0 {
		return nil, e
	}
	_, ch, e := n.addNew(ctx, name, syscall.S_IFLNK|0o777, out, func(c *inode) error {
		c.target = []byte(target)
		return nil
	})
	return ch, e
}

// Create makes and opens a new regular file backed by an upper file.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return nil, nil, 0, e
	}
	if e := n.m.refuseChange(); e != 0 {
		return nil, nil, 0, e
	}
	c, ch, e := n.addNew(ctx, name, syscall.S_IFREG|mode&0o7777, out, n.m.ov.createUpper)
	if e != 0 {
		return nil, nil, 0, e
	}
	fh, fl, e := n.m.open(c, flags&^syscall.O_TRUNC, callerPID(ctx))
	if e != 0 {
		return nil, nil, 0, e
	}
	return ch, fh, fl, 0
}

// Tmpfile creates an unnamed upper file (O_TMPFILE); a later linkat may
// give it a name.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return nil, nil, 0, e
	}
	if e := n.m.refuseChange(); e != 0 {
		return nil, nil, 0, e
	}
	ov := n.m.ov
	uid, gid := callerOwner(ctx, ov)
	var c *inode
	var a attrSnapshot
	err := ov.update(func() error {
		if _, err := ov.children(n.in); err != nil {
			return err
		}
		c = ov.newInode(syscall.S_IFREG|mode&0o7777, uid, gid)
		if err := ov.createUpper(c); err != nil {
			return err
		}
		c.tmpfile = true
		ov.touch(c)
		cl := ov.callerOf(ctx)
		ov.noteWriter(c, &cl)
		a = snapAttr(c)
		return nil
	})
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	ch := n.child(ctx, "", c, &a, out)
	fh, fl, e := n.m.open(c, flags&^syscall.O_TRUNC, callerPID(ctx))
	if e != 0 {
		return nil, nil, 0, e
	}
	return ch, fh, fl, 0
}

// Mknod makes a regular file, FIFO, socket node or device node. Special
// files are names with attributes only: the kernel serves their opens (a
// pipe, the bound socket, the driver) and a capture stores their kind and
// device number. The kernel has already checked CAP_MKNOD for devices.
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return nil, e
	}
	if e := n.m.refuseChange(); e != 0 {
		return nil, e
	}
	if mode&syscall.S_IFMT == syscall.S_IFREG {
		_, ch, e := n.addNew(ctx, name, mode, out, func(c *inode) error {
			if err := n.m.ov.createUpper(c); err != nil {
				return err
			}
			c.upperFile.Close() // no open follows a mknod
			c.upperFile = nil
			return nil
		})
		return ch, e
	}
	k, ok := store.SpecialKindOfMode(mode)
	if !ok {
		return nil, syscall.EINVAL
	}
	if !k.IsDevice() {
		dev = 0
	}
	_, ch, e := n.addNew(ctx, name, mode&(syscall.S_IFMT|0o7777), out, func(c *inode) error {
		c.rdev = dev
		return nil
	})
	return ch, e
}

// Link adds a hard link. Within the mount both names are one inode; a
// capture writes two entries with the same content.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.m.admit(ctx); e != 0 {
		return nil, e
	}
	if e := n.m.refuseChange(); e != 0 {
		return nil, e
	}
	if e := nameErrno(name); e != 0 {
		return nil, e
	}
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	t := tn.in
	ov := n.m.ov
	var a attrSnapshot
	err := ov.update(func() error {
		ch, err := ov.children(n.in)
		if err != nil {
			return err
		}
		if ch[name] != nil {
			return syscall.EEXIST
		}
		if t.isDir() {
			return syscall.EPERM
		}
		if len(t.links) == 0 && !t.tmpfile {
			return syscall.ENOENT
		}
		t.tmpfile = false
		ov.addLink(n.in, name, t)
		t.ctime = time.Now().UnixNano()
		ov.touch(t)
		cl := ov.callerOf(ctx)
		ov.noteWriter(t, &cl)
		a = snapAttr(t)
		return nil
	})
	if err != nil {
		return nil, toErrno(err)
	}
	return n.child(ctx, name, t, &a, out), 0
}

// Unlink removes a non-directory name.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if e := n.m.admit(ctx); e != 0 {
		return e
	}
	if e := n.m.refuseChange(); e != 0 {
		return e
	}
	ov := n.m.ov
	return toErrno(ov.update(func() error {
		c, err := ov.childNamed(n.in, name)
		if err != nil {
			return err
		}
		if c.isDir() {
			return syscall.EISDIR
		}
		cl := ov.callerOf(ctx)
		ov.noteRemoved(n.in, name, c, &cl)
		ov.removeLink(n.in, name, c)
		ov.noteWriter(n.in, &cl)
		return nil
	}))
}

// Rmdir removes an empty directory.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if e := n.m.admit(ctx); e != 0 {
		return e
	}
	if e := n.m.refuseChange(); e != 0 {
		return e
	}
	ov := n.m.ov
	return toErrno(ov.update(func() error {
		c, err := ov.childNamed(n.in, name)
		if err != nil {
			return err
		}
		if !c.isDir() {
			return syscall.ENOTDIR
		}
		gc, err := ov.children(c)
		if err != nil {
			return err
		}
		if len(gc) > 0 {
			return syscall.ENOTEMPTY
		}
		cl := ov.callerOf(ctx)
		ov.noteRemoved(n.in, name, c, &cl)
		ov.removeLink(n.in, name, c)
		ov.noteWriter(n.in, &cl)
		return nil
	}))
}

// Rename moves a name in O(1): directories move as a whole, whatever
// their size. Supports RENAME_NOREPLACE and RENAME_EXCHANGE.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if e := n.m.admit(ctx); e != 0 {
		return e
	}
	if e := n.m.refuseChange(); e != 0 {
		return e
	}
	if e := nameErrno(newName); e != 0 {
		return e
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0 ||
		flags&unix.RENAME_NOREPLACE != 0 && flags&unix.RENAME_EXCHANGE != 0 {
		return syscall.EINVAL
	}
	ov := n.m.ov
	sd, dd := n.in, np.in
	return toErrno(ov.update(func() error {
		sc, err := ov.children(sd)
		if err != nil {
			return err
		}
		dc, err := ov.children(dd)
		if err != nil {
			return err
		}
		src := sc[name]
		if src == nil {
			return syscall.ENOENT
		}
		dst := dc[newName]
		if flags&unix.RENAME_EXCHANGE != 0 {
			if dst == nil {
				return syscall.ENOENT
			}
			if src.isDir() && isAncestor(src, dd) || dst.isDir() && isAncestor(dst, sd) {
				return syscall.EINVAL
			}
			ov.moveLink(sd, name, dd, newName, src)
			ov.moveLink(dd, newName, sd, name, dst)
			sc[name], dc[newName] = dst, src
			cl := ov.callerOf(ctx)
			ov.noteWriter(src, &cl)
			ov.noteWriter(dst, &cl)
			return nil
		}
		if dst != nil && flags&unix.RENAME_NOREPLACE != 0 {
			return syscall.EEXIST
		}
		if src == dst {
			return nil // two names of one inode: POSIX says do nothing
		}
		if src.isDir() && isAncestor(src, dd) {
			return syscall.EINVAL
		}
		if dst != nil {
			if src.isDir() {
				if !dst.isDir() {
					return syscall.ENOTDIR
				}
				gc, err := ov.children(dst)
				if err != nil {
					return err
				}
				if len(gc) > 0 {
					return syscall.ENOTEMPTY
				}
			} else if dst.isDir() {
				return syscall.EISDIR
			}
		}
		cl := ov.callerOf(ctx)
		ov.noteRemoved(sd, name, src, &cl)
		if dst != nil {
			ov.removeLink(dd, newName, dst)
		}
		delete(sc, name)
		ov.moveLink(sd, name, dd, newName, src)
		dc[newName] = src
		ov.noteWriter(src, &cl)
		ov.noteWriter(sd, &cl) // the old name went away
		return nil
	}))
}

// moveLink changes one link of c from sd/name to dd/newName without
// touching the children maps. Caller holds mu.
func (o *overlay) moveLink(sd *inode, name string, dd *inode, newName string, c *inode) {
	for i, l := range c.links {
		if l.dir == sd && l.name == name {
			c.links[i] = link{dir: dd, name: newName}
			o.nameInode(dd, newName, c)
			break
		}
	}
	if c.isDir() && sd != dd {
		sd.nlinkExtra--
		dd.nlinkExtra++
	}
	c.ctime = time.Now().UnixNano()
	o.dirChanged(sd)
	if dd != sd {
		o.dirChanged(dd)
	}
	c.linkSeq = o.seq
	if len(c.links) > 1 {
		// The directories of its other names are recorded too, so that a
		// replay finds them naming this inode (links.go).
		o.propagate(c, o.seq)
	} else if c.isDir() && len(o.multi) > 0 {
		o.markLinksBelow(c)
	}
	if c.isDir() {
		o.fsmMovedDir()
	} else {
		o.fsmRemoved(sd, name, c)
	}
	o.walName(sd, name)
	o.walName(dd, newName)
	o.walMark(c, walFull)
}

// childNamed returns d's child called name, or ENOENT. Caller holds mu.
func (o *overlay) childNamed(d *inode, name string) (*inode, error) {
	ch, err := o.children(d)
	if err != nil {
		return nil, err
	}
	if c := ch[name]; c != nil {
		return c, nil
	}
	return nil, syscall.ENOENT
}
