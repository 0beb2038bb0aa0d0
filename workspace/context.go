package workspace

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// DefaultDiscardBound is the subtree bound of a discard when none is given.
const DefaultDiscardBound = 1024

// Contexts returns the context store kept in the manager's core state.
func (m *Manager) Contexts() *ContextStore {
	s, _ := NewContextStore(m.shared) // constant family names: cannot fail
	return s
}

// GetContext returns the context called name.
func (m *Manager) GetContext(name string) (Context, error) {
	c, found, err := m.Contexts().Load(name)
	if err != nil {
		return c, err
	}
	if !found {
		return c, fmt.Errorf("%w: %q", ErrUnknownContext, name)
	}
	return c, nil
}

// ListContexts returns every context sorted by name.
func (m *Manager) ListContexts() ([]Context, error) { return m.Contexts().List() }

// CreateContext groups existing workspaces into a new active context.
// Mountpoints must be absolute (or empty).
func (m *Manager) CreateContext(name string, roots []ContextRoot) (Context, error) {
	if err := ValidateName(name); err != nil {
		return Context{}, err
	}
	if len(roots) == 0 {
		return Context{}, fmt.Errorf("%w: a context needs at least one root", ErrInvalidInput)
	}
	seen := map[string]bool{}
	for i, r := range roots {
		if seen[r.Workspace] {
			return Context{}, fmt.Errorf("%w: root %s given twice", ErrInvalidInput, r.Workspace)
		}
		seen[r.Workspace] = true
		if _, err := m.Get(r.Workspace); err != nil {
			return Context{}, err
		}
		if r.Mountpoint != "" && !filepath.IsAbs(r.Mountpoint) {
			return Context{}, fmt.Errorf("%w: mountpoint %q of %s is not absolute", ErrInvalidInput, r.Mountpoint, r.Workspace)
		}
		roots[i].ParentWorkspace = ""
	}
	c := Context{Name: name, State: ContextActive, Roots: roots, Created: m.now()}
	ok, err := m.Contexts().CompareAndSwap(0, c)
	if err != nil {
		return Context{}, err
	}
	if !ok {
		return Context{}, fmt.Errorf("%w: %q", ErrContextExists, name)
	}
	return m.GetContext(name)
}

// ForkedRootName is the name of the fork of root workspace ws in context
// child: CHILD.WS (SPEC.md).
func ForkedRootName(child, ws string) string { return child + "." + ws }

// ForkContext makes child a new context whose roots are O(1) forks of
// parent's roots, named CHILD.WS. A workspace CHILD.WS that already exists
// as a fork of WS is adopted (so a fork interrupted by a crash can be
// retried); any other existing name is refused before anything changes.
func (m *Manager) ForkContext(parent, child string) (Context, error) {
	if err := ValidateName(child); err != nil {
		return Context{}, err
	}
	p, err := m.GetContext(parent)
	if err != nil {
		return Context{}, err
	}
	if err := p.Usable(); err != nil {
		return Context{}, err
	}
	if _, found, err := m.Contexts().Load(child); err != nil {
		return Context{}, err
	} else if found {
		return Context{}, fmt.Errorf("%w: %q", ErrContextExists, child)
	}
	roots := make([]ContextRoot, len(p.Roots))
	adopt := make([]bool, len(p.Roots))
	for i, r := range p.Roots {
		name := ForkedRootName(child, r.Workspace)
		if err := ValidateName(name); err != nil {
			return Context{}, fmt.Errorf("fork root %s: %w", r.Workspace, err)
		}
		roots[i] = ContextRoot{Workspace: name, ParentWorkspace: r.Workspace}
		w, err := m.st.GetWorkspace(name)
		switch {
		case err == nil && w.Parent == r.Workspace:
			adopt[i] = true
		case err == nil:
			return Context{}, fmt.Errorf("%w: %q (not a fork of %s)", ErrExists, name, r.Workspace)
		case !errors.Is(err, store.ErrNotFound):
			return Context{}, err
		}
	}
	var made []string
	undo := func() {
		for _, n := range made {
			_ = m.st.DeleteWorkspace(n)
		}
	}
	for i, r := range p.Roots {
		if adopt[i] {
			continue
		}
		if _, err := m.Fork(r.Workspace, roots[i].Workspace, ""); err != nil {
			undo()
			return Context{}, fmt.Errorf("fork root %s: %w", r.Workspace, err)
		}
		made = append(made, roots[i].Workspace)
	}
	// The parent is fenced: a freeze or discard racing this fork makes it
	// fail rather than hang a child off a context that no longer allows it.
	c := Context{Name: child, Parent: parent, State: ContextActive, Roots: roots, Created: m.now()}
	ok, err := m.Contexts().CompareAndSwapMany(map[string]uint64{child: 0, parent: p.Revision}, []Context{c}, false)
	if err != nil || !ok {
		undo()
		if err == nil {
			err = fmt.Errorf("%w: %s or %s changed meanwhile; retry", ErrBusy, parent, child)
		}
		return Context{}, err
	}
	return m.GetContext(child)
}

