// Package cluster makes a store directory a node of a store shared through
// etcd (issue #28): the node's configuration file (STORE/cluster.json),
// the connection to etcd that serves the store's metadata plane
// (meta/etcdmeta), the node's identity, and the claims by which a
// workspace is mounted on at most one node at a time.
//
// A store directory without cluster.json is a local store and this package
// plays no part in it. With one, workspace.Open connects to etcd through
// Open and runs the store on the etcd plane: everything on the metadata
// plane (workspaces, heads, lineage, windows, lease gates, trees,
// generations, conflicts, attribution) is shared by every node of the
// prefix, and with Config.Blobs every object too (a shared directory, the
// store's remote blob plane, objects/ a cache of it); the directory keeps
// what belongs to this node: the mounts' upper files, the core state
// (journals of this node's operations, mount records, in-place and git
// bindings to local directories) and, without Config.Blobs, the blob
// objects its captures stored.
//
// # Claims
//
// A claim is an etcd key, next to the metadata plane's keys under the
// store's prefix (a record of the plane's namespace "cluster-claims", see
// docs/scale-out.md), bound to the
// lease of the claiming daemon's session. The daemon keeps the lease alive;
// the claim goes with the unmount (Release), with the daemon's exit (the
// session's lease is revoked) and, for a node that died or stopped, when
// its lease expires after the configured TTL. A node takes over its own
// claims left by an earlier daemon of the same node (that daemon is gone:
// one daemon serves a store directory). A claim made again after this
// node's lease was lost checks the claim key's history since its last
// put: another node's claim in between (released since or not) makes it
// fail with ErrClaimed, so that the node publishes nothing to a
// workspace that moved on without it (docs/scale-out.md "Failure model").
//
// A claim is also compared inside every head append of the node
// (Node.HeadGuard, the store's Options.HeadGuard): the append's etcd Txn
// reads the claim of each workspace this node claims, so a claim lost
// between the check before a publication and its commit fails the
// append with store.ErrFenced instead of letting it through.
package cluster
