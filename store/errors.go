package store

import (
	"errors"

	"github.com/acyclicfs/acyclicfs/blobs"
)

var (
	// ErrInvalidID is returned when a string is not a valid ID or ID prefix.
	ErrInvalidID = errors.New("invalid id")
	// ErrNotFound is returned when an object, generation or workspace does
	// not exist. It is the blob plane's (blobs.ErrNotFound), as are
	// ErrCorrupt and ErrReadOnly: errors from the plane match them.
	ErrNotFound = blobs.ErrNotFound
	// ErrAmbiguous is returned when a generation prefix matches more than one generation.
	ErrAmbiguous = errors.New("ambiguous id prefix")
	// ErrCorrupt is returned when stored bytes do not match their address or
	// cannot be decoded. It is never silently ignored.
	ErrCorrupt = blobs.ErrCorrupt
	// ErrExists is returned when creating something that already exists.
	ErrExists = errors.New("already exists")
	// ErrHeadMoved is returned by CompareAndAppend when the workspace head is
	// not the expected one.
	ErrHeadMoved = errors.New("workspace head moved")
	// ErrFenced is returned when a publication permit's lease gate is closed,
	// superseded or expired at the store's clock.
	ErrFenced = errors.New("publication permit fenced")
	// ErrIncompatible is returned when the store's format is newer or
	// different than this binary understands.
	ErrIncompatible = errors.New("incompatible store format")
	// ErrLocked is returned when the store is held by another process beyond
	// the lock wait bound.
	ErrLocked = errors.New("store is locked by another process")
	// ErrMissing is returned by Open with Options.MustExist when the
	// metadata plane holds no store: no format record and no records
	// (a store on etcd whose prefix was deleted).
	ErrMissing = errors.New("store missing from its metadata plane")
)

var (
	// ErrReadOnly is returned when writing to a store opened read-only.
	ErrReadOnly = blobs.ErrReadOnly
	// ErrHasChildren is returned when deleting a workspace that still has
	// child workspaces.
	ErrHasChildren = errors.New("workspace has children")
	// ErrInvalidName is returned when a workspace name or metadata namespace
	// or key is not acceptable.
	ErrInvalidName = errors.New("invalid name")
)

var (
	// ErrNotDirectory is returned when CreateBase is given a path that is
	// not an existing directory.
	ErrNotDirectory = errors.New("not a directory")
	// ErrBaseChanged is returned when a base reference's path in its base
	// directory no longer matches the reference's stat fingerprint and no
	// resolution of the reference was recorded: the content it named is
	// gone.
	ErrBaseChanged = errors.New("base directory changed underneath")
)