// FreezeContext stops changes through the context: further context fork
// and land of it (or into it) are refused with ErrContextFrozen. Freezing a
// frozen context is a no-op. The daemon makes the roots' mounts read-only
// (ReadOnlyRootOf); plain workspace commands on the roots still work.
func (m *Manager) FreezeContext(name string) (Context, error) {
	c, err := m.GetContext(name)
	if err != nil {
		return c, err
	}
	switch c.State {
	case ContextFrozen:
		return c, nil
	case ContextDiscarded:
		return c, fmt.Errorf("%w: %s", ErrContextDiscarded, name)
	}
	next := c
	next.State = ContextFrozen
	ok, err := m.Contexts().CompareAndSwap(c.Revision, next)
	if err != nil {
		return c, err
	}
	if !ok {
		return c, fmt.Errorf("%w: %s changed meanwhile; retry", ErrBusy, name)
	}
	return next, nil
}

// DiscardContext marks name and every descendant context discarded, if
// the subtree has at most maximum contexts (ErrTraversalLimit otherwise,
// and nothing changes). Workspaces are kept. It returns the contexts
// affected, name first.
func (m *Manager) DiscardContext(name string, maximum int) ([]Context, error) {
	c, err := m.GetContext(name)
	if err != nil {
		return nil, err
	}
	return m.Contexts().DiscardSubtree(c.Parent, name, maximum)
}

// Root landing outcomes, per root of a context land.
const (
	// OutcomeLanded: the parent root's head became the child root's head.
	OutcomeLanded Outcome = "landed"
	// OutcomeNotLanded: this root merged cleanly but another root
	// conflicted, so nothing landed.
	OutcomeNotLanded Outcome = "not-landed"
)

// RootLanding is one root's part of a context land.
type RootLanding struct {
	Workspace       string `json:"workspace"`
	ParentWorkspace string `json:"parent_workspace"`
	// Outcome is landed, current (nothing to land), conflicted or not-landed.
	Outcome Outcome `json:"outcome"`
	// Head is the parent root's head after the landing.
	Head      store.ID       `json:"head"`
	Conflicts []ConflictInfo `json:"conflicts,omitempty"`
}

// ContextLandResult is the outcome of a context land.
type ContextLandResult struct {
	Context   string        `json:"context"`
	Parent    string        `json:"parent"`
	Operation string        `json:"operation"`
	Outcome   Outcome       `json:"outcome"` // landed, current or conflicted
	Roots     []RootLanding `json:"roots"`
}

// rootPlan is the computed landing of one root.
type rootPlan struct {
	w, p    store.Workspace
	appends []store.Append
}

// LandContext lands every root of child into the matching root of its
// parent context, atomically: each root is rebased onto its parent root's
// head in memory (merged generations are written, no head moves), and if
// every root merges cleanly one store transaction fast-forwards every
// parent root and moves every child root (CompareAndAppendMany). A
// conflict in any root lands nothing (the result's Outcome is conflicted).
// The landing is journaled as a publication holding a claim on the parent
// context; RecoverContextLandings finishes or rolls back a crashed one.
func (m *Manager) LandContext(child string) (ContextLandResult, error) {
	c, err := m.GetContext(child)
	if err != nil {
		return ContextLandResult{}, err
	}
	if c.Parent == "" {
		return ContextLandResult{}, fmt.Errorf("%w: %s", ErrContextNoParent, child)
	}
	if err := c.Usable(); err != nil {
		return ContextLandResult{}, err
	}
	p, err := m.GetContext(c.Parent)
	if err != nil {
		return ContextLandResult{}, fmt.Errorf("parent context: %w", err)
	}
	if err := p.Usable(); err != nil {
		return ContextLandResult{}, fmt.Errorf("parent context: %w", err)
	}
	op := newOperationID()
	pub := Publication{Version: publicationVersion, Operation: op, Child: child, Parent: p.Name, Started: m.now(), Node: m.nodeName()}
	for _, r := range c.Roots {
		if !p.HasRoot(r.ParentWorkspace) {
			return ContextLandResult{}, fmt.Errorf("%w: root %s's parent %q is not a root of %s", ErrIncompatibleState, r.Workspace, r.ParentWorkspace, p.Name)
		}
		pub.Roots = append(pub.Roots, PublicationRoot{Workspace: r.Workspace, ParentWorkspace: r.ParentWorkspace})
	}
	liveLandings.Store(op, true)
	defer liveLandings.Delete(op)
	rev, err := m.beginPublication(pub)
	if err != nil {
		return ContextLandResult{}, err
	}
	failpoint.Hit("context.land.after-claim")
	res, err := m.landRoots(&pub, rev)
	if err != nil {
		// Nothing was appended (the append is the last fallible step): drop
		// the record and the claim now, or leave them to recovery.
		if eerr := m.endPublication(pub, m.publicationRev(op)); eerr != nil {
			err = errors.Join(err, eerr)
		}
		return res, err
	}
	return res, nil
}

