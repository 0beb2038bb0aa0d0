package workspace

import (
	"fmt"
	"path/filepath"

	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/corestate"
	"github.com/acyclicfs/acyclicfs/meta"
)

// sharedFamilies are the core-state families that describe the store as a
// whole rather than one node: contexts (records, their children index,
// index marker and set count), context landings and the parent claims
// they hold, and pending propagations (another node may finish one). On a
// store on etcd they live on the metadata plane (corestate.OpenPlane), so
// every node sees them; the other families — mounts, inplace,
// materialize, export, git-compat — name things on one node's disk and
// stay in STORE/state. On a local store every family is in STORE/state.
var sharedFamilies = []string{
	"contexts",
	"contexts-index-children",
	"contexts-index-child-counts",
	"contexts-index-ready",
	"contexts-set",
	familyPublications,
	familyClaims,
	familyPropagate,
}

// openShared returns the store of the shared families: local itself for a
// local store (node nil), the plane's for a store on etcd. A node made
// before these families were shared may hold some of them in STORE/state,
// where they are no longer read: warn says so (they are left untouched).
func openShared(node *cluster.Node, plane meta.Store, local *corestate.Store, warn func(string)) (*corestate.Store, error) {
	if node == nil {
		return local, nil
	}
	s, err := corestate.OpenPlane(plane, corestate.PlaneOptions{Families: sharedFamilies})
	if err != nil {
		return nil, fmt.Errorf("open shared core state: %w", err)
	}
	if warn != nil {
		for _, f := range sharedFamilies {
			if keys, err := local.Keys(f); err == nil && len(keys) > 0 {
				warn(fmt.Sprintf("%s holds %d records from before %s was shared on etcd; they are not read", filepath.Join(local.Root(), f), len(keys), f))
			}
		}
	}
	return s, nil
}

// SharedState exposes the store of the shared families (sharedFamilies):
// CoreState itself for a local store, the metadata plane's on etcd.
func (m *Manager) SharedState() *corestate.Store { return m.shared }
