package store

import (
	"bytes"
	"errors"
	"io"
	"os"

	"github.com/acyclicfs/acyclicfs/blobs"
)

// Base references as a layer above the blob plane. A blob ID in a tree is
// an object of the plane, or a file or symlink base reference: resolved
// to an object (Resolve), or still read from the base directory under
// its fingerprint. viaRefs is the one place that falls back from the
// plane to the references; each blob read names what it does on an
// object and on an unresolved reference.

// viaRefs runs onObject on blob id in the plane; if the plane has no such
// object and id is a file or symlink base reference, it runs onObject on
// the reference's resolution, or onRef on the unresolved reference. An ID
// that is neither gives onObject's ErrNotFound; a directory reference an
// error wrapping ErrNotFound.
//
// onObject is a method expression ((*blobs.Dir).Open), not a method value,
// so that a read allocates no closure.
func viaRefs[T any](s *Store, id ID, onObject func(*blobs.Dir, blobs.ID) (T, error), onRef func(*unresolvedRef) (T, error)) (T, error) {
	v, err := onObject(s.objs, bid(id))
	if !errors.Is(err, ErrNotFound) {
		if s.tier != nil && err == nil {
			s.tier.Touch(bid(id))
		}
		return v, err
	}
	var zero T
	st, ok, rerr := s.blobRef(id)
	switch {
	case rerr != nil:
		return zero, rerr
	case !ok && s.tier != nil:
		return viaTier(s, bid(id), onObject)
	case !ok:
		return zero, err
	case st.resolved && s.tier != nil:
		return viaTier(s, bid(st.target), onObject)
	case st.resolved:
		return onObject(s.objs, bid(st.target))
	}
	return onRef(&unresolvedRef{s: s, id: id, ref: st.ref})
}

// viaTier runs onObject on object id in the cache, fetching it from the
// remote first if it is not there (an error wrapping ErrNotFound if the
// remote lacks it too, blobs.ErrUnavailable if the remote failed). An
// object evicted between the fetch and onObject is fetched once more.
func viaTier[T any](s *Store, id blobs.ID, onObject func(*blobs.Dir, blobs.ID) (T, error)) (T, error) {
	v, err := onObject(s.objs, id)
	if !errors.Is(err, ErrNotFound) {
		if err == nil {
			s.tier.Touch(id)
		}
		return v, err
	}
	release, err := s.tier.Fetch(id)
	defer release()
	if err != nil {
		var zero T
		return zero, err
	}
	return onObject(s.objs, id)
}

// unresolvedRef is a file or symlink base reference with no resolution:
// its content is what its path in the base directory holds, as long as
// the path keeps the reference's fingerprint (ErrBaseChanged otherwise).
type unresolvedRef struct {
	s   *Store
	id  ID
	ref BaseRef
}

// stat checks the fingerprint and returns the size.
func (u *unresolvedRef) stat() (blobs.Info, error) {
	if u.ref.Git != "" { // immutable by its name: the size is the ref's
		return blobs.Info{ID: bid(u.id), Size: u.ref.Size}, nil
	}
	st, err := u.s.statRef(u.id, u.ref)
	if err != nil {
		return blobs.Info{}, err
	}
	return blobs.Info{ID: bid(u.id), Size: st.Size}, nil
}

// open streams the content; the Read that reaches its end checks the
// fingerprint again.
func (u *unresolvedRef) open() (io.ReadCloser, error) {
	if u.ref.Git != "" {
		return u.s.gitOpen(u.id, u.ref)
	}
	if u.ref.Kind == KindSymlink {
		b, err := u.s.readRefLink(u.id, u.ref)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	f, err := u.s.openRefFile(u.id, u.ref)
	if err != nil {
		return nil, err
	}
	return &refReader{f: f, id: u.id, ref: u.ref}, nil
}

// read returns the whole content (a symlink's target).
func (u *unresolvedRef) read() ([]byte, error) {
	if u.ref.Git != "" {
		return u.s.readGitRef(u.id, u.ref)
	}
	return u.s.readRef(u.id, u.ref)
}

// openFile opens the file in the base directory (a symlink: an in-memory
// file holding its target).
func (u *unresolvedRef) openFile() (*os.File, error) {
	if u.ref.Git != "" {
		return u.s.gitFile(u.id, u.ref)
	}
	if u.ref.Kind == KindSymlink {
		b, err := u.s.readRefLink(u.id, u.ref)
		if err != nil {
			return nil, err
		}
		return memfdWith("acyclicfs-symlink", b)
	}
	return u.s.openRefFile(u.id, u.ref)
}
