package osfile

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// DataExtents calls fn for each data region [off, end) of the first size
// bytes of f, in order, as SEEK_DATA and SEEK_HOLE report them: what lies
// between them reads as zeros. On a file system without hole reporting
// the whole file is one region. f's offset is left where it was (fn may
// use ReadAt, not Read).
func DataExtents(f *os.File, size int64, fn func(off, end int64) error) (err error) {
	fd := int(f.Fd())
	cur, err := unix.Seek(fd, 0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("seek in %s: %w", f.Name(), err)
	}
	defer func() {
		if _, serr := unix.Seek(fd, cur, io.SeekStart); serr != nil && err == nil {
			err = fmt.Errorf("seek in %s: %w", f.Name(), serr)
		}
	}()
	for off := int64(0); off < size; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO): // only a hole up to EOF
			return nil
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
			return fn(off, size)
		case err != nil:
			return fmt.Errorf("seek data in %s: %w", f.Name(), err)
		case d >= size:
			return nil
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole in %s: %w", f.Name(), err)
		}
		h = min(h, size)
		if err := fn(d, h); err != nil {
			return err
		}
		off = h
	}
	return nil
}

// HoleBytes returns how many of the first size bytes of f lie in holes.
func HoleBytes(f *os.File, size int64) (int64, error) {
	data := int64(0)
	err := DataExtents(f, size, func(off, end int64) error {
		data += end - off
		return nil
	})
	return size - data, err
}

// CopySparse copies the first size bytes of src into the empty file dst
// and keeps src's holes: only data regions are copied (copy_file_range,
// else read and write), and dst is then extended to size, so what src
// had as holes is a hole in dst too (where dst's file system has them).
func CopySparse(dst, src *os.File, size int64) error {
	last := int64(0) // end of the last data region
	err := DataExtents(src, size, func(off, end int64) error {
		last = end
		return copyRange(dst, src, off, end)
	})
	if err != nil || last == size {
		return err // (a dense file needs no extension)
	}
	if err := dst.Truncate(size); err != nil {
		return fmt.Errorf("copy %s: %w", src.Name(), err)
	}
	return nil
}

// copyRange copies [off, end) of src to the same offsets of dst.
func copyRange(dst, src *os.File, off, end int64) error {
	for off < end {
		in, out := off, off
		n, err := unix.CopyFileRange(int(src.Fd()), &in, int(dst.Fd()), &out, int(min(end-off, 1<<30)), 0)
		if err != nil {
			// Not supported between these files: copy through memory.
			_, err = io.Copy(io.NewOffsetWriter(dst, off), io.NewSectionReader(src, off, end-off))
			if err != nil {
				return fmt.Errorf("copy %s: %w", src.Name(), err)
			}
			return nil
		}
		if n == 0 { // src is shorter than it was
			return nil
		}
		off += int64(n)
	}
	return nil
}
