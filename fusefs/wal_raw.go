package fusefs

import "github.com/hanwen/go-fuse/v2/fuse"

// The requests that can change the overlay table write their frame of the
// write-ahead log (wal.go) before the reply goes to the kernel: what a
// tool saw done survives a daemon killed at any later moment. Writes of
// file data need none (the upper file holds them), and neither do reads.

// marks reads the overlay log's mark count before a request runs.
func (d *dirsFS) marks() uint64 {
	if d.marked == nil {
		return 0
	}
	return d.marked()
}

// logged flushes the log after a request that began at mark count before.
func (d *dirsFS) logged(before uint64, st fuse.Status) fuse.Status {
	if d.flush != nil {
		d.flush(before)
	}
	return st
}

func (d *dirsFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.SetAttr(cancel, in, out))
}

func (d *dirsFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.Mknod(cancel, in, name, out))
}

func (d *dirsFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.Mkdir(cancel, in, name, out))
}

func (d *dirsFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.Unlink(cancel, h, name))
}

func (d *dirsFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.Rmdir(cancel, h, name))
}

func (d *dirsFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.Rename(cancel, in, oldName, newName))
}

func (d *dirsFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.Link(cancel, in, name, out))
}

func (d *dirsFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.Symlink(cancel, h, target, name, out))
}

func (d *dirsFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.SetXAttr(cancel, in, attr, data))
}

func (d *dirsFS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.RemoveXAttr(cancel, h, attr))
}

func (d *dirsFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.Create(cancel, in, name, out))
}

// Open copies a file up for writing (or truncates it).
func (d *dirsFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	b := d.marks()
	return d.logged(b, d.RawFileSystem.Open(cancel, in, out))
}

// Release can drop the upper file of an unlinked inode.
func (d *dirsFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	b := d.marks()
	d.RawFileSystem.Release(cancel, in)
	d.logged(b, fuse.OK)
}
