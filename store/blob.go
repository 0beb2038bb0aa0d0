package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/acyclicfs/acyclicfs/blobs"
)

// Blobs live in the blob plane (package blobs): the store's objects
// directory is a blobs.Dir, and these methods are the plane seen through
// base references (baseref_blobs.go): an ID that is no object may be a
// file or symlink of an in-place workspace's base directory.

// bid is id as the blob plane names it (the same 32 bytes).
func bid(id ID) blobs.ID { return blobs.ID(id) }

// BlobPath returns the path of the object file for id (which may not exist).
// The mount opens it read-only; nobody may write to it.
//
// With a Remote the object is fetched into the cache first if it is not
// there (a failed fetch leaves the path absent: opening it fails).
func (s *Store) BlobPath(id ID) string {
	p := s.objs.Path(bid(id))
	if s.tier != nil {
		if _, err := os.Lstat(p); err != nil {
			release, _ := s.tier.Fetch(bid(id))
			release()
		}
		s.tier.Touch(bid(id))
	}
	return p
}

// upload puts a just-written object into the remote (no-op without one).
func (s *Store) upload(id blobs.ID, err error) error {
	if err != nil || s.tier == nil {
		return err
	}
	return s.tier.Upload(id)
}

// HasBlob reports whether the object file for id exists. It does not verify
// the content. For a file or symlink base ref it reports whether the
// content is readable: resolved to a stored blob, or the path in the base
// directory still has the ref's fingerprint.
func (s *Store) HasBlob(id ID) (bool, error) {
	_, err := viaRefs(s, id, (*blobs.Dir).Stat, (*unresolvedRef).stat)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrBaseChanged):
		return false, nil
	}
	return false, err
}

// BlobSize returns the length of blob id from its file's metadata (for a
// base ref: its resolution's, or its path's after checking the
// fingerprint).
func (s *Store) BlobSize(id ID) (int64, error) {
	in, err := viaRefs(s, id, (*blobs.Dir).Stat, (*unresolvedRef).stat)
	return in.Size, err
}

// WriteBlob streams r into the store and returns the blob's ID and length.
// Memory use is constant in the content size. The object is durable when
// WriteBlob returns (with a Remote: in the remote too, or the error wraps
// blobs.ErrUnavailable); if it already existed nothing is written.
func (s *Store) WriteBlob(r io.Reader) (ID, int64, error) {
	defer s.HoldGC()()
	id, n, err := s.objs.Put(r)
	return ID(id), n, s.upload(id, err)
}

// WriteBlobBytes stores p.
func (s *Store) WriteBlobBytes(p []byte) (ID, error) {
	defer s.HoldGC()()
	id, err := s.objs.PutBytes(p)
	return ID(id), s.upload(id, err)
}

// WriteBlobFile stores the content of the regular file at path. On
// filesystems that support it the data is cloned (FICLONE) rather than
// copied; the clone is still hashed, so the ID always matches what was
// stored even if the source changes meanwhile. A file with holes (at least
// 1 MiB of them) is stored as a sparse blob: only its data is read,
// hashed and written.
func (s *Store) WriteBlobFile(path string) (ID, int64, error) {
	defer s.HoldGC()()
	id, n, err := s.objs.PutFile(path)
	return ID(id), n, s.upload(id, err)
}

// OpenBlob opens blob id for streaming. The reader verifies the content
// against id as it goes: the Read that reaches the end returns an error
// wrapping ErrCorrupt instead of io.EOF if the content does not match.
//
// For a base ref the resolution is opened, or else the file in the base
// directory after checking its fingerprint; the Read that reaches its end
// checks the fingerprint again (ErrBaseChanged if a write intervened).
func (s *Store) OpenBlob(id ID) (io.ReadCloser, error) {
	if s.tier != nil {
		return viaRefs(s, id, func(d *blobs.Dir, id blobs.ID) (io.ReadCloser, error) {
			rc, err := d.Open(id)
			if err != nil {
				return nil, err
			}
			return pinned{rc, s.tier.Pin(id)}, nil
		}, (*unresolvedRef).open)
	}
	return viaRefs(s, id, (*blobs.Dir).Open, (*unresolvedRef).open)
}

