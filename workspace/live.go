package workspace

import (
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
)

// clockAdapter gives the window coordinator the manager's clock.
type clockAdapter struct{ now func() int64 }

func (c clockAdapter) NowMillis() int64 { return c.now() }

// Windows returns the operation-window coordinator, whose state lives on
// the same metadata plane as the heads (so lease gates fence publications
// in the same transaction).
func (m *Manager) Windows() *window.Coordinator {
	m.winOnce.Do(func() {
		clk := clockAdapter{m.opt.Clock}
		m.win = window.NewCoordinator(window.NewMetaStore(m.st.Meta(), clk), clk)
	})
	return m.win
}

// PinnedParent is the generation a new window of ws pins: its parent's
// head, or for a root workspace its own head.
func (m *Manager) PinnedParent(ws string) (store.ID, error) {
	w, err := m.Get(ws)
	if err != nil {
		return store.ID{}, err
	}
	if w.Parent == "" {
		return w.Head, nil
	}
	p, err := m.st.GetWorkspace(w.Parent)
	if err != nil {
		return store.ID{}, fmt.Errorf("parent %s of %s: %w", w.Parent, ws, err)
	}
	return p.Head, nil
}

// RootOf returns a generation's root tree.
func (m *Manager) RootOf(gen store.ID) (store.ID, error) { return m.rootOf(gen) }

// HoldGC keeps a concurrent gc from sweeping objects written before they
// are referenced (a mount's capture writes blobs and trees, then publishes).
func (m *Manager) HoldGC() (release func()) { return m.st.HoldGC() }

// PublishCapture publishes a mount's captured tree as ws's next head.
// pinned is the generation the mount's view was based on. If ws's head
// moved underneath the mount (a land into a mounted parent), the capture is
// merged with the new head: where both changed a path differently the
// mount's content stands in (nothing the tools wrote is lost) and the path
// is recorded as a conflict with the head's version as theirs; those
// conflicts are returned. trees are the capture's trees not stored yet
// (Mount.CaptureDeferred): they are stored with the generation. links are
// the capture's hard-link groups (store.Generation.Links).
func (m *Manager) PublishCapture(ws string, pinned, root store.ID, links [][]string, permit *store.Permit, trees ...*store.Tree) (store.ID, []ConflictInfo, error) {
	release := m.st.HoldGC()
	defer release()
	w, err := m.Get(ws)
	if err != nil {
		return store.ID{}, nil, err
	}
	op := "capture " + newOperationID()
	pt, err := m.st.PrepareResolve(trees, nil)
	if err != nil {
		return store.ID{}, nil, fmt.Errorf("publish capture of %s: %w", ws, err)
	}
	var pr *store.PreparedResolve
	if m.ip.derivesFromInPlace(ws) {
		pinnedRoot, err := m.rootOf(pinned)
		if err != nil {
			return store.ID{}, nil, err
		}
		if pr, err = m.ip.preparePreserve(pinnedRoot, root, trees, pt); err != nil {
			return store.ID{}, nil, fmt.Errorf("preserve the base of %s's capture: %w", ws, err)
		}
	}
	if w.Head == pinned {
		// The trees and the preservation go into the generation's
		// transaction.
		gen, err := m.publish(w, root, links, store.GenCapture, op, permit, pt, pr)
		return gen, nil, err
	}
	if err := m.st.WriteResolve(pt); err != nil {
		return store.ID{}, nil, fmt.Errorf("store the capture of %s: %w", ws, err)
	}
	if err := m.st.WriteResolve(pr); err != nil {
		return store.ID{}, nil, fmt.Errorf("preserve the base of %s's capture: %w", ws, err)
	}
	baseRoot, err := m.rootOf(pinned)
	if err != nil {
		return store.ID{}, nil, err
	}
	headRoot, err := m.rootOf(w.Head)
	if err != nil {
		return store.ID{}, nil, err
	}
	pinnedLinks, err := m.linksOf(pinned)
	if err != nil {
		return store.ID{}, nil, err
	}
	if root == baseRoot && store.EqualLinks(links, pinnedLinks) {
		return w.Head, nil, nil // the mount changed nothing: the moved head stands
	}
	mr, err := m.merge3(baseRoot, root, headRoot, rebase.Options{KeepConflicts: true})
	if err != nil {
		return store.ID{}, nil, fmt.Errorf("merge capture of %s with its moved head: %w", ws, err)
	}
	if permit != nil && !window.PermitMatchesWorkspace(*permit, ws) {
		return store.ID{}, nil, fmt.Errorf("publish capture of %s: %w: the permit belongs to another workspace", ws, store.ErrFenced)
	}
	if mr.Tree == headRoot {
		return w.Head, nil, nil // already published (a recovery replaying a capture that landed)
	}
	fresh := storeConflicts(mr.Conflicts)
	fromHead, err := m.conflictsOf(w.Head)
	if err != nil {
		return store.ID{}, nil, err
	}
	fromPinned, err := m.conflictsOf(pinned)
	if err != nil {
		return store.ID{}, nil, err
	}
	conflicts := unionConflicts(fresh, fromHead, fromPinned)
	merged := mr.Tree
	if merged.IsZero() {
		merged = store.EmptyTreeID()
	}
	headLinks, err := m.linksOf(w.Head)
	if err != nil {
		return store.ID{}, nil, err
	}
	mergedLinks, err := m.fitLinks(merged, store.MergeLinks(pinnedLinks, links, headLinks))
	if err != nil {
		return store.ID{}, nil, fmt.Errorf("merge capture of %s with its moved head: %w", ws, err)
	}
	gen, _, err := m.st.PublishGeneration(&store.Generation{Root: merged, Parents: []store.ID{w.Head, pinned}, Workspace: ws, Kind: store.GenCapture, Operation: op, Time: m.now(), Conflicts: conflicts, Links: mergedLinks},
		ws, w.Head, store.HeadEntry{Base: w.Base, Kind: store.GenCapture, Operation: op, Time: m.now()}, permit)
	if err != nil {
		return store.ID{}, nil, fmt.Errorf("publish capture of %s: %w", ws, err)
	}
	m.headChanged(ws)
	return gen, infosOf(fresh), nil
}

// IsFenced reports whether err means a publication permit was fenced.
func IsFenced(err error) bool { return errors.Is(err, store.ErrFenced) }
