package contexts

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"lukechampine.com/blake3"

	"github.com/acyclicfs/acyclicfs/corestate"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace/errs"
)

// ContextState is where a context is in its life: active → frozen →
// discarded, or active → discarded. Discarded contexts are kept (marked,
// never deleted) so their names stay taken and their history stays shown.
type State string

// Context states.
const (
	Active    State = "active"
	Frozen    State = "frozen"
	Discarded State = "discarded"
)

func (s State) valid() bool {
	return s == Active || s == Frozen || s == Discarded
}

// ContextRoot is one workspace of a context.
type Root struct {
	// Workspace is the root's workspace name.
	Workspace string `json:"workspace"`
	// ParentWorkspace is the root of the parent context this root was
	// forked from ("" in a context made by create).
	ParentWorkspace string `json:"parent_workspace,omitempty"`
	// Mountpoint is where the agent mounts this root ("" if unspecified).
	Mountpoint string `json:"mountpoint,omitempty"`
}

// Context groups root workspaces for one agent. Contexts nest: a fork's
// roots are forks of its parent's roots, one for one.
type Context struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	// Parent is the parent context's name ("" for a context made by create).
	Parent  string `json:"parent,omitempty"`
	State   State  `json:"state"`
	Roots   []Root `json:"roots"`
	Created int64  `json:"created"`
	// Revision is the record's corestate revision; it is not part of the
	// stored value (the envelope carries it).
	Revision uint64 `json:"-"`
}

const (
	contextVersion = 1
	// familyContexts holds one record per context, keyed by contextKey.
	familyContexts = "contexts"
	// contextIndexName prefixes the children index families
	// ("contexts-index-children", "contexts-index-child-counts").
	contextIndexName = "contexts-index"
	// familyContextReady holds the index marker: present once the children
	// index describes every record. Only list and compare-and-swap build a
	// missing index; a bounded discard refuses instead.
	familyContextReady = "contexts-index-ready"
	// familyContextSet counts the context records, so "the exact set" can
	// be fenced without listing the family under a lock.
	familyContextSet = "contexts-set"
	singletonKey     = "v1"
)

// contextSet is the value of the contexts-set record.
type contextSet struct {
	Count int `json:"count"`
}

// ContextID returns the id of the context called name: the first 16 bytes
// of a domain-separated BLAKE3 of the name, in hex. Names are never reused
// (discarded contexts are kept), so the id is stable and unique, and a
// lookup by name needs no separate name index.
func ID(name string) string { return hex.EncodeToString([]byte(Key(name))) }

// contextKey is the corestate key of a context: 16 raw bytes (names may be
// 128 bytes, longer than corestate's key limit).
func Key(name string) string {
	h := blake3.New(16, nil)
	h.Write([]byte("acyclicfs context v1\x00"))
	h.Write([]byte(name))
	return string(h.Sum(nil))
}

// ContextStore keeps contexts in core state: one record per context with a
// revision, a parent → children index committed in the same prepared /
// committed transaction as the records it describes, compare-and-swap of
// many contexts at once, and a bounded subtree discard. It is the port of
// the seed's WorkspaceContextStore over corestate's public API.
//
// It holds no in-memory state; it is safe for concurrent use, and several
// processes may share the core state (every change is revision-fenced).
type Store struct {
	cs      *corestate.Store
	records corestate.Family[Context]
	index   corestate.ChildIndex
	ready   corestate.Family[int]
	set     corestate.Family[contextSet]
}

// NewContextStore returns the context store kept in cs.
func NewStore(cs *corestate.Store) (*Store, error) {
	records, err := corestate.NewFamily[Context](cs, familyContexts)
	if err != nil {
		return nil, err
	}
	index, err := corestate.NewChildIndex(cs, contextIndexName)
	if err != nil {
		return nil, err
	}
	ready, err := corestate.NewFamily[int](cs, familyContextReady)
	if err != nil {
		return nil, err
	}
	set, err := corestate.NewFamily[contextSet](cs, familyContextSet)
	if err != nil {
		return nil, err
	}
	return &Store{cs: cs, records: records, index: index, ready: ready, set: set}, nil
}