// pinned is an object reader that keeps its object in the cache until it
// is closed.
type pinned struct {
	io.ReadCloser
	release func()
}

func (p pinned) Close() error {
	defer p.release()
	return p.ReadCloser.Close()
}

// ReadBlob returns the whole content of blob id, verified. For a base ref
// it returns the resolution's content, or else the file's content (a
// symlink's target) in the base directory, checked against the ref's
// fingerprint before and after reading: ErrBaseChanged if it differs.
func (s *Store) ReadBlob(id ID) ([]byte, error) {
	return viaRefs(s, id, (*blobs.Dir).Read, (*unresolvedRef).read)
}

// BlobBatch writes many blobs and syncs them together at Commit instead of
// one by one. Blobs stay in STORE/tmp until Commit, so an object file in
// objects/ is always complete and durable; callers must publish metadata
// that references batch blobs only after Commit returns. Its methods are
// safe for concurrent use.
//
// With a Remote, Commit also uploads every object the batch was given
// (also those already stored locally) and returns only once all are in
// the remote: an error wrapping blobs.ErrUnavailable otherwise, and the
// objects stay to upload at the next Commit.
type BlobBatch struct {
	s *Store
	b *blobs.DirBatch

	// mu protects ids: with a Remote, the objects to upload at Commit.
	mu  sync.Mutex
	ids map[blobs.ID]struct{}
}

// added records id for upload at Commit (with a Remote).
func (b *BlobBatch) added(id blobs.ID, err error) {
	if err != nil || b.s.tier == nil {
		return
	}
	b.mu.Lock()
	if b.ids == nil {
		b.ids = map[blobs.ID]struct{}{}
	}
	b.ids[id] = struct{}{}
	b.mu.Unlock()
}

// NewBlobBatch starts a batch.
func (s *Store) NewBlobBatch() *BlobBatch {
	return &BlobBatch{s: s, b: s.objs.NewDirBatch()}
}

// WriteBlob streams r into the batch.
func (b *BlobBatch) WriteBlob(r io.Reader) (ID, int64, error) {
	id, n, err := b.b.Put(r)
	b.added(id, err)
	return ID(id), n, err
}

// WriteBlobFile adds the content of the file at path (cloned if possible).
func (b *BlobBatch) WriteBlobFile(path string) (ID, int64, error) {
	id, n, err := b.b.PutFile(path)
	b.added(id, err)
	return ID(id), n, err
}

// WriteBlobBytes adds p.
func (b *BlobBatch) WriteBlobBytes(p []byte) (ID, error) {
	id, err := b.b.PutBytes(p)
	b.added(id, err)
	return ID(id), err
}

// Commit makes every blob of the batch durable and visible: the data is
// synced (each file, or one syncfs for big batches), then renamed into
// objects/, then the directory entries are synced. The batch can be used
// again afterwards. On error the blobs not yet published stay pending;
// call Commit again or Abort.
func (b *BlobBatch) Commit() error {
	defer b.s.HoldGC()()
	if err := b.b.Commit(); err != nil {
		return err
	}
	if b.s.tier == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ids) == 0 {
		return nil
	}
	ids := make([]blobs.ID, 0, len(b.ids))
	for id := range b.ids {
		ids = append(ids, id)
	}
	if err := b.s.tier.Upload(ids...); err != nil {
		return fmt.Errorf("commit blob batch: %w", err)
	}
	clear(b.ids)
	return nil
}

// Abort drops every blob not yet committed.
func (b *BlobBatch) Abort() {
	b.b.Abort()
	b.mu.Lock()
	clear(b.ids)
	b.mu.Unlock()
}

