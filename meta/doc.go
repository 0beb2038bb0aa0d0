// Package meta is the metadata plane: the small durable records that
// coordinate writers — workspace heads and their compare-and-append,
// lineage, operation keys, lease windows, lease gates and fencing, and the
// records upper layers keep (conflicts, mounts) — behind one interface
// whose transactions a distributed key-value store (etcd) can serve.
//
// # Overview
//
// A Store runs closures in transactions: View for reads, Update for reads
// and writes (bbolt's shape). A Tx gets, puts and deletes flat keys and
// scans a key prefix in order, forward or reverse, with a limit (a head
// log's newest N entries). Transactions are serializable: everything an
// Update closure read is still true when its writes commit, all its writes
// commit together, and an error (or panic) from the closure commits
// nothing. Compare-and-swap is therefore written as read, compare, write in
// one closure: store.CompareAndAppend reads the head and the lease gate and
// appends only if both are as expected; window's store reads the snapshot's
// revision and swaps it together with the gates.
//
// Three implementations: Bolt over a bbolt file (the store's meta.db),
// Memory for tests
// and embedding, and — next, issue #28 — etcd. Each runs metatest.Run.
//
// # Keys
//
// A Key is namespace segments, then a leaf (see Key for the grammar):
// "heads" "/" workspace NUL seq8. The namespaces in use, with the bucket
// path each is in meta.db:
//
//	workspaces            NUL name                 workspace record (JSON)
//	children              NUL parent NUL child     lineage index, value 0x01
//	heads/<workspace>     NUL seq (8 bytes BE)     head-log entry (JSON)
//	operations/<workspace> NUL operation key       seq of the entry (8 bytes BE)
//	gates                 NUL gate id              lease gate (JSON)
//	windows               NUL workspace            window snapshot (JSON)
//	meta/<ns>             NUL key                  upper layers' records
//	format                NUL "format"             the store's format record (JSON)
//	trees                 NUL id (32 bytes)        tree encoding
//	generations           NUL id (32 bytes)        generation encoding
//	bases                 NUL base id (32 bytes)   in-place base record (JSON)
//	baserefs              NUL ref id (32 bytes)    base reference encoding
//	baseref-resolved      NUL ref id (32 bytes)    ID of the ref's stored copy
//	lazy-overlay          NUL node id (32 bytes)   lazy-overlay node encoding
//	corestate/<family>    NUL record key           corestate envelope (JSON), on etcd only
//
// The store keeps its content-addressed records (trees, generations, base
// refs, overlay nodes) here too, so that one transaction publishes a
// generation and appends its head; see "trees and generations" under the
// etcd mapping for where they belong on a distributed plane.
//
// Segments are escaped (%25 %2F %00) so a namespace's prefix never
// matches a nested or neighbouring namespace's keys; leaves are raw so
// that keys sort as leaves do. ParseKey accepts only the canonical
// spelling, so one record has one key (FuzzParseKey).
//
// # Choices
//
// Keys are flat bytes, built through Space, rather than (namespace, key)
// pairs: etcd has one flat key space, so the structure is in the key
// itself and prefix listing is plain byte-prefix listing; Space keeps
// callers from spelling keys by hand. Get reports found separately so an
// empty value is a value. DeletePrefix exists beside Delete because a
// workspace's head log and operation index go with it: locally that drops
// one bucket (the layout the store always had), on etcd it is one range
// delete, where key-by-key deletion would read the whole range into the
// transaction first. Scan hands its callback a key valid only during the
// call, so the local plane allocates one buffer per scan, not one key per
// entry. There are no revisions in the interface (see below).
//
// # Mapping onto etcd (issue #28)
//
// Package meta/etcdmeta serves this interface from etcd (docs/scale-out.md).
// A key becomes the etcd key root "d" Key, where root is the store's prefix
// with "%" and NUL escaped, ended by a NUL, so that no store's range holds
// another store's keys whatever their prefixes; Key itself needs no
// further escaping (etcd keys are arbitrary bytes in byte order). An
// Update is an optimistic transaction: the closure runs against a
// buffered Tx that reads at one snapshot revision, records the mod
// revision of every key read (0 for a missing key) and every namespace
// scanned, and buffers writes; the commit is one etcd Txn whose If
// compares each read key's mod revision and whose Then holds the writes;
// on a failed compare the closure runs again. That is why closures must
// be free of side effects and why the interface has no revisions: the
// implementation keeps them, and the local one needs none because bbolt
// runs one write transaction at a time (serial writers are serializable;
// nothing is ever re-run).
//
// Scans are part of the read set. Comparing the keys a scan returned would
// miss insertions past a limit and deletions, which leave nothing to
// compare; so each namespace has a guard key (root "g" namespace NUL) that
// every write in the namespace puts again and nothing deletes, and a scan
// adds "guard's mod revision <= snapshot" to the If: one compare per
// scanned namespace, however large the range. Limit and Reverse map to
// Range's WithLimit and WithSort(Key, Descend). DeletePrefix is a range
// delete plus the guard write. A View is a consistent read at one revision
// (WithRev of the first read). A commit whose answer is lost is reported
// as such (etcdmeta.ErrOutcomeUnknown), never re-run.
//
// etcd's request size (1.5 MiB default) and operation count (128) bound
// a transaction; the plane says so by implementing Bounded, and the store
// then writes its content-addressed records (trees, generations) in
// bounded transactions of their own before the one that publishes the
// head naming them (docs/scale-out.md). On etcd the
// "generations" existence check of a head append moves before the
// transaction: generations are immutable, and the GC hold the appender
// takes keeps them from being swept in between.
//
// # Watches
//
// A plane that implements Watcher reports commits under a prefix as
// events carrying a revision, coalesced and in order, never missing the
// last change (watch.go; docs/scale-out.md "Watches"): Memory and Bolt
// from an in-process notifier, etcdmeta from etcd watches. The daemon
// follows mounted children's parents this way.
//
// # Sessions
//
// A plane whose Tx implements SessionTx can bind a record to the writing
// process's session (etcd: a lease kept alive by the process), so that it
// vanishes when the process dies or pauses past the session's TTL. The
// store writes lease gates that way, which fences a dead or paused node's
// permits whatever its clock says (docs/scale-out.md).
//
// # corestate's record families
//
// corestate keeps its records as files under flock on a local store. On a
// store on etcd its store-wide families (contexts, landings and their
// claims, propagation) are on the plane (corestate.OpenPlane): each family
// a namespace — "corestate/<family>" NUL <record key> — and each
// compare-and-swap or multi-record commit an Update closure; the per-file
// lock becomes the transaction's read set, so two machines editing one
// record conflict and one of them re-runs, instead of both holding a local
// lock that the other machine cannot see.
//
// # Concurrency
//
// A Store is safe for concurrent use. Bolt inherits bbolt's rules: one
// Update at a time, Views concurrent with it and with each other, each on
// its own snapshot. Memory serializes Updates on a lock and lets Views
// share it. A Tx belongs to its closure: do not use it from another
// goroutine or after the closure returned.
//
// # Caveats
//
// Slices a Tx hands out live as long as the transaction (bbolt maps them
// from the file) and must not be modified; copy what you keep. In Bolt a
// name inside a bucket is either a key or a nested bucket, so a leaf must
// not equal the segment of a nested namespace under the same prefix; the
// layout above never does that. Contexts are checked when a transaction
// starts; bbolt cannot abandon one midway.
package meta