func (m *Manager) publicationRev(op string) uint64 {
	_, rev, _, _ := m.LoadPublication(op)
	return rev
}

// landRoots plans every root, then appends all of them at once.
func (m *Manager) landRoots(pub *Publication, rev uint64) (ContextLandResult, error) {
	release := m.st.HoldGC() // merged generations must survive until appended
	defer release()
	res := ContextLandResult{Context: pub.Child, Parent: pub.Parent, Operation: pub.Operation, Outcome: OutcomeCurrent}
	plans := make([]rootPlan, len(pub.Roots))
	conflicted := false
	for i := range pub.Roots {
		r := &pub.Roots[i]
		rl := RootLanding{Workspace: r.Workspace, ParentWorkspace: r.ParentWorkspace}
		plan, conflicts, err := m.planRoot(pub, r)
		if err != nil {
			return res, err
		}
		plans[i] = plan
		rl.Head = plan.p.Head
		switch {
		case len(conflicts) > 0:
			conflicted = true
			rl.Outcome, rl.Conflicts = OutcomeConflicted, conflicts
			// The root itself moves onto its parent root with the
			// conflicts recorded (as a single land does); no parent
			// root moves.
			if rr, err := m.rebaseOnce(context.Background(), r.Workspace, RebaseOptions{}); err != nil {
				return res, err
			} else if rr.Outcome == OutcomeConflicted {
				rl.Conflicts = rr.Conflicts
			}
		case r.NewHead.IsZero():
			rl.Outcome = OutcomeCurrent
		default:
			rl.Outcome, rl.Head = OutcomeLanded, r.NewHead
		}
		res.Roots = append(res.Roots, rl)
		if i == 0 {
			failpoint.Hit("context.land.after-first")
		}
	}
	if conflicted {
		res.Outcome = OutcomeConflicted
		for i := range res.Roots {
			if res.Roots[i].Outcome == OutcomeLanded {
				res.Roots[i].Outcome, res.Roots[i].Head = OutcomeNotLanded, plans[i].p.Head
			}
		}
		if err := m.endPublication(*pub, rev); err != nil {
			return res, err
		}
		return res, nil
	}
	var appends []store.Append
	for _, p := range plans {
		appends = append(appends, p.appends...)
	}
	if len(appends) == 0 {
		return res, m.endPublication(*pub, rev)
	}
	pub.Planned = true
	newRev, err := m.publications().CompareAndSwap(pub.Operation, rev, *pub)
	if err != nil {
		return res, fmt.Errorf("record landing plan: %w", err)
	}
	failpoint.Hit("context.land.after-prepare")
	if _, err := m.st.CompareAndAppendMany(appends, nil); err != nil {
		if errors.Is(err, store.ErrHeadMoved) {
			return res, fmt.Errorf("%w: a root moved during the landing; retry: %w", ErrBusy, err)
		}
		return res, err
	}
	failpoint.Hit("context.land.after-append")
	for _, rl := range res.Roots {
		if rl.Outcome == OutcomeLanded {
			res.Outcome = OutcomeLanded
		}
	}
	// The landing happened. A record that cannot be removed now is removed
	// by the next recovery, which finds the append and finishes it.
	_ = m.endPublication(*pub, newRev)
	m.afterLanding(*pub)
	return res, nil
}

