package store

import (
	"errors"
	"fmt"
	"os"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// OpenBlobFile opens blob id's file for reading by offset (the mount serves
// and passes through such files). The first open of a blob in this process
// reads it whole (a sparse blob: its data) and checks its address; later opens trust that check, as
// object files are immutable (0400, replaced only by rename). A blob that
// does not match is an error wrapping ErrCorrupt, never served.
//
// For a base ref it opens the resolution, or else the file in the base
// directory after checking its fingerprint (the mount serves it with
// passthrough and copies it up before writing); a symlink ref gives an
// in-memory file holding the target.
func (s *Store) OpenBlobFile(id ID) (*os.File, error) {
	f, err := s.openBlobObjectFile(id)
	if !errors.Is(err, ErrNotFound) {
		return f, err
	}
	st, ok, rerr := s.blobRef(id)
	switch {
	case rerr != nil:
		return nil, rerr
	case !ok:
		return nil, err
	case st.resolved:
		return s.openBlobObjectFile(st.target)
	case st.ref.Kind == KindSymlink:
		b, err := s.readRefLink(id, st.ref)
		if err != nil {
			return nil, err
		}
		return memfdWith("acyclicfs-symlink", b)
	}
	return s.openRefFile(id, st.ref)
}

// openBlobObjectFile is OpenBlobFile of an object file.
func (s *Store) openBlobObjectFile(id ID) (*os.File, error) {
	f, err := osfile.Open(s.BlobPath(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, blobOpenError(id, err)
	}
	if _, ok := s.verified.Load(id); ok {
		return f, nil
	}
	if err := verifyObject(f, id); err != nil {
		f.Close()
		if errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		return nil, fmt.Errorf("verify blob %s: %w", id.Short(), err)
	}
	s.verified.Store(id, struct{}{})
	return f, nil
}

// VerifyBlob checks blob id's address once per process (see OpenBlobFile),
// so that callers can pay for the check before taking their own locks.
// For an unresolved base ref it only checks the fingerprint (nothing is
// cached: the base directory may change).
func (s *Store) VerifyBlob(id ID) error {
	if _, ok := s.verified.Load(id); ok {
		return nil
	}
	f, err := s.openBlobObjectFile(id)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	st, ok, rerr := s.blobRef(id)
	switch {
	case rerr != nil:
		return rerr
	case !ok:
		return err
	case st.resolved:
		return s.VerifyBlob(st.target)
	}
	_, err = s.statRef(id, st.ref)
	return err
}
