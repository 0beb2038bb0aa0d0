// Package blobs is acyclicfs's blob plane: content-addressed objects
// behind a narrow interface (Store), and its local implementation, a
// directory of immutable files (Dir).
//
// # Overview
//
// An object's ID is the BLAKE3-256 hash of its content under a domain
// separator (Sum, Hasher), or, for a file with many holes, of its
// non-zero blocks and where they are (SparseSum; see sparse.go): the
// plane verifies every read against the ID. Put stores one object
// durably; a Batch stores many and makes them durable and visible
// together at Commit, all or none of each object (an object is either
// absent or complete and durable). Stat says whether an object is present
// and its size, List enumerates objects (for GC and fsck), Delete removes
// one (GC).
//
// Dir keeps objects as STORE/objects/ab/cdef… files, mode 0400 in 0700
// fan-out directories, written temp → fsync → rename → fsync directory
// (a Batch defers the syncs to one syncfs, or a few concurrent fsyncs, at
// Commit). Files are cloned (FICLONE) from their source where the file
// system allows; files with holes are stored sparse; big dense files are
// copied with direct I/O, bypassing the page cache (direct.go). Dir also
// offers what only a local plane can: the object's path (the mount
// passes it through), an *os.File verified once per process, and
// hole-keeping copies.
//
// Tier puts a Dir in front of a remote Store (object storage, or a
// shared directory opened with OpenShared): the Dir becomes a bounded
// cache. Writers Upload what they put before publishing anything that
// references it (a failing remote is ErrUnavailable); a local miss is
// fetched, verified against its ID and kept with its zero blocks as
// holes; least recently used objects the remote holds are evicted past
// the bound. The store uses it with store.Options.Remote.
//
// Mem is a small in-memory Store for tests of layers above the plane.
// blobtest.Run is the conformance suite every implementation passes.
//
// # What is not here
//
// Trees and generations are content-addressed too, but they are not put
// through this plane: they live in the metadata file (meta.db), where a
// generation is published in the same transaction as the head that names
// it. Moving them here would change the on-disk format; the plane's
// interface leaves room for it (an object is bytes under a hash).
//
// Base references (files of an in-place workspace's directory named by
// their stat fingerprint) are not objects either: the store layers them
// above the plane, falling back to them when an ID is no object.
//
// # Concurrency
//
// Every Store and Batch method is safe for concurrent use. Concurrent Puts
// of one content store it once.
//
// # Caveats
//
// Object files are trusted to be immutable once verified: Dir.OpenFile
// verifies a blob's first open in the process and trusts later ones.
// Options.Fail is a crash-test hook between durable steps.
package blobs