// recover finishes any transaction a crashed writer left, so a read never
// sees half of one (the seed recovers the context journal before every
// operation). Journals of live commits are skipped by corestate.
func (s *Store) recover() error {
	if _, err := s.cs.Recover(); err != nil {
		return fmt.Errorf("recover core state: %w", err)
	}
	return nil
}

// loadKey reads the context at key and checks that the record is the one
// the key names.
func (s *Store) loadKey(key string) (Context, bool, error) {
	c, rev, found, err := s.records.Load(key)
	if err != nil || !found {
		return Context{}, found, err
	}
	if err := c.check(); err != nil || Key(c.Name) != key {
		return Context{}, false, fmt.Errorf("context record %x: %w: %v", key, corestate.ErrCorrupt, err)
	}
	c.Revision = rev
	return c, true, nil
}

// check validates a decoded record.
func (c *Context) check() error {
	switch {
	case c.Version != contextVersion:
		return fmt.Errorf("version %d", c.Version)
	case store.ValidWorkspaceName(c.Name) != nil:
		return fmt.Errorf("name %q", c.Name)
	case c.ID != ID(c.Name):
		return fmt.Errorf("id %q does not match name %q", c.ID, c.Name)
	case c.Parent != "" && store.ValidWorkspaceName(c.Parent) != nil:
		return fmt.Errorf("parent %q", c.Parent)
	case c.Parent == c.Name:
		return fmt.Errorf("context %q is its own parent", c.Name)
	case !c.State.valid():
		return fmt.Errorf("state %q", c.State)
	}
	for _, r := range c.Roots {
		if store.ValidWorkspaceName(r.Workspace) != nil {
			return fmt.Errorf("root workspace %q", r.Workspace)
		}
	}
	return nil
}

// Load returns the context called name; found is false when it does not
// exist.
func (s *Store) Load(name string) (Context, bool, error) {
	if err := store.ValidWorkspaceName(name); err != nil {
		return Context{}, false, err
	}
	if err := s.recover(); err != nil {
		return Context{}, false, err
	}
	c, found, err := s.loadKey(Key(name))
	if err != nil {
		return Context{}, false, fmt.Errorf("load context %s: %w", name, err)
	}
	return c, found, nil
}

// List returns every context sorted by name. Like the seed, it installs
// the children index if it is missing (a store written before the index
// existed); it is the one read that may scan the family.
func (s *Store) List() ([]Context, error) {
	if err := s.recover(); err != nil {
		return nil, err
	}
	if err := s.ensureIndex(); err != nil {
		return nil, err
	}
	return s.loadAll()
}