// OpenBlobFile opens blob id's file for reading by offset (the mount serves
// and passes through such files). The first open of a blob in this process
// reads it whole (a sparse blob: its data) and checks its address; later
// opens trust that check, as object files are immutable (0400, replaced
// only by rename). A blob that does not match is an error wrapping
// ErrCorrupt, never served.
//
// For a base ref it opens the resolution, or else the file in the base
// directory after checking its fingerprint (the mount serves it with
// passthrough and copies it up before writing); a symlink ref gives an
// in-memory file holding the target.
func (s *Store) OpenBlobFile(id ID) (*os.File, error) {
	return viaRefs(s, id, (*blobs.Dir).OpenFile, (*unresolvedRef).openFile)
}

// VerifyBlob checks blob id's address once per process (see OpenBlobFile),
// so that callers can pay for the check before taking their own locks.
// For an unresolved base ref it only checks the fingerprint (nothing is
// cached: the base directory may change).
func (s *Store) VerifyBlob(id ID) error {
	_, err := viaRefs(s, id, func(d *blobs.Dir, id blobs.ID) (struct{}, error) { return struct{}{}, d.Verify(id) },
		func(u *unresolvedRef) (struct{}, error) { _, err := u.stat(); return struct{}{}, err })
	return err
}

// ReadBlobVerified returns blob id's content when it is size bytes long
// (small blobs: it is held in memory), verified once per process as
// OpenBlobFile verifies it but reading the file once (blobs.Dir.ReadVerified).
// nil and no error: the content could not be read whole here (another
// length, an unresolved base ref whose file cannot be opened); the caller
// reads it otherwise. For an unresolved base ref the fingerprint is
// checked as VerifyBlob checks it.
func (s *Store) ReadBlobVerified(id ID, size int64) ([]byte, error) {
	return viaRefs(s, id, func(d *blobs.Dir, id blobs.ID) ([]byte, error) { return d.ReadVerified(id, size) },
		func(u *unresolvedRef) ([]byte, error) {
			if _, err := u.stat(); err != nil {
				return nil, err
			}
			f, err := u.openFile()
			if err != nil {
				return nil, nil
			}
			defer f.Close()
			b := make([]byte, size)
			if n, err := f.ReadAt(b, 0); err != nil || int64(n) != size {
				return nil, nil
			}
			return b, nil
		})
}

// CopyBlob writes blob id's content into dst (empty, opened for writing)
// and keeps its holes: a sparse blob's holes are holes in dst. The
// content is verified first (once per process, as OpenBlobFile); the
// content of an unresolved base ref is streamed (OpenBlob rechecks its
// fingerprint).
func (s *Store) CopyBlob(id ID, dst *os.File) (int64, error) {
	return viaRefs(s, id, func(d *blobs.Dir, id blobs.ID) (int64, error) { return d.CopyTo(id, dst) },
		func(u *unresolvedRef) (int64, error) {
			rc, err := u.open()
			if err != nil {
				return 0, err
			}
			defer rc.Close()
			return io.Copy(dst, rc)
		})
}

// BlobHasher hashes blob content incrementally; Sum gives the blob's ID.
type BlobHasher struct{ h *blobs.Hasher }

// NewBlobHasher returns a hasher primed with the blob domain separator.
func NewBlobHasher() *BlobHasher { return &BlobHasher{h: blobs.NewHasher()} }

// Write adds content.
func (b *BlobHasher) Write(p []byte) (int, error) { return b.h.Write(p) }

// Sum returns the ID of everything written so far.
func (b *BlobHasher) Sum() ID { return ID(b.h.Sum()) }

// BlobID returns the ID of a blob with the given content.
func BlobID(content []byte) ID { return ID(blobs.Sum(content)) }

// SparseBlobID returns the ID of content stored as a sparse blob (see
// blobs.SparseSum and docs/format.md, "Sparse blobs").
func SparseBlobID(content []byte) ID { return ID(blobs.SparseSum(content)) }

// FileBlobID returns the ID WriteBlobFile gives the content of the file at
// path, and its length, without storing it.
func FileBlobID(path string) (ID, int64, error) {
	id, n, err := blobs.FileSum(path)
	return ID(id), n, err
}
