package workspace

import (
	"errors"
	"fmt"
	"github.com/acyclicfs/acyclicfs/workspace/contexts"
	"sort"
	"sync"

	"github.com/acyclicfs/acyclicfs/corestate"
	"github.com/acyclicfs/acyclicfs/store"
)

// A context landing is a multi-root publication (the seed's
// MultiRootPublicationStore): one journaled record per operation, created
// atomically with a claim on the parent context and deleted (compare-and-
// delete, with the claim) when the landing reaches a terminal state.
const (
	familyPublications = "context-publications"
	familyClaims       = "context-claims"
	publicationVersion = 1
)

// Publication is the durable record of one context landing in progress.
type Publication struct {
	Version int `json:"version"`
	// Operation is the landing's operation id (hex) and the record's key.
	Operation string `json:"operation"`
	Child     string `json:"child"`
	Parent    string `json:"parent"`
	Started   int64  `json:"started"`
	// Planned is set (durably) just before the one atomic head append of
	// every root. Until then nothing of the landing is visible; after it,
	// the append either happened for every root or for none, and
	// FindOperation on any appended workspace tells which.
	Planned bool              `json:"planned"`
	Roots   []PublicationRoot `json:"roots"`
	// Node is the node running the landing on a store on etcd, where
	// publications are shared: only that node recovers it (another
	// node's landing may be live). Empty on a local store.
	Node string `json:"node,omitempty"`
}

// PublicationRoot is one root's part of a landing.
type PublicationRoot struct {
	Workspace       string `json:"workspace"`
	ParentWorkspace string `json:"parent_workspace"`
	// Appended names the workspace whose head log carries Operation once
	// the append happened ("" when this root appends nothing).
	Appended  string `json:"appended,omitempty"`
	Operation string `json:"operation,omitempty"`
	// NewHead is the generation the parent workspace's head becomes
	// (zero when the parent does not move).
	NewHead store.ID `json:"new_head"`
}

// parentClaim marks a parent context as the target of one landing.
type parentClaim struct {
	Operation string `json:"operation"`
}

// liveLandings holds the operation ids of landings running in this
// process, so that an in-process recovery never mistakes one for a crashed
// landing. (Other processes cannot land concurrently: the store is opened
// by one process at a time, the daemon or a CLI command.)
var liveLandings sync.Map

// nodeName is this node's name on a store on etcd, "" on a local store.
func (m *Manager) nodeName() string {
	if m.node == nil {
		return ""
	}
	return m.node.Name()
}

func (m *Manager) publications() corestate.Family[Publication] {
	f, _ := corestate.NewFamily[Publication](m.shared, familyPublications) // constant, valid name
	return f
}

func (m *Manager) claims() corestate.Family[parentClaim] {
	f, _ := corestate.NewFamily[parentClaim](m.shared, familyClaims)
	return f
}

// LoadPublication returns the publication record of operation op.
func (m *Manager) LoadPublication(op string) (Publication, uint64, bool, error) {
	p, rev, found, err := m.publications().Load(op)
	if err != nil {
		return p, 0, false, fmt.Errorf("publication %s: %w", op, err)
	}
	if found && (p.Version != publicationVersion || p.Operation != op) {
		return p, 0, false, fmt.Errorf("publication %s: %w: version %d, operation %q", op, corestate.ErrCorrupt, p.Version, p.Operation)
	}
	return p, rev, found, nil
}

// PublicationOperations lists the landings with durable recovery state.
func (m *Manager) PublicationOperations() ([]string, error) {
	return m.publications().Keys()
}

// ClaimParent claims parent context for operation op. It is idempotent for
// the same operation and fails with ErrContextClaimed for another one.
func (m *Manager) ClaimParent(parent, op string) error {
	claim, rev, found, err := m.claims().Load(contexts.Key(parent))
	if err != nil {
		return fmt.Errorf("claim of %s: %w", parent, err)
	}
	if found {
		if claim.Operation == op {
			return nil
		}
		return fmt.Errorf("%w: %s is claimed by landing %s", ErrContextClaimed, parent, claim.Operation)
	}
	if _, err := m.claims().CompareAndSwap(contexts.Key(parent), rev, parentClaim{Operation: op}); err != nil {
		if errors.Is(err, corestate.ErrConflict) {
			return fmt.Errorf("%w: %s was claimed meanwhile", ErrContextClaimed, parent)
		}
		return fmt.Errorf("claim %s: %w", parent, err)
	}
	return nil
}

// ReleaseParent drops op's claim on parent; a claim held by another
// operation (or none) is left as it is.
func (m *Manager) ReleaseParent(parent, op string) error {
	claim, rev, found, err := m.claims().Load(contexts.Key(parent))
	if err != nil || !found || claim.Operation != op {
		return err
	}
	return m.claims().CompareAndDelete(contexts.Key(parent), rev)
}

