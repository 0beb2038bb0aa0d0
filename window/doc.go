// Package window coordinates operation windows: short-lived, durable
// coordination scopes over one mounted workspace.
//
// # Overview
//
// A window is not a filesystem lock. Any number of tools may read and write
// the same mounted workspace while their leases overlap; the window pins the
// parent generation the mount was built on, so what tools see does not
// change under them. Parent advances that arrive meanwhile are coalesced
// (only the newest matters) and reconciled exactly once, after the last
// lease closes. The owner of that reconciliation holds a Ticket, which is
// durable: if it crashes, ClaimReconcile hands the same ticket to the next
// process, and new windows stay fenced (ErrReconciling) until
// CompleteReconcile.
//
// Each workspace has one Snapshot, a versioned (StateVersion) record with a
// monotonic revision and a Phase:
//
//	                  Begin (first lease pins parent)
//	+--------+ ------------------------------------> +----------------------+
//	|  Idle  |                                       |  Active              |
//	+--------+                                       |  pinned parent       |
//	  |    ^                                         |  leases {id: lease}  |
//	  |    |                                         |  pending parent      |
//	  |    |                                         +----------------------+
//	  |    |                                           |  Begin, Renew, Finish (not last),
//	  |    |                                           |  ObserveParent / ParentAdvanced
//	  |    |                                           |  (pending := newest parent)
//	  |    |                                           |
//	  |    |                  last live Finish (returns the ticket), or
//	  |    |                  every lease expired (ClaimReconcile, Begin,
//	  |    |                  a stale Finish; the ticket is claimable)
//	  |    |                                           v
//	  |    |  CompleteReconcile   +------------------------------------+
//	  |    +--------------------- |  Reconciling                       |
//	  |      (no subsequent)      |  ticket, pinned parent,            |
//	  |                           |  pending parent, subsequent parent |
//	  +-------------------------> +------------------------------------+
//	    ParentAdvanced on idle      |  ^  ObserveParent / ParentAdvanced
//	    (claims a ticket now)       |  |  (subsequent := newest parent);
//	                                +--+  CompleteReconcile with a subsequent
//	                                      parent: next ticket, pending := it
//
// Lease handles are values. Renew returns a new Lease whose Permit (a
// store.Permit) replaces the old one; the old handle is fenced. Finish of a
// stale or expired handle never claims reconciliation. Deterministic ids
// (BeginWithLeaseID, FinishWithTicket, ClaimReconcileWithTicket,
// CompleteReconcileWithNextTicket, ParentAdvancedWithTicket) make retries
// replay the recorded outcome instead of doing the work twice.
//
// Stores implement the two-method Store interface (Load, CompareAndSwap);
// MemoryStore serves tests and MetaStore keeps the state in the namespace
// "windows" of the metadata plane (package meta) that holds the workspace
// heads. MetaStore opens, renews and fences each lease's store gate in the
// same plane transaction as the window change, so a head append that checks
// the lease's permit with store.CheckPermitTx linearizes exactly against
// closes, renewals and expiry. This package never sees how the plane is
// kept (bbolt locally). windowtest.Run is the conformance suite every Store
// must pass.
//
// # Concurrency
//
// Coordinator holds no mutable state; every operation is a bounded
// optimistic loop (load, compute, compare-and-swap, at most 32 attempts,
// then ErrContended), so any number of goroutines or processes may share one
// Store. Time comes from an injected Clock; the coordinator's clock decides
// expiry for state transitions, and the store's clock decides it for
// publication (they must be the same clock in one process).
//
// HoldLease runs one renewer goroutine per held lease; Holder.Stop cancels
// it and waits for it to exit.
//
// # Caveats
//
// Corrupt, torn or future-version state is ErrIncompatibleState and is
// never reset to idle; a person or a newer binary must decide.
//
// A lease is fenced at its expiry instant (expiry <= now) both here and in
// store.CheckPermitTx. Clock skew between processes sharing a store shifts
// that instant; single-machine deployments share one clock.
//
// Gates of closed leases are fenced but not deleted; each costs one small
// metadata record until a garbage collector (store.DeleteGateTx) removes gates
// of workspaces with no active lease.
//
// ObserveParent on an idle window changes nothing and reports false: the
// caller reconciles an idle child with ParentAdvanced instead.
package window
