package meta

import "errors"

var (
	// ErrInvalidKey is returned when a key or scan prefix does not follow
	// the key structure (see Key): no namespace, an empty or malformed
	// segment, an empty leaf, or a part longer than MaxPartSize.
	ErrInvalidKey = errors.New("invalid metadata key")
	// ErrReadOnly is returned when a View transaction, or a plane opened
	// read-only, is asked to write.
	ErrReadOnly = errors.New("metadata transaction is read-only")
	// ErrUnavailable is returned (wrapped) by a plane whose server did
	// not answer in time (etcd without a quorum): callers doing a series
	// of independent transactions stop at the first one rather than wait
	// out each.
	ErrUnavailable = errors.New("metadata plane unavailable")
)