// beginPublication creates pub's record and claims its parent context in
// one transaction: a claim never exists without the record that releases it.
func (m *Manager) beginPublication(pub Publication) (uint64, error) {
	claim, claimRev, found, err := m.claims().Load(contexts.Key(pub.Parent))
	if err != nil {
		return 0, fmt.Errorf("claim of %s: %w", pub.Parent, err)
	}
	if found && claim.Operation != pub.Operation {
		return 0, fmt.Errorf("%w: %s is claimed by landing %s", ErrContextClaimed, pub.Parent, claim.Operation)
	}
	writes := []corestate.Write{m.publications().Put(pub.Operation, 0, pub)}
	if found {
		writes = append(writes, corestate.Write{Family: familyClaims, Key: contexts.Key(pub.Parent), ExpectRev: claimRev, Assert: true})
	} else {
		writes = append(writes, m.claims().Put(contexts.Key(pub.Parent), 0, parentClaim{Operation: pub.Operation}))
	}
	if err := m.shared.Commit("land-begin-"+pub.Operation, writes); err != nil {
		if errors.Is(err, corestate.ErrConflict) {
			return 0, fmt.Errorf("%w: %s was claimed meanwhile", ErrContextClaimed, pub.Parent)
		}
		return 0, fmt.Errorf("begin landing %s: %w", pub.Child, err)
	}
	return 1, nil
}

// endPublication deletes pub's record (compare-and-delete at rev) and
// releases its claim, in one transaction. An empty write set commits
// nothing.
func (m *Manager) endPublication(pub Publication, rev uint64) error {
	var writes []corestate.Write
	if rev != 0 { // 0: the record is already gone; only the claim may remain
		writes = append(writes, m.publications().Remove(pub.Operation, rev))
	}
	claim, claimRev, found, err := m.claims().Load(contexts.Key(pub.Parent))
	if err != nil {
		return fmt.Errorf("claim of %s: %w", pub.Parent, err)
	}
	if found && claim.Operation == pub.Operation {
		writes = append(writes, m.claims().Remove(contexts.Key(pub.Parent), claimRev))
	}
	if err := m.shared.Commit("land-end-"+pub.Operation, writes); err != nil {
		return fmt.Errorf("end landing %s: %w", pub.Child, err)
	}
	return nil
}

// RecoverContextLandings finishes or rolls back every context landing a
// crash interrupted, all roots of a landing together: a landing whose
// atomic append happened is finished (its parents' children follow, its
// record and claim are dropped); one whose append did not happen is rolled
// back (nothing of it was ever visible; record and claim are dropped).
// Claims left without a publication record are released. Landings running
// in this process are skipped. It returns one line per landing handled.
// Manager.Recover should call it (after core-state recovery).
func (m *Manager) RecoverContextLandings() ([]string, error) {
	ops, err := m.PublicationOperations()
	if err != nil {
		return nil, fmt.Errorf("list context landings: %w", err)
	}
	var done []string
	for _, op := range ops {
		if _, live := liveLandings.Load(op); live {
			continue
		}
		pub, rev, found, err := m.LoadPublication(op)
		if err != nil {
			return done, err
		}
		if !found || pub.Node != m.nodeName() {
			continue
		}
		landed, err := m.publicationLanded(pub)
		if err != nil {
			return done, err
		}
		if err := m.endPublication(pub, rev); err != nil {
			return done, err
		}
		if landed {
			m.afterLanding(pub)
			done = append(done, fmt.Sprintf("context landing %s of %s into %s: finished", op, pub.Child, pub.Parent))
		} else {
			done = append(done, fmt.Sprintf("context landing %s of %s into %s: rolled back", op, pub.Child, pub.Parent))
		}
	}
	stale, err := m.releaseOrphanClaims()
	return append(done, stale...), err
}

// recoverContextLandings is RecoverContextLandings appending to done, in
// the shape Manager.Recover's hook needs.
func (m *Manager) recoverContextLandings(done []string) ([]string, error) {
	more, err := m.RecoverContextLandings()
	return append(done, more...), err
}

// publicationLanded reports whether pub's atomic append happened.
func (m *Manager) publicationLanded(pub Publication) (bool, error) {
	if !pub.Planned {
		return false, nil
	}
	for _, r := range pub.Roots {
		if r.Appended == "" {
			continue
		}
		_, found, err := m.st.FindOperation(r.Appended, r.Operation)
		if errors.Is(err, store.ErrNotFound) {
			continue // workspace removed since; another root decides
		}
		if err != nil {
			return false, fmt.Errorf("landing %s: %w", pub.Operation, err)
		}
		return found, nil
	}
	return false, nil
}

func (m *Manager) releaseOrphanClaims() ([]string, error) {
	keys, err := m.claims().Keys()
	if err != nil {
		return nil, fmt.Errorf("list context claims: %w", err)
	}
	var done []string
	for _, k := range keys {
		claim, rev, found, err := m.claims().Load(k)
		if err != nil || !found {
			return done, err
		}
		if _, live := liveLandings.Load(claim.Operation); live {
			continue
		}
		if _, _, has, err := m.LoadPublication(claim.Operation); err != nil || has {
			if err != nil {
				return done, err
			}
			continue
		}
		if err := m.claims().CompareAndDelete(k, rev); err != nil && !errors.Is(err, corestate.ErrConflict) {
			return done, err
		}
		done = append(done, "context claim of landing "+claim.Operation+": released")
	}
	return done, nil
}

// ContextRecoveryWork lists pending context landings (for status).
func (m *Manager) ContextRecoveryWork() ([]string, error) {
	ops, err := m.PublicationOperations()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ops))
	for _, op := range ops {
		out = append(out, "context landing "+op)
	}
	sort.Strings(out)
	return out, nil
}
