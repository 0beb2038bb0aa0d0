package store

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

// AdoptBlobFile adds the file at path to the batch by hard link instead of
// copying it: the file's inode becomes the blob (mode blobMode), durable
// and visible at Commit as any other blob of the batch. The caller
// promises that nothing writes the inode again, through any name, while a
// link of it may be in the store (a later write must go to a copy): the
// blob's ID is the hash of the linked file, taken here.
//
// adopted reports whether the store kept a link. It does not when the
// blob is already stored or pending (the file then stays the caller's
// alone, untouched), and it falls back to a copy (WriteBlobFile, adopted
// false) when path is on another file system or cannot be linked.
func (b *BlobBatch) AdoptBlobFile(path string) (id ID, size int64, adopted bool, err error) {
	s := b.s
	if s.readOnly {
		return ID{}, 0, false, fmt.Errorf("adopt blob: %w", ErrReadOnly)
	}
	dir, err := s.tmpShard()
	if err != nil {
		return ID{}, 0, false, fmt.Errorf("adopt blob: %w", err)
	}
	tmp := filepath.Join(dir, "adopt-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strconv.FormatUint(s.tmpNext.Add(1), 36))
	if err := os.Link(path, tmp); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) && (errno == syscall.EXDEV || errno == syscall.EPERM || errno == syscall.EMLINK) {
			id, n, err := b.WriteBlobFile(path)
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
	if !s.noSync {
		// Start writing the data back now, so the disk works while the
		// CPU hashes; Commit's fsync then waits only for what is left.
		_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
	id, n, err := hashOpenFile(f)
	f.Close()
	if err != nil {
		return ID{}, 0, false, fmt.Errorf("adopt blob %s: hash: %w", path, err)
	}
	if ok, _ := s.HasBlob(id); ok {
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

// storedAt is when a blob file became an object, as far as GC's grace for
// objects written during a sweep is concerned: its ctime, which a write,
// the chmod to blobMode and the link of an adopted file all set (an
// adopted file keeps the mtime the tool gave it, maybe long before).
func storedAt(fi os.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if c := time.Unix(0, st.Ctim.Nano()); c.After(fi.ModTime()) {
			return c
		}
	}
	return fi.ModTime()
}