// planRoot computes one root's landing: the child root rebased onto its
// parent root's head (in memory: the merged generation is written but no
// head moves) and the appends that publish it. It fills r's Appended,
// Operation and NewHead.
func (m *Manager) planRoot(pub *Publication, r *PublicationRoot) (rootPlan, []ConflictInfo, error) {
	var plan rootPlan
	w, err := m.Get(r.Workspace)
	if err != nil {
		return plan, nil, err
	}
	if w.Parent != r.ParentWorkspace {
		return plan, nil, fmt.Errorf("%w: workspace %s's parent is %q, the context says %q", ErrIncompatibleState, w.Name, w.Parent, r.ParentWorkspace)
	}
	p, err := m.Get(r.ParentWorkspace)
	if err != nil {
		return plan, nil, err
	}
	plan.w, plan.p = w, p
	if pending, err := m.pendingConflicts(w); err != nil || len(pending) > 0 {
		return plan, infosOf(pending), err
	}
	newGen := w.Head
	switch {
	case w.Base == p.Head:
	case w.Head == w.Base:
		newGen = p.Head // no changes of its own: follow the parent
	default:
		baseRoot, err := m.rootOf(w.Base)
		if err != nil {
			return plan, nil, err
		}
		oursRoot, err := m.rootOf(w.Head)
		if err != nil {
			return plan, nil, err
		}
		theirsRoot, err := m.rootOf(p.Head)
		if err != nil {
			return plan, nil, err
		}
		// Without KeepConflicts: a plan that conflicts writes nothing.
		mr, err := m.merge3(baseRoot, oursRoot, theirsRoot, rebase.Options{})
		if err != nil {
			return plan, nil, fmt.Errorf("merge %s onto %s: %w", w.Name, p.Name, err)
		}
		if len(mr.Conflicts) > 0 {
			return plan, toInfos(mr.Conflicts), nil
		}
		shared, err := m.conflictsOf(p.Head) // the child's own are a subset (no pending ones)
		if err != nil {
			return plan, nil, err
		}
		links, err := m.mergedLinks(w.Base, w.Head, p.Head, mr.Tree)
		if err != nil {
			return plan, nil, fmt.Errorf("merge %s onto %s: %w", w.Name, p.Name, err)
		}
		newGen, err = m.st.PutGeneration(&store.Generation{Root: mr.Tree, Parents: []store.ID{w.Head, p.Head}, Workspace: w.Name, Kind: store.GenRebase, Operation: "context-land " + pub.Operation, Time: m.now(), Conflicts: shared, Links: links})
		if err != nil {
			return plan, nil, fmt.Errorf("store generation: %w", err)
		}
	}
	childOp := "context-land " + pub.Child + " into " + pub.Parent + " " + pub.Operation
	if newGen == p.Head {
		// The parent already has it; the child only follows (if behind).
		if w.Head != newGen || w.Base != p.Head {
			plan.appends = []store.Append{{Workspace: w.Name, ExpectHead: w.Head, Entry: store.HeadEntry{Gen: newGen, Base: p.Head, Kind: store.GenRebase, Operation: childOp, Time: m.now()}}}
			r.Appended, r.Operation = w.Name, childOp
		}
		return plan, nil, nil
	}
	parentOp := "context-land " + pub.Child + " " + pub.Operation
	plan.appends = []store.Append{
		{Workspace: p.Name, ExpectHead: p.Head, Entry: store.HeadEntry{Gen: newGen, Base: p.Base, Kind: store.GenLand, Operation: parentOp, Time: m.now()}},
		{Workspace: w.Name, ExpectHead: w.Head, Entry: store.HeadEntry{Gen: newGen, Base: newGen, Kind: store.GenLand, Operation: childOp, Time: m.now()}},
	}
	r.Appended, r.Operation, r.NewHead = p.Name, parentOp, newGen
	return plan, nil, nil
}

// afterLanding clears the landed roots' conflicts and lets every moved
// parent root's children follow (as a single land does).
func (m *Manager) afterLanding(pub Publication) {
	for _, r := range pub.Roots {
		m.clearConflicts(r.Workspace)
	}
	for _, r := range pub.Roots {
		if !r.NewHead.IsZero() {
			// An in-place parent root gets the landing in its directory now
			// (or at its mount's next reconciliation); a failure leaves the
			// directory as it was and is retried by the next sync.
			_ = m.afterInPlaceMoved(context.Background(), r.ParentWorkspace)
			m.propagate(context.Background(), r.ParentWorkspace, true)
		}
	}
}
