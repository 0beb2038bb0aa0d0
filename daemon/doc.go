// Package daemon is the per-store server: it alone holds the store open,
// serves every FUSE mount of the store, and runs the commands the CLI
// forwards to it (package main in cmd/acyclicfs keeps only the CLI:
// commands, flags, output, exit codes and the client side of the control
// protocol).
//
// # What it owns
//
//   - Mounting and serving workspaces (Daemon.MountWorkspace, Mount):
//     the FUSE mount, its session tracker (fusefs/sessions) and the leases
//     the mount holds in the workspace's operation window (window).
//   - The final close: when the last lease of a window ends, the mount is
//     reconciled (Mount.reconcileLast), see below.
//   - Recovery of mounts a dead daemon left (Daemon.RecoverMount): detach
//     the dead mountpoint, replay and publish its overlay, wait for the
//     dead daemon's leases to expire, finish its window's reconcile.
//   - Capture failures (capturefail.go): a capture that cannot be stored
//     (a full disk) ends its lease all the same, keeps the overlay's
//     changes and is retried in the background.
//   - Busy reporting (busy.go): commands that move a head refuse while a
//     window is open and name the holders (OpenLeasesError).
//   - Claims, on a store on etcd (package cluster): a workspace is
//     claimed before it is mounted (another node's claim fails the mount
//     with cluster.ErrClaimed) and released at unmount; the claims'
//     session lease is revoked at exit, and claimed again for the mounts
//     still served when it was lost. A mount whose workspace another
//     node claimed meanwhile is fenced (fenced.go): read-only, publishing
//     nothing, its unpublished changes kept as the fork WS.fenced-NODE-N;
//     a recovery claims the workspace first and does the same, also when
//     the claim's history since its mount record's ClaimRev shows another
//     node's claim made and released meanwhile. Every head append checks
//     the claim again inside its etcd Txn (cluster.Node.HeadGuard).
//   - The control protocol's server side (protocol.go): POST /run runs a
//     forwarded command line through Config.Exec, POST /fsmonitor answers
//     git's fsmonitor hook, GET /ping.
//
// # The final close
//
// Called with the mount's lock held, in this order:
//
//  1. capture: the overlay's changes become trees and blobs (fusefs);
//  2. publish: they become the workspace's head, fenced by the last
//     lease's permit (a lease that expired meanwhile is fenced; the
//     daemon then claims the window's reconcile and publishes under it);
//  3. finish: the lease is closed, which hands out the window's reconcile
//     ticket (or the ticket is claimed);
//  4. rebase: onto the parent head the window recorded as pending,
//     idempotent by the ticket's key, and the ticket is completed;
//  5. switch view: the mount shows the new head (an in-place workspace's
//     directory is materialized instead).
//
// A crash between any two steps leaves a state the next mount or unmount
// finishes: the overlay is replayed (1-2), and the window's reconcile is
// claimed and finished by its ticket (3-4). A capture that fails (not
// fenced) closes the lease, completes the reconcile without switching
// the view, and is retried.
//
// The fencing in step 2 needs the window's lease gates on the same
// metadata plane as the heads: store.CompareAndAppend checks the permit
// against its gate in the transaction that appends the head, and the
// window coordinator (window.MetaStore over store.Store.Meta, see
// workspace.Manager.Windows) opens, renews and fences the gates in the
// transaction that changes the window. window.MemoryStore keeps windows
// apart from the store, so a lease it closed or let expire could not stop
// an append already on its way; a store on an in-memory plane
// (store.Options.Meta = meta.NewMemory()) therefore still runs its windows
// on window.MetaStore, over that plane (daemon/finalclose_test.go runs the
// final close on both planes).
//
// # Goroutines and locks
//
// The HTTP server runs each request on its own goroutine; the session
// tracker calls Mount.Begin and Mount.End from its sweeps and request
// admission; a failed capture starts one retry goroutine per mount
// (retryCaptures); a discarded context's mount is unmounted on its own
// goroutine (afterWindowClosed); each lease is renewed by a
// window.Holder goroutine.
//
// Lock order: a Mount's lock (a channel, so that waits for it are
// bounded), then Daemon.mu (the registry of mounts). A parent's final
// close may take its children's locks (parentAdvanced): lineage is
// acyclic, so parent before child. Daemon.gcMu is held shared by every
// forwarded command and exclusively by gc.
package daemon
