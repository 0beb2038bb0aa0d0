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

// openBlob opens the lower file of blob id, verified when objects can.
func openBlob(objects Objects, id store.ID) (*os.File, error) {
	if v, ok := objects.(BlobFileOpener); ok {
		return v.OpenBlobFile(id)
	}
	return osfile.Open(objects.BlobPath(id), os.O_RDONLY, 0)
}
