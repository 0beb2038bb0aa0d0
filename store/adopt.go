package store

import "fmt"

// AdoptBlobFile adds the file at path to the batch by hard link instead of
// copying it (blobs.DirBatch.Adopt): the file's inode becomes the blob,
// durable and visible at Commit as any other blob of the batch. The caller
// promises that nothing writes the inode again, through any name, while a
// link of it may be in the store (a later write must go to a copy).
//
// adopted reports whether the store kept a link. It does not when the
// blob is already stored or pending (the file then stays the caller's
// alone, untouched), and it falls back to a copy (adopted false) when path
// is on another file system or cannot be linked.
func (b *BlobBatch) AdoptBlobFile(path string) (id ID, size int64, adopted bool, err error) {
	if b.s.readOnly {
		return ID{}, 0, false, fmt.Errorf("adopt blob: %w", ErrReadOnly)
	}
	bid, n, adopted, err := b.b.Adopt(path)
	return ID(bid), n, adopted, err
}
