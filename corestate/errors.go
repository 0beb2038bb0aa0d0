package corestate

import (
	"errors"
	"fmt"
)

var (
	// ErrConflict is returned when a compare-and-swap, compare-and-delete or
	// transaction expectation does not match the record's current revision,
	// or when a transaction id is already pending. Nothing was changed.
	ErrConflict = errors.New("corestate: revision conflict")
	// ErrCorrupt is returned when a record (and its previous copy) or a
	// transaction journal cannot be decoded. It is never replaced by a
	// silent default.
	ErrCorrupt = errors.New("corestate: corrupt record")
	// ErrLockTimeout is returned when a record or journal lock stays held by
	// another owner beyond Options.LockTimeout. The wrapping error names the
	// lock path.
	ErrLockTimeout = errors.New("corestate: record lock timed out")
	// ErrTooLarge is returned by LoadBounded when a record file exceeds the
	// caller's bound; the file is not decoded.
	ErrTooLarge = errors.New("corestate: record exceeds its bound")
	// ErrInvalidKey is returned when a family, key or transaction id is not
	// acceptable (empty, too long, or a family outside [a-z0-9-]).
	ErrInvalidKey = errors.New("corestate: invalid family or key")
	// ErrInvalidTransaction is returned when a transaction's write set is
	// malformed, for example when it writes one record twice.
	ErrInvalidTransaction = errors.New("corestate: invalid transaction")
	// ErrTraversalLimit is returned by ChildIndex walks when the subtree (or
	// one parent's child list) would exceed the caller's bound. It is
	// decided from count records before any oversized list is read.
	ErrTraversalLimit = errors.New("corestate: traversal limit exceeded")
)

// ConflictError describes a failed revision expectation. It matches
// ErrConflict with errors.Is.
type ConflictError struct {
	Family   string
	Key      string
	Expected uint64
	// Actual is the record's current revision (0 when absent).
	Actual uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("corestate: record %s/%q at revision %d, expected %d", e.Family, e.Key, e.Actual, e.Expected)
}

// Unwrap lets errors.Is(err, ErrConflict) match.
func (e *ConflictError) Unwrap() error { return ErrConflict }
