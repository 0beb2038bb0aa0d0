package store

import (
	"fmt"
	"io"
	"os"
)

// OpenBlobFile opens blob id's file for reading by offset (the mount serves
// and passes through such files). The first open of a blob in this process
// reads it whole and checks its address; later opens trust that check, as
// object files are immutable (0444, replaced only by rename). A blob that
// does not match is an error wrapping ErrCorrupt, never served.
func (s *Store) OpenBlobFile(id ID) (*os.File, error) {
	f, err := os.Open(s.BlobPath(id))
	if err != nil {
		return nil, blobOpenError(id, err)
	}
	if _, ok := s.verified.Load(id); ok {
		return f, nil
	}
	h := NewBlobHasher()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("verify blob %s: %w", id.Short(), err)
	}
	if got := h.Sum(); got != id {
		f.Close()
		return nil, fmt.Errorf("%w: blob %s: content hashes to %s", ErrCorrupt, id.Short(), got.Short())
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("verify blob %s: %w", id.Short(), err)
	}
	s.verified.Store(id, struct{}{})
	return f, nil
}

// VerifyBlob checks blob id's address once per process (see OpenBlobFile),
// so that callers can pay for the check before taking their own locks.
func (s *Store) VerifyBlob(id ID) error {
	if _, ok := s.verified.Load(id); ok {
		return nil
	}
	f, err := s.OpenBlobFile(id)
	if err != nil {
		return err
	}
	return f.Close()
}
