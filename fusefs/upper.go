package fusefs

import (
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// copyUp gives a regular file an upper file holding its current content
// (truncated to zero when trunc is set, which avoids copying data that is
// about to be discarded). The copy runs without the lock; a racing copy-up
// of the same inode loses and discards its temp file.
func (o *overlay) copyUp(in *inode, trunc bool) error {
	o.mu.Lock()
	if in.upper {
		if in.retained {
			o.touch(in) // about to be written: dirty again
		}
		o.mu.Unlock()
		if trunc {
			return os.Truncate(o.upperPath(in.num), 0)
		}
		return nil
	}
	if !in.isReg() {
		o.mu.Unlock()
		return syscall.EINVAL
	}
	blob := in.lower.ID
	hasLower := in.hasLower
	o.mu.Unlock()

	tmp, err := osfile.CreateTemp(o.upperDir(), "copyup-")
	if err != nil {
		return fmt.Errorf("copy-up: %w", err)
	}
	kept := false // tmp became the inode's upperFile
	defer func() {
		if !kept {
			tmp.Close()
		}
		os.Remove(tmp.Name())
	}()
	if hasLower && !trunc && !blob.IsZero() {
		src, err := openBlob(o.objects, blob)
		if err != nil {
			return fmt.Errorf("copy-up: open blob: %w", err)
		}
		err = cloneOrCopy(tmp, src)
		src.Close()
		if err != nil {
			return fmt.Errorf("copy-up: %w", err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if in.upper {
		if trunc {
			return os.Truncate(o.upperPath(in.num), 0)
		}
		return nil
	}
	if err := unix.Rename(tmp.Name(), o.upperPath(in.num)); err != nil { // not os.Rename: no lstat under mu
		return fmt.Errorf("copy-up: rename %s: %w", tmp.Name(), err)
	}
	// Keep the overlay's mtime: a copy-up is not a modification by itself.
	mt := time.Unix(0, in.mtime)
	_ = os.Chtimes(o.upperPath(in.num), mt, mt)
	in.upper = true
	o.touch(in)
	if len(in.readers) > 0 {
		if in.upperFile == nil {
			// tmp is the upper file now (renamed): the readers' backing file.
			in.upperFile, kept = tmp, true
		}
		o.redirect(in)
	}
	return nil
}

// redirect moves in's open blob handles to its upper file, which a
// copy-up just made: from now on they read what is written through the
// mount, as every descriptor of a native file does. Each takes a
// reference on the upper file (so a view switch keeps it while they are
// open) and keeps its blob one until Release, for reads in flight. Pages
// the kernel cached from the blob stay valid until a write changes them:
// writes go through the page cache (no passthrough) or are direct writes
// (passthrough mounts, see Mount.open), which drop the pages they cover.
// Caller holds mu; in.upperFile is open.
func (o *overlay) redirect(in *inode) {
	fd := int64(in.upperFile.Fd()) + 1
	for h := range in.readers {
		h.upRef = true
		in.upperOpens++
		h.redir.Store(fd)
	}
	in.readers = nil
}

// cloneOrCopy copies src into dst: FICLONE (reflink) first, else the
// data regions by copy_file_range (or a plain copy), keeping src's holes:
// a copy-up of a sparse file stays sparse.
func cloneOrCopy(dst, src *os.File) error {
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err == nil {
		return nil
	}
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	return osfile.CopySparse(dst, src, fi.Size())
}

// createUpper makes an empty upper file for a new inode and keeps it open
// as the inode's backing file, for the open that follows a create. It
// takes a file from the pool when there is one — in, not yet linked
// anywhere, then takes the pool file's inode number (its own stays
// unused) — else creates one. Caller holds mu.
func (o *overlay) createUpper(in *inode) error {
	num, f := o.pool.take()
	if f != nil {
		// A pool file has the times of its creation: give it the inode's.
		ts := [2]unix.Timespec{unix.NsecToTimespec(in.atime), unix.NsecToTimespec(in.mtime)}
		if err := futimens(int(f.Fd()), &ts); err != nil {
			f.Close()
			os.Remove(o.upperPath(num))
			f = nil
		} else {
			in.num = num
		}
	}
	if f == nil {
		var err error
		f, err = osfile.Open(o.upperPath(in.num), os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
		if err != nil {
			return fmt.Errorf("create upper file: %w", err)
		}
	}
	in.upperFile = f
	in.upper = true
	return nil
}

// futimens sets an open file's times (utimensat with no path, as the C
// library's futimens: no path lookup, unlike UtimesNanoAt).
func futimens(fd int, ts *[2]unix.Timespec) error {
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
