package blobs

import (
	"errors"
	"io"
	"time"
)

var (
	// ErrNotFound is returned when an object is not in the plane.
	ErrNotFound = errors.New("not found")
	// ErrCorrupt is returned when an object's content does not hash to its
	// ID. It is never silently ignored.
	ErrCorrupt = errors.New("corrupt object")
	// ErrReadOnly is returned when writing to a plane opened read-only.
	ErrReadOnly = errors.New("store is read-only")
	// ErrUnavailable is returned when a remote plane (object storage, a
	// shared directory) cannot be reached or refuses a request: nothing
	// that needed it happened, and trying again later may succeed.
	ErrUnavailable = errors.New("remote blob store unavailable")
)

// Store is a blob plane: immutable objects named by their content hash.
// Implementations must pass blobtest.Run.
type Store interface {
	// Put stores what r yields and returns its ID and length. The object
	// is durable when Put returns; if it existed nothing is written.
	Put(r io.Reader) (ID, int64, error)
	// PutBytes stores p.
	PutBytes(p []byte) (ID, error)
	// PutFile stores the content of the regular file at path (sparse if it
	// has many holes); the ID is that of exactly what was stored even if
	// the file changes meanwhile.
	PutFile(path string) (ID, int64, error)
	// NewBatch starts a batch: many puts, one durability point.
	NewBatch() Batch
	// Open opens object id for streaming; the Read that reaches its end
	// returns an error wrapping ErrCorrupt instead of io.EOF if the
	// content does not hash to id.
	Open(id ID) (io.ReadCloser, error)
	// Read returns object id's whole content, verified.
	Read(id ID) ([]byte, error)
	// Stat returns object id's size without reading it; an error wrapping
	// ErrNotFound if it is absent.
	Stat(id ID) (Info, error)
	// List calls fn for every object (in no set order), stopping at fn's
	// first error. Objects put or deleted meanwhile may or may not be
	// seen.
	List(fn func(Info) error) error
	// Delete removes object id; deleting an absent object is no error.
	Delete(id ID) error
}

// Batch collects objects and makes them durable and visible together at
// Commit: before it none is visible, after it each is complete. Callers
// publish what references batch objects only after Commit. Methods are
// safe for concurrent use.
type Batch interface {
	Put(r io.Reader) (ID, int64, error)
	PutBytes(p []byte) (ID, error)
	PutFile(path string) (ID, int64, error)
	// Commit makes every object of the batch durable and visible. The
	// batch can be used again afterwards. On error the objects not yet
	// published stay pending: call Commit again or Abort.
	Commit() error
	// Abort drops every object not yet committed.
	Abort()
}

// Info describes a stored object.
type Info struct {
	ID   ID
	Size int64
	// ModTime is when the object was stored (GC spares objects newer than
	// its start): for Dir the later of the file's mtime and ctime; the
	// zero time if the plane does not know.
	ModTime time.Time
}
