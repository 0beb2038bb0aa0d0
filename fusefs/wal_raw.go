package fusefs

import "github.com/hanwen/go-fuse/v2/fuse"

// The requests that can change the overlay table write their frame of the
// write-ahead log (wal.go) before the reply goes to the kernel: what a
// tool saw done survives a daemon killed at any later moment. Writes of
// file data need none (the upper file holds them), and neither do reads.

func (d *dirsFS) logged(st fuse.Status) fuse.Status {
	if d.flush != nil {
		d.flush()
	}
	return st
}

func (d *dirsFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return d.logged(d.RawFileSystem.SetAttr(cancel, in, out))
}

func (d *dirsFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return d.logged(d.RawFileSystem.Mknod(cancel, in, name, out))
}

func (d *dirsFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return d.logged(d.RawFileSystem.Mkdir(cancel, in, name, out))
}

func (d *dirsFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return d.logged(d.RawFileSystem.Unlink(cancel, h, name))
}

func (d *dirsFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return d.logged(d.RawFileSystem.Rmdir(cancel, h, name))
}

func (d *dirsFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	return d.logged(d.RawFileSystem.Rename(cancel, in, oldName, newName))
}

func (d *dirsFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return d.logged(d.RawFileSystem.Link(cancel, in, name, out))
}

func (d *dirsFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return d.logged(d.RawFileSystem.Symlink(cancel, h, target, name, out))
}

func (d *dirsFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	return d.logged(d.RawFileSystem.SetXAttr(cancel, in, attr, data))
}

func (d *dirsFS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	return d.logged(d.RawFileSystem.RemoveXAttr(cancel, h, attr))
}

func (d *dirsFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return d.logged(d.RawFileSystem.Create(cancel, in, name, out))
}

// Open copies a file up for writing (or truncates it).
func (d *dirsFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return d.logged(d.RawFileSystem.Open(cancel, in, out))
}

// Release can drop the upper file of an unlinked inode.
func (d *dirsFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	d.RawFileSystem.Release(cancel, in)
	d.flush()
}
