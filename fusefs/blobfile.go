package fusefs

import (
	"os"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
	"github.com/acyclicfs/acyclicfs/store"
)

// BlobFileOpener is implemented by Objects that verify a blob's address
// before its file is served (*store.Store does, once per blob and
// process). Without it the mount opens BlobPath directly.
type BlobFileOpener interface {
	OpenBlobFile(id store.ID) (*os.File, error)
	// VerifyBlob does the check alone (cached), so that open can pay for
	// it before taking the overlay lock.
	VerifyBlob(id store.ID) error
}

// verifyBlob checks blob id if objects can; called without locks held.
func verifyBlob(objects Objects, id store.ID) error {
	if v, ok := objects.(BlobFileOpener); ok && !id.IsZero() {
		return v.VerifyBlob(id)
	}
	return nil
}

// BlobReader is implemented by Objects that can verify a small blob and
// read it whole in one pass (*store.Store does): a clean file's first open,
// which pushes the content into the kernel's page cache (storePages), then
// opens and reads its blob once instead of twice.
type BlobReader interface {
	// ReadBlobVerified returns the content if it is size bytes long
	// (else nil, nil), after the check VerifyBlob does.
	ReadBlobVerified(id store.ID, size int64) ([]byte, error)
}

// verifyReadPages verifies blob id and returns its content for
// storePages: nil when it cannot be read whole (the reads then go through
// READ, which reports why). An error is a failed verification.
func verifyReadPages(objects Objects, id store.ID, size int64) ([]byte, error) {
	if r, ok := objects.(BlobReader); ok && !id.IsZero() {
		return r.ReadBlobVerified(id, size)
	}
	if err := verifyBlob(objects, id); err != nil {
		return nil, err
	}
	return readPages(objects, id, size), nil
}

// openBlob opens the lower file of blob id, verified when objects can.
func openBlob(objects Objects, id store.ID) (*os.File, error) {
	if v, ok := objects.(BlobFileOpener); ok {
		return v.OpenBlobFile(id)
	}
	return osfile.Open(objects.BlobPath(id), os.O_RDONLY, 0)
}