func (s *Store) loadAll() ([]Context, error) {
	keys, err := s.records.Keys()
	if err != nil {
		return nil, fmt.Errorf("list contexts: %w", err)
	}
	out := make([]Context, 0, len(keys))
	for _, k := range keys {
		c, found, err := s.loadKey(k)
		if err != nil {
			return nil, fmt.Errorf("list contexts: %w", err)
		}
		if found {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// indexReady reports whether the children index marker exists, and its
// revision (for an Assert fence).
func (s *Store) indexReady() (uint64, bool, error) {
	_, rev, found, err := s.ready.Load(singletonKey)
	if err != nil {
		return 0, false, fmt.Errorf("context index marker: %w", err)
	}
	return rev, found, nil
}

// ensureIndex builds the children index from every record if its marker is
// absent. Each child is added by its own small commit (a Move is a no-op
// once the child is listed), so a crash mid-build is finished by the next
// build; the marker is written last. The record count is fixed up with it.
func (s *Store) ensureIndex() error {
	if _, ready, err := s.indexReady(); err != nil || ready {
		return err
	}
	all, err := s.loadAll()
	if err != nil {
		return err
	}
	for _, c := range all {
		if c.Parent == "" {
			continue
		}
		ws, err := s.index.Move(Key(c.Name), "", Key(c.Parent))
		if err != nil {
			return fmt.Errorf("build context index: %w", err)
		}
		ws = append(ws, s.records.Put(Key(c.Name), c.Revision, c))
		ws[len(ws)-1].Assert = true
		if err := s.cs.Commit("ctx-index-"+newOperationID(), ws); err != nil {
			return fmt.Errorf("build context index: %w", err)
		}
	}
	_, setRev, _, err := s.set.Load(singletonKey)
	if err != nil {
		return fmt.Errorf("build context index: %w", err)
	}
	err = s.cs.Commit("ctx-index-"+newOperationID(), []corestate.Write{
		s.ready.Put(singletonKey, 0, 1),
		s.set.Put(singletonKey, setRev, contextSet{Count: len(all)}),
	})
	if err != nil && !errors.Is(err, corestate.ErrConflict) {
		return fmt.Errorf("build context index: %w", err)
	}
	return nil // a conflict means a concurrent builder finished it
}

// CompareAndSwap replaces (or with expectRev 0 creates) one context. It
// reports false, changing nothing, when the record is not at expectRev.
func (s *Store) CompareAndSwap(expectRev uint64, c Context) (bool, error) {
	return s.CompareAndSwapMany(map[string]uint64{c.Name: expectRev}, []Context{c}, false)
}

// CompareAndSwapMany replaces every context in replacements in one
// transaction, if every context named in expected is at its expected
// revision (0: absent); contexts in expected but not in replacements are
// only fenced. With requireExactSet the store must also hold no context
// beyond those expected present. It reports false, changing nothing, when
// an expectation fails or a replacement is not named in expected.
//
// The children index is updated in the same transaction, so it commits and
// rolls back with the records. A context's parent is fixed at creation: it
// must exist (and is fenced) when the child is created, and a replacement
// that changes an existing context's parent is refused — so the contexts
// always form a forest. One transaction may create at most one child per
// parent (each index record is written once per corestate transaction).
func (s *Store) CompareAndSwapMany(expected map[string]uint64, replacements []Context, requireExactSet bool) (bool, error) {
	if err := s.recover(); err != nil {
		return false, err
	}
	if err := s.ensureIndex(); err != nil {
		return false, err
	}
	// A conflict on a context record is the caller's failed expectation.
	// One on the bookkeeping records (index, set count) only means a
	// concurrent transaction touched the same parent: recompute and retry.
	for attempt := 0; ; attempt++ {
		ok, err := s.compareAndSwapOnce(expected, replacements, requireExactSet)
		var ce *corestate.ConflictError
		if (errors.As(err, &ce) && ce.Family != familyContexts || errors.Is(err, errIndexRead)) && attempt < casRetries {
			continue
		}
		if errors.As(err, &ce) {
			return false, nil
		}
		return ok, err
	}
}

// errIndexRead marks an index read whose child count and child list
// disagreed. corestate reads of two records are not a snapshot, so a
// concurrent commit of the same parent can show that for a moment: the
// operation is retried, and only a disagreement that persists across the
// retries is reported (as corruption or incompatible state).
var errIndexRead = errors.New("context index read raced a writer")

// casRetries bounds the retries of a context transaction that lost a race
// on bookkeeping records only.
const casRetries = 8

func (s *Store) compareAndSwapOnce(expected map[string]uint64, replacements []Context, requireExactSet bool) (bool, error) {
	readyRev, _, err := s.indexReady()
	if err != nil {
		return false, err
	}
	writes := []corestate.Write{{Family: familyContextReady, Key: singletonKey, ExpectRev: readyRev, Assert: true}}
	replaced := map[string]bool{}
	created := 0
	for i := range replacements {
		c := &replacements[i]
		exp, ok := expected[c.Name]
		if !ok || replaced[c.Name] {
			return false, nil
		}
		replaced[c.Name] = true
		c.Version, c.ID = contextVersion, ID(c.Name)
		if err := c.check(); err != nil {
			return false, fmt.Errorf("context %q: %w: %v", c.Name, errs.ErrInvalidInput, err)
		}
		key := Key(c.Name)
		cur, found, err := s.loadKey(key)
		if err != nil {
			return false, err
		}
		if cur.Revision != exp {
			return false, nil
		}
		if found && cur.Parent != c.Parent {
			return false, fmt.Errorf("context %s: %w: its parent context cannot change", c.Name, errs.ErrInvalidInput)
		}
		writes = append(writes, s.records.Put(key, exp, *c))
		if found {
			continue
		}
		created++
		if c.Parent == "" {
			continue
		}
		if _, inTx := expected[c.Parent]; !inTx {
			p, found, err := s.loadKey(Key(c.Parent))
			if err != nil {
				return false, err
			}
			if !found {
				return false, fmt.Errorf("context %s: %w: parent %q", c.Name, ErrUnknown, c.Parent)
			}
			writes = append(writes, corestate.Write{Family: familyContexts, Key: Key(c.Parent), ExpectRev: p.Revision, Assert: true})
		}
		moves, err := s.index.Move(key, "", Key(c.Parent))
		if errors.Is(err, corestate.ErrCorrupt) {
			return false, fmt.Errorf("%w: %w", errIndexRead, err)
		}
		if err != nil {
			return false, fmt.Errorf("context index: %w", err)
		}
		writes = append(writes, moves...)
	}
	for name, exp := range expected {
		if err := store.ValidWorkspaceName(name); err != nil {
			return false, err
		}
		if !replaced[name] {
			writes = append(writes, corestate.Write{Family: familyContexts, Key: Key(name), ExpectRev: exp, Assert: true})
		}
	}
	if created > 0 || requireExactSet {
		set, setRev, _, err := s.set.Load(singletonKey)
		if err != nil {
			return false, fmt.Errorf("context set: %w", err)
		}
		if requireExactSet {
			present := 0
			for _, exp := range expected {
				if exp != 0 {
					present++
				}
			}
			if set.Count != present {
				return false, nil
			}
		}
		if created > 0 {
			writes = append(writes, s.set.Put(singletonKey, setRev, contextSet{Count: set.Count + created}))
		} else {
			writes = append(writes, corestate.Write{Family: familyContextSet, Key: singletonKey, ExpectRev: setRev, Assert: true})
		}
	}
	if err := s.cs.Commit("ctx-"+newOperationID(), writes); err != nil {
		return false, fmt.Errorf("context transaction: %w", err)
	}
	for i := range replacements {
		replacements[i].Revision = expected[replacements[i].Name] + 1
	}
	return true, nil
}

// Children returns the names of parent's child contexts if there are at
// most limit of them (ErrTraversalLimit otherwise), reading only parent's
// index records and the children's own records.
func (s *Store) Children(parent string, limit int) ([]string, error) {
	if err := store.ValidWorkspaceName(parent); err != nil {
		return nil, err
	}
	keys, err := s.index.Children(Key(parent), limit)
	if errors.Is(err, corestate.ErrTraversalLimit) {
		return nil, fmt.Errorf("%w: %w", ErrTraversalLimit, err)
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		c, found, err := s.loadKey(k)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%w: child %x of %s has no record", ErrIncompatibleState, k, parent)
		}
		out = append(out, c.Name)
	}
	sort.Strings(out)
	return out, nil
}

// DiscardSubtree marks child and every descendant context discarded, in one
// transaction, if child's parent context is parent ("" for a context made
// by create) and the subtree has at most maximum contexts. It reads only
// the subtree: child's record, the index records of the subtree (each
// child count before its list, each list bounded in bytes by its count),
// and the subtree's records — never the family, so an unrelated corrupt
// record cannot fail it. The walk's index revisions fence the commit.
//
// It fails with ErrTraversalLimit when the subtree is larger than maximum
// and with ErrIncompatibleState when the index is missing (it is never
// rebuilt here) or disagrees with the records; nothing is changed then. It
// returns the subtree's contexts as they now are, child first.
func (s *Store) DiscardSubtree(parent, child string, maximum int) ([]Context, error) {
	if maximum < 1 {
		return nil, fmt.Errorf("%w: the discard bound must be at least 1", errs.ErrInvalidInput)
	}
	if err := store.ValidWorkspaceName(child); err != nil {
		return nil, err
	}
	if err := s.recover(); err != nil {
		return nil, err
	}
	readyRev, ready, err := s.indexReady()
	if err != nil {
		return nil, err
	}
	if !ready {
		return nil, fmt.Errorf("%w: the context children index is missing (run 'acyclicfs context list' to rebuild it)", ErrIncompatibleState)
	}
	root, found, err := s.loadKey(Key(child))
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: %q", ErrUnknown, child)
	}
	if root.Parent != parent {
		return nil, fmt.Errorf("%w: %s's parent context is %q, not %q", ErrIncompatibleState, child, root.Parent, parent)
	}
	sub, err := s.index.Subtree(Key(child), maximum)
	for attempt := 0; errors.Is(err, corestate.ErrCorrupt) && attempt < casRetries; attempt++ {
		sub, err = s.index.Subtree(Key(child), maximum) // see errIndexRead
	}
	if errors.Is(err, corestate.ErrTraversalLimit) {
		// corestate's message names raw keys; say it in context names.
		return nil, fmt.Errorf("%w: %s's subtree has more than %d contexts; nothing was discarded", ErrTraversalLimit, child, maximum)
	}
	if errors.Is(err, corestate.ErrCorrupt) {
		return nil, fmt.Errorf("%w: children index under %s: %w", ErrIncompatibleState, child, err)
	}
	if err != nil {
		return nil, err
	}
	inTree := make(map[string]bool, len(sub.Nodes))
	for _, k := range sub.Nodes {
		inTree[k] = true
	}
	records := make([]Context, 0, len(sub.Nodes))
	writes := append([]corestate.Write{{Family: familyContextReady, Key: singletonKey, ExpectRev: readyRev, Assert: true}}, sub.Fences...)
	for i, k := range sub.Nodes {
		c := root
		if i > 0 {
			c, found, err = s.loadKey(k)
			if err != nil {
				return nil, err
			}
			if !found || !inTree[Key(c.Parent)] {
				return nil, fmt.Errorf("%w: index lists %x under %s but its record disagrees", ErrIncompatibleState, k, child)
			}
		}
		if c.State == Discarded {
			writes = append(writes, corestate.Write{Family: familyContexts, Key: k, ExpectRev: c.Revision, Assert: true})
		} else {
			next := c
			next.State = Discarded
			writes = append(writes, s.records.Put(k, c.Revision, next))
			c = next
			c.Revision++
		}
		records = append(records, c)
	}
	err = s.cs.Commit("ctx-discard-"+newOperationID(), writes)
	if errors.Is(err, corestate.ErrConflict) {
		return nil, fmt.Errorf("%w: contexts under %s changed meanwhile; retry", errs.ErrBusy, child)
	}
	if errors.Is(err, corestate.ErrTooLarge) {
		// A store on etcd: the subtree fits the bound but not one plane
		// transaction (docs/scale-out.md); nothing was changed.
		return nil, fmt.Errorf("%w: %s's subtree of %d contexts is more than one transaction of this store's metadata plane holds; nothing was discarded (discard its descendants first): %v", ErrTraversalLimit, child, len(sub.Nodes), err)
	}
	if err != nil {
		return nil, err
	}
	return records, nil
}

// newOperationID returns a fresh random operation id (hex), as
// workspace's does.
func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	return hex.EncodeToString(b[:])
}
