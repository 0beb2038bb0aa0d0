// Package contexts keeps the records of contexts — named groups of root
// workspaces for one agent, nested by fork — in core state (package
// corestate): one record per context with a revision, a parent → children
// index committed in the same transaction as the records it describes,
// compare-and-swap of many contexts at once, a bounded subtree discard,
// and a read-only check. The operations that also move workspaces (create,
// fork, freeze, discard, land) are workspace.Manager's; they use Store.
//
// Locks: none. Store holds no in-memory state; every change is fenced by
// record revisions, so several goroutines and processes may share the core
// state.
//
// Invariants: context names are never reused (a discarded context is
// marked, not deleted), so ID(name) is a stable key; a context's parent
// never changes; the children index lists exactly each context's children
// once built (a bounded discard refuses a missing index instead of
// rebuilding it); a record of an unknown version is refused, never
// guessed at. Sentinels wrap errs.ErrInvalidInput or errs.ErrBusy, so the
// CLI maps them to the same exit codes as workspace's.
package contexts
