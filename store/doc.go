// Package store is acyclicfs's embedded content-addressed store: blobs as
// immutable files, trees and generations on the metadata plane, workspace
// heads moved by compare-and-append onto per-workspace head logs, lease
// gates that fence publications, and small metadata records for the
// layers above.
//
// # Overview
//
// Every object is named by the BLAKE3-256 hash of a domain-separated
// encoding (id.go). Blobs live in the blob plane (package blobs), here the
// directory STORE/objects/ab/cdef… (mode 0400, in a store directory that
// is 0700), written temp → fsync → rename → fsync dir; a BlobBatch defers
// the syncs to one syncfs at Commit for bulk imports. Base references of
// in-place workspaces are layered above the plane: a blob ID that is no
// object may name a file of a base directory (baseref_blobs.go). Trees
// and generations are canonical encodings stored on the metadata plane
// under their ID and re-hashed on every read: a mismatch is ErrCorrupt, never a silent
// default.
//
// A workspace's head changes only through CompareAndAppend(Many), which in
// one transaction checks an optional publication Permit against its lease
// gate at the store clock, checks each expected head, appends a head-log
// entry and moves the head. The head log is the history (log, undo) and,
// through operation keys, the replay record for retried operations
// (FindOperation).
//
// Every record — the format record, trees, generations, base refs and
// their resolutions, lazy-overlay nodes, workspaces, head logs, lineage,
// operation keys, lease gates and the upper layers' records — lives on the
// metadata plane (package meta) and is read and written through meta.Tx
// (plane.go; docs/format.md maps the namespaces onto meta.db's buckets).
// The local plane is meta.Bolt over meta.db, the only code here that sees
// bbolt itself is what opens, creates and checks that file, and
// Options.Meta runs a store over another plane (meta.NewMemory: no
// meta.db, the directory holds the blobs only). Meta hands the plane to
// packages that keep their own records beside them (window). The ...GateTx
// functions take a meta.Tx so a window change and its gates commit
// together.
//
// Check verifies everything; GC deletes what no head log reaches.
//
// # Concurrency
//
// A Store is safe for concurrent use by many goroutines. Metadata changes
// are serialized by the plane (bbolt's single writer); blob writes run in parallel and
// only take a GC hold (HoldGC), which GC waits out. One process at a time
// may open a store for writing: bbolt's file lock enforces it, and Open
// waits at most Options.LockTimeout before returning ErrLocked. On an
// injected plane nothing locks the directory: its owner keeps to one
// store per plane and blob directory.
//
// # Caveats
//
// Blob files are trusted to be immutable; OpenBlob verifies while
// streaming but the mount's read-only opens of BlobPath do not. GC cannot
// see objects that an operation has written but not yet referenced from a
// head: such operations must hold HoldGC from first write to append (or
// pass the objects as extra roots). SetFailpoint is a test-only hook and is
// process-global.
package store
