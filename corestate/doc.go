// Package corestate is journaled local persistence for control-plane state:
// one lock and one crash-recoverable JSON record per (family, key), plus
// prepared/committed transactions across records. It is the Go port of the
// seed's LocalCoreStateStore (core_state.rs).
//
// # Overview
//
// A Store is a directory. Each family is a subdirectory (family names are
// [a-z0-9-], at most 64 bytes); each record in it is named by the lowercase
// hex of its key, so keys may be any 1..120 bytes without escaping
// concerns:
//
//	<root>/<family>/<hexkey>.json           current record
//	<root>/<family>/<hexkey>.previous.json  last good copy, only during a write
//	<root>/<family>/<hexkey>.next.json      replacement being written
//	<root>/<family>/<hexkey>.lock           flock(2) target for this record
//	<root>/_transactions/<hex txid>.json    transaction journal (+ .previous/.next/.lock)
//
// A record file is an envelope {"revision": N, "value": <JSON>} with N >= 1;
// revision 0 means "absent" in every compare-and-swap. The value is stored
// compact. A write is: write and fsync next; rotate current to previous;
// rename next to current; fsync the directory; remove previous. A read
// takes current if it decodes, otherwise it promotes previous (copying it
// over current durably); if neither decodes the result is ErrCorrupt, never
// a default. So a crash at any point leaves the old or the new record.
// Directories are created on the first mutation; reads never create them.
//
// Commit applies several writes atomically. Under the journal's lock and
// every record's lock, it checks all expected revisions (ErrConflict and no
// change on any mismatch), writes the journal in phase "prepared" with each
// record's pre-image and post-image, applies the writes one by one, rewrites
// the journal as "committed", and removes it. Recover (run by Open) handles
// a journal left by a crash: "prepared" restores every touched record to its
// pre-image, "committed" applies every post-image. Both are idempotent: a
// record already at the target image is skipped, so recovery itself may
// crash and be rerun. The journal value is
//
//	{"version":1,"id":<hex txid>,"phase":"prepared"|"committed",
//	 "writes":[{"family":F,"key":<hex key>,"before":<envelope|null>,"after":<envelope|null>}]}
//
// where a null "before" means the record was absent and a null "after"
// means the write deletes it. A Write with Assert set only checks its
// expected revision (under lock, for the whole commit) and is not journaled:
// it fences the data a transaction was computed from.
//
// Family[T] is a typed view of one family. ChildIndex keeps a parent →
// children index as records ("<name>-children" holds the sorted child list,
// "<name>-child-counts" its length) maintained by transaction writes, so it
// commits and rolls back with the records it describes; Subtree walks it in
// bounded work, reading each count before its list and each list with a
// byte bound derived from the count, and returns Assert fences for the
// Commit that acts on the walk. Check verifies every record and journal
// without repairing anything.
//
// # Concurrency
//
// All coordination is through flock(2) on the .lock files, which excludes
// other processes and other Store values or goroutines in this process
// alike (each acquisition opens its own file description), and is released
// by the kernel when a process dies. Lock waits poll every LockRetry and
// give up after LockTimeout with ErrLockTimeout naming the lock file, so a
// stuck holder stalls only callers of that record. Commit takes the journal
// lock first and then record locks sorted by (family, key); Recover uses the
// same order, so they cannot deadlock. Recover only try-locks a journal: a
// held journal lock means a live Commit owns it, and it is reported as Busy.
// Lock files of records that no longer exist are unlinked by their holder;
// a waiter that then locks the unlinked inode notices (the name no longer
// refers to its file) and retries, so two owners never coexist.
//
// A Store has no in-memory state; any number of Store values and processes
// may share a root. Reads of different records are not a snapshot: a reader
// may see one record before and another after a concurrent Commit. A reader
// of a record inside a live Commit waits for it and sees the final value.
//
// # Caveats
//
//   - After a crash, records touched by the unfinished transaction show
//     partial state until Recover runs. Open runs it; a long-lived process
//     sharing the root with one that crashed should call Recover too. If a
//     record was changed in the meantime to something matching neither
//     image, recovery leaves it alone and lists it in RecoveryReport.Diverged
//     rather than destroy the later write.
//   - Revisions restart at 1 after a delete, so a fence held across a delete
//     and re-create can match again (ABA). Families that need monotonic
//     fences should keep a tombstone instead of deleting.
//   - A torn current record is repaired from previous, which may be one
//     write older than the torn one: the torn write was never acknowledged.
//   - Options.NoSync disables every fsync and is for tests only.
//   - The crash-point hook (SetFailpointForTest) is process-global; tests
//     using it must not run in parallel.
//
// # On a metadata plane
//
// OpenPlane returns a Store with the same API whose records live on a
// meta.Store instead of in files: record (family, key) is the envelope
// JSON above under meta key "corestate/<family>" NUL key (plane.go). A
// CompareAndSwap, CompareAndDelete, Update or Commit is one meta.Update
// that reads every record it expects and writes them all or none, so
// there are no locks, journals or previous copies: Recover and
// PendingTransactions have nothing to do, and Check decodes the records
// of PlaneOptions.Families. On an optimistic plane (etcd) an Update
// closure, and so Store.Update's fn, may run more than once. On a
// Bounded plane a Commit reading or writing more records than
// TxLimits.MaxWrites, or more bytes than MaxBytes, is refused before it
// starts with ErrTooLarge. Revisions restart after a delete there too.
// Reads outside a Commit are each their own snapshot, as with files.
package corestate
