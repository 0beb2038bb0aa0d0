// Package workspace orchestrates workspaces over the object and head store
// (package store) and the journaled core state (package corestate): the
// operations docs/cli.md lists, their recovery, and the hooks a live mount
// uses. Manager is its one entry point.
//
// What it owns, by what changes together:
//
//   - The core (manager.go, ops.go, rebase.go, export.go, conflicts.go,
//     diff.go, links.go, maint.go, live.go, mounts.go, mergebuf.go): create,
//     fork, commit, undo, remove, rebase, land, export, conflicts and
//     resolve, fsck and gc, the propagation of a moved head to children, the
//     mount records, and the publication of a live mount's capture.
//   - In-place workspaces (inplace_type.go, inplace.go, inplace_lost.go,
//     inplace_locks.go, materialize.go, detect_memo.go, detect_watch.go;
//     the type inPlaces, over the core, with its own locks), and the import
//     of a directory (importdir.go, shared with create and commit): a
//     workspace whose base is a real directory DIR named by store base
//     references; detection of what other programs changed in DIR, the
//     merge of it, the journaled materialization of the head into DIR,
//     lost-directory handling.
//   - Contexts (context.go, context_check.go, context_mounts.go,
//     context_names.go, context_publication.go): creating, forking, freezing,
//     discarding and landing groups of root workspaces. The records
//     themselves, their children index and their sentinels live in the
//     sub-package workspace/contexts (below this one: it needs only
//     corestate and the store's name rule); context_names.go keeps
//     workspace's names for them.
//   - Git-native workspaces (gitnative.go, git*.go; the type gitNative,
//     over the core, with its own object-name cache): create from git,
//     bind, publish, pull, and the git-compatibility records.
//
// Sub-packages: workspace/contexts (context records; layer 2) and
// workspace/errs (the sentinels ErrInvalidInput and ErrBusy, shared so
// that a sub-package's errors map to the same exit codes; layer 0).
//
// Locks. Operations on one ordinary workspace are serialized by the
// store's compare-and-append on its head, not by locks here. The creation,
// syncs and materializations of an in-place workspace are serialized by a
// mutex per workspace (inPlaces.locks, dirLocks): one DIR, one
// writer; different directories sync concurrently. Smaller locks guard
// in-memory caches only: hooksMu (the live-mount hooks), detectMemo.mu
// (detection verdicts per base directory), the oid cache and treeBuffer
// (merge scratch). No lock is held across a call into a live mount.
//
// Invariants.
//
//   - Every change is one store or corestate transaction, or a journaled
//     sequence of them (export journals, materialization journals,
//     propagation records, context publications) that Open's Recover rolls
//     forward or back: a crash between any two steps loses nothing and
//     half-writes nothing.
//   - Objects a change writes before the head names them are protected
//     from gc by Store.HoldGC for the length of the operation.
//   - Long operations (Create and Commit of a directory, Export, Rebase,
//     Land, SyncInPlace, GitPublish, CreateFromGit, GitPull) take a
//     context.Context and stop between items or steps when it is
//     cancelled, never inside one; a cancelled import creates nothing and a
//     cancelled export leaves its target as it was.
//   - An in-place workspace's state record says which generation DIR holds
//     (Materialized); DIR is only written under that workspace's lock and a
//     materialization journal.
package workspace
