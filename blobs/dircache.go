package blobs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Install stores what r yields as object id, verified against id (in
// either encoding) before it is published: the cache fill of a tiered
// plane (Tier), whose content comes from a remote that is not trusted.
// Content that does not hash to id is an error wrapping ErrCorrupt and
// leaves nothing behind. An object already present is kept. A cache fill
// changes no content, so a read-only plane installs too (its temp
// directory must exist).
func (d *Dir) Install(id ID, r io.Reader) (int64, error) {
	tmp, _, n, err := d.writeTempAlways(func(f *os.File) (ID, int64, error) {
		n, err := writeHoley(f, r)
		if err != nil {
			return ID{}, n, fmt.Errorf("fetch blob %s: %w", id.Short(), err)
		}
		if err := verifyObject(f, id); err != nil {
			return ID{}, n, err
		}
		return id, n, nil
	}, true)
	if err != nil {
		return 0, err
	}
	if err := d.publishTemp(tmp, id, true); err != nil {
		return 0, err
	}
	d.verified.Store(id, struct{}{})
	return n, nil
}

// Touch marks object id as stored now (its mtime, and so its ctime): a
// tiered plane refreshes an object it finds already in the remote, so
// that a GC over the remote counts its grace from this new reference.
// An absent object is an error wrapping ErrNotFound.
func (d *Dir) Touch(id ID) error {
	if d.opt.ReadOnly {
		return fmt.Errorf("touch blob %s: %w", id.Short(), ErrReadOnly)
	}
	now := time.Now()
	if err := os.Chtimes(d.Path(id), now, now); err != nil {
		return openError(id, err)
	}
	return nil
}

// Toucher is a Store that can refresh an object's stored time (Info's
// ModTime) without rewriting it. Dir and s3blobs' Store are Touchers.
type Toucher interface {
	Touch(id ID) error
}

var _ Toucher = (*Dir)(nil)

// OpenShared opens the plane kept in a shared directory root (NFS and the
// like) as a remote for a Tier: objects in root/objects laid out as a
// store's, temp files in root/tmp (on the same file system, so that
// publishing is a rename). Both are made (0700) if missing. Several nodes
// may write it at once: object files appear whole by rename, and a put
// of an object that exists keeps the existing one. Temp files of a
// writer that died stay in root/tmp.
func OpenShared(root string, opt Options) (*Dir, error) {
	objects, tmp := filepath.Join(root, "objects"), filepath.Join(root, "tmp")
	if !opt.ReadOnly {
		for _, d := range []string{root, objects, tmp} {
			if err := os.MkdirAll(d, dirMode); err != nil {
				return nil, fmt.Errorf("open shared blob directory %s: %w", root, err)
			}
		}
	}
	if fi, err := os.Stat(objects); err != nil {
		return nil, fmt.Errorf("open shared blob directory %s: %w", root, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("open shared blob directory %s: %s is not a directory", root, objects)
	}
	opt.Tmp = tmp
	return OpenDir(objects, opt), nil
}

// writeHoley writes what r yields into the empty file f, leaving its
// all-zero aligned blocks as holes (a remote sends a sparse object's
// holes as zeros), and returns the length.
func writeHoley(f *os.File, r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var off int64
	for {
		m, err := io.ReadFull(r, buf)
		for i := 0; i < m; i += sparseBlock {
			blk := buf[i:min(i+sparseBlock, m)]
			if isZero(blk) {
				continue
			}
			if _, werr := f.WriteAt(blk, off+int64(i)); werr != nil {
				return off, werr
			}
		}
		off += int64(m)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return off, f.Truncate(off)
		case err != nil:
			return off, err
		}
	}
}
