package rebase

import "errors"

var (
	// ErrLimit is returned when a merge exceeds one of its Limits (changed
	// paths or conflicts). Nothing has been written when it is returned.
	ErrLimit = errors.New("rebase limit exceeded")
	// ErrIDMismatch is returned when a TreeWriter stores an object under a
	// different ID than the one the merge computed for it, which means the
	// writer does not use the store's canonical hashing.
	ErrIDMismatch = errors.New("writer returned an unexpected id")
)
