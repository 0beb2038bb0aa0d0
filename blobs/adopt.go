package blobs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// Adopt adds the file at path to the batch by hard link instead of copying
// it: the file's inode becomes the object (mode 0400), durable and visible
// at Commit as any other object of the batch. The caller promises that
// nothing writes the inode again, through any name, while a link of it may
// be in the plane (a later write must go to a copy): the object's ID is the
// hash of the linked file, taken here.
//
// adopted reports whether the plane kept a link. It does not when the
// object is already stored or pending (the file then stays the caller's
// alone, untouched), and it falls back to a copy (PutFile, adopted false)
// when path is on another file system or cannot be linked.
func (b *DirBatch) Adopt(path string) (id ID, size int64, adopted bool, err error) {
	d := b.d
	if d.opt.ReadOnly {
		return ID{}, 0, false, fmt.Errorf("adopt blob: %w", ErrReadOnly)
	}
	dir, err := d.tmpShard()
	if err != nil {
		return ID{}, 0, false, fmt.Errorf("adopt blob: %w", err)
	}
	tmp := filepath.Join(dir, "adopt-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strconv.FormatUint(d.tmpNext.Add(1), 36))
	if err := os.Link(path, tmp); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) && (errno == syscall.EXDEV || errno == syscall.EPERM || errno == syscall.EMLINK) {
			id, n, err := b.PutFile(path)
			return id, n, false, err
		}
		return ID{}, 0, false, fmt.Errorf("adopt blob %s: %w", path, err)
	}
	keep := false
	defer func() {
		if !keep {
			os.Remove(tmp)
		}
	}()
	f, err := osfile.Open(tmp, os.O_RDONLY, 0)
	if err != nil {
		return ID{}, 0, false, fmt.Errorf("adopt blob %s: %w", path, err)
	}
	if !d.opt.NoSync {
		// Start writing the data back now, so the disk works while the
		// CPU hashes; Commit's fsync then waits only for what is left.
		_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
	id, n, err := hashOpenFile(f)
	f.Close()
	if err != nil {
		return ID{}, 0, false, fmt.Errorf("adopt blob %s: hash: %w", path, err)
	}
	if _, err := os.Lstat(d.Path(id)); err == nil {
		return id, n, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.pending[id]; dup {
		return id, n, false, nil
	}
	if err := os.Chmod(tmp, blobMode); err != nil {
		return ID{}, 0, false, fmt.Errorf("adopt blob %s: %w", path, err)
	}
	b.pending[id] = tmp
	keep = true
	return id, n, true, nil
}
