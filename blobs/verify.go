package blobs

import "fmt"

// Verifier checks a stream of content against an ID in either encoding
// (dense or sparse): a remote plane that keeps no record of the encoding
// streams the logical content, and the reader that reaches its end calls
// Check.
type Verifier struct {
	id     ID
	dense  *Hasher
	sparse *sparseHasher
	n      int64
}

// NewVerifier starts checking content against id.
func NewVerifier(id ID) *Verifier {
	return &Verifier{id: id, dense: NewHasher(), sparse: newSparseHasher()}
}

// Write adds content.
func (v *Verifier) Write(p []byte) (int, error) {
	v.dense.Write(p)
	v.sparse.Write(p)
	v.n += int64(len(p))
	return len(p), nil
}

// Check ends the content: nil if it hashes to the ID in either encoding,
// an error wrapping ErrCorrupt otherwise. Call it once.
func (v *Verifier) Check() error {
	got := v.dense.Sum()
	if got == v.id || v.sparse.Sum() == v.id {
		return nil
	}
	return fmt.Errorf("%w: blob %s: %d bytes hash to %s", ErrCorrupt, v.id.Short(), v.n, got.Short())
}

// Uploader is a remote Store that can take an immutable object file
// whose ID the caller knows (a Tier's cached object) without hashing it
// again; reads verify it anyway. The caller has just found the object
// absent, so Upload need not ask. The s3blobs Store is one.
type Uploader interface {
	Upload(id ID, path string) error
}
