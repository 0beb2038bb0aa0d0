// Package sessions maps the pids that issue FUSE requests to lease owners
// and turns their comings and goings into lease Begin/End events.
//
// # Overview
//
// The mount calls [Tracker.Admit] with the caller's pid at the start of every
// request. The pid is resolved once, from /proc/<pid>/stat, to an [Owner]:
// its session ("sid:N", the default), process group ("pgid:N") or process
// ("pid:N"), per --lease-by. The first request of an owner opens a lease
// through [Handler.Begin]; concurrent first requests share that one Begin and
// its result. A background sweeper scans the proc tree every SweepInterval
// and calls [Handler.End] for owners with no live process left and, with
// --idle-close, for owners that made no request for IdleClose and have no
// open file or mapping under the mount, and no working directory there
// unless they wait for input from outside it (presence.go). A request from an owner
// whose lease just ended opens a new one. [Tracker.Sweep] may also be
// called on demand: the daemon does before land and rebase, so that a
// session that just ended does not hold the window open until the next
// tick, and then names the sessions still alive with [Tracker.Processes].
//
// A declared harness ([Tracker.DeclareHarness], harness.go) holds no
// lease: its requests are admitted at once, and each process tree it
// starts is one owner, "harness-child:C" (C its direct child), found by
// ancestry through stat's parent field and pinned while any process of it
// lives; harnesses and tree members do not count for their session.
//
// Explicit leases (exec, lease begin) are opened by the daemon, which
// announces their owner with [Tracker.Bind]: requests from that owner are
// then admitted without a Begin, and sweeps never end it. [Tracker.Unbind]
// forgets it again without an End call.
//
// # Concurrency
//
// Tracker.mu (RWMutex) guards the pid cache, the owner table and the mutable
// fields of every owner. The Admit fast path, a known pid whose owner holds
// a lease, takes only mu.RLock for one map lookup and stamps the current
// sweep epoch into the owner with an atomic store (skipped when unchanged):
// no clock read, syscall or allocation. Everything else takes mu.Lock.
// Tracker.sweepMu serialises sweeps and EndAll and is always taken before mu.
//
// Handler methods are never called with mu held. An owner moves through
// pending (Begin running) -> held -> ending (End running) -> gone; requests
// that find an owner pending or ending wait on its done channel, so End and
// Begin never overlap for one owner and End runs exactly once per successful
// Begin. Handlers may call Owners, and Admit, Bind or Unbind for other
// owners; they must not call Sweep, EndAll or Close (sweepMu, the loop), nor
// Admit or Bind for the owner being begun or ended (it waits for itself).
// Close waits for a sweep in progress, including its End calls.
//
// # Caveats
//
//   - Pid reuse: a pid that exits and is reused by another owner within one
//     sweep interval is attributed to the old owner until the next sweep,
//     which notices the changed start time (stat field 22) and drops the
//     cache entry. Liveness itself always comes from a fresh scan.
//   - FUSE requests carry thread ids. /proc resolves but does not list them,
//     so sweeps re-read the stat of cached ids the listing missed.
//   - Idle-close granularity is one sweep: a request is timestamped by the
//     sweep that observes it, so a lease closes between IdleClose and
//     IdleClose+SweepInterval after its last request, never early.
//   - Cwd and fd paths are compared as strings in the daemon's mount
//     namespace; processes in other mount namespaces may look idle.
//     Processes whose cwd/fds cannot be read (permissions) count as busy.
//   - If the proc tree cannot be listed a sweep ends nothing.
//   - Harness trees: a descendant whose parent exits before any request or
//     sweep saw it in the tree is reparented (to init or a subreaper) and
//     keyed by its session from then on. A harness's declaration ends when
//     it exits; its trees live on while their processes do.
//   - The presence check reads /proc/PID/task/TID/syscall, which needs
//     ptrace access to the process (the daemon runs as its user or root);
//     unreadable counts as busy.
package sessions
