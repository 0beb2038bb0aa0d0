package workspace

import (
	"context"
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
)

// Create makes a new root workspace, empty or importing fromDir. A
// cancelled ctx stops the import between files and creates nothing.
func (m *Manager) Create(ctx context.Context, name, fromDir string) (store.ID, ImportStats, error) {
	var stats ImportStats
	if err := ValidateName(name); err != nil {
		return store.ID{}, stats, err
	}
	if _, err := m.st.GetWorkspace(name); err == nil {
		return store.ID{}, stats, fmt.Errorf("%w: %q", ErrExists, name)
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.ID{}, stats, err
	}
	release := m.st.HoldGC()
	defer release()
	root := store.EmptyTreeID()
	var links [][]string
	if fromDir != "" {
		var err error
		root, links, stats, err = m.importDir(ctx, fromDir, store.ID{})
		if err != nil {
			return store.ID{}, stats, err
		}
	} else if _, err := m.st.PutTree(&store.Tree{}); err != nil {
		return store.ID{}, stats, fmt.Errorf("store empty tree: %w", err)
	}
	op := newOperationID()
	gen, err := m.st.PutGeneration(&store.Generation{Root: root, Workspace: name, Kind: store.GenCreate, Operation: op, Time: m.now(), Links: links})
	if err != nil {
		return store.ID{}, stats, fmt.Errorf("store generation: %w", err)
	}
	_, err = m.st.CreateWorkspace(store.Workspace{Name: name, Created: m.now()},
		store.HeadEntry{Gen: gen, Kind: store.GenCreate, Operation: op, Time: m.now()})
	if errors.Is(err, store.ErrExists) {
		return store.ID{}, stats, fmt.Errorf("%w: %q", ErrExists, name)
	}
	if err != nil {
		return store.ID{}, stats, fmt.Errorf("create workspace %q: %w", name, err)
	}
	return gen, stats, nil
}

// Fork makes child a new workspace whose head and base are parent's head
// (or at, which must be in parent's history). O(1): no tree is copied.
func (m *Manager) Fork(parent, child string, at string) (store.ID, error) {
	if err := ValidateName(child); err != nil {
		return store.ID{}, err
	}
	p, err := m.Get(parent)
	if err != nil {
		return store.ID{}, err
	}
	gen := p.Head
	if at != "" {
		gen, err = m.ResolveGeneration(at)
		if err != nil {
			return store.ID{}, err
		}
		if ok, err := m.inHistory(parent, gen); err != nil {
			return store.ID{}, err
		} else if !ok {
			return store.ID{}, fmt.Errorf("%w: generation %s is not in %s's history", ErrInvalidInput, gen.Short(), parent)
		}
	}
	_, err = m.st.CreateWorkspace(store.Workspace{Name: child, Parent: parent, Created: m.now()},
		store.HeadEntry{Gen: gen, Base: gen, Kind: store.GenCreate, Operation: "fork " + parent, Time: m.now()})
	if errors.Is(err, store.ErrExists) {
		return store.ID{}, fmt.Errorf("%w: %q", ErrExists, child)
	}
	if err != nil {
		return store.ID{}, fmt.Errorf("fork %s into %s: %w", parent, child, err)
	}
	return gen, nil
}

// Commit snapshots dir as name's next generation. Files whose size and
// mtime match the current head are not re-read. A cancelled ctx stops the
// import between files and appends nothing.
func (m *Manager) Commit(ctx context.Context, name, dir string) (store.ID, ImportStats, error) {
	var stats ImportStats
	w, err := m.Get(name)
	if err != nil {
		return store.ID{}, stats, err
	}
	if mp, ok, err := m.mountedAt(name); err != nil {
		return store.ID{}, stats, err
	} else if ok {
		return store.ID{}, stats, fmt.Errorf("%w: %s is mounted at %s", ErrBusy, name, mp)
	}
	prevRoot, err := m.rootOf(w.Head)
	if err != nil {
		return store.ID{}, stats, err
	}
	release := m.st.HoldGC()
	defer release()
	root, links, stats, err := m.importDir(ctx, dir, prevRoot)
	if err != nil {
		return store.ID{}, stats, err
	}
	var pr *store.PreparedResolve
	if m.ip.derivesFromInPlace(name) {
		if pr, err = m.ip.preparePreserve(prevRoot, root, nil, nil); err != nil {
			return store.ID{}, stats, fmt.Errorf("preserve the base of %s's commit: %w", name, err)
		}
	}
	gen, err := m.publish(w, root, links, store.GenCommit, newOperationID(), nil, pr)
	return gen, stats, err
}

// publish appends a generation with the given root and link groups on top
// of w's head. When both equal the head's nothing new is appended.
//
// with are prepared writes (a capture's trees, a preservation of what root
// replaces: preparePreserve; nil ones are skipped); they are written in the
// generation's transaction, or alone when nothing is appended.
func (m *Manager) publish(w store.Workspace, root store.ID, links [][]string, kind store.GenKind, op string, permit *store.Permit, with ...*store.PreparedResolve) (store.ID, error) {
	if permit != nil && !window.PermitMatchesWorkspace(*permit, w.Name) {
		return store.ID{}, fmt.Errorf("publish %s: %w: the permit belongs to another workspace", w.Name, store.ErrFenced)
	}
	head := &store.Generation{Root: store.EmptyTreeID()}
	if !w.Head.IsZero() {
		var err error
		if head, err = m.st.GetGeneration(w.Head); err != nil {
			return store.ID{}, fmt.Errorf("generation %s: %w", w.Head.Short(), err)
		}
	}
	if head.Root == root && store.EqualLinks(head.Links, links) {
		for _, pr := range with {
			if err := m.st.WriteResolve(pr); err != nil {
				return store.ID{}, fmt.Errorf("publish %s: %w", w.Name, err)
			}
		}
		return w.Head, nil
	}
	// Recorded conflicts stay with the workspace's new content until a
	// resolve settles them.
	carried := head.Conflicts
	gen, _, err := m.st.PublishGeneration(&store.Generation{Root: root, Parents: []store.ID{w.Head}, Workspace: w.Name, Kind: kind, Operation: op, Time: m.now(), Conflicts: carried, Links: links},
		w.Name, w.Head, store.HeadEntry{Base: w.Base, Kind: kind, Operation: op, Time: m.now()}, permit, with...)
	if err != nil {
		return store.ID{}, fmt.Errorf("publish %s: %w", w.Name, err)
	}
	m.headChanged(w.Name)
	return gen, nil
}

// Log returns name's head history, newest first (n <= 0: all).
func (m *Manager) Log(name string, n int) ([]store.HeadEntry, error) {
	if _, err := m.Get(name); err != nil {
		return nil, err
	}
	return m.st.HeadLog(name, n)
}

// Undo makes name's previous head current again, as a new history entry.
// Repeated undos walk further back: an undo entry records which entry it
// restored, and the next undo starts below that one.
func (m *Manager) Undo(name string) (store.ID, error) {
	w, err := m.Get(name)
	if err != nil {
		return store.ID{}, err
	}
	if mp, ok, err := m.mountedAt(name); err != nil {
		return store.ID{}, err
	} else if ok {
		return store.ID{}, fmt.Errorf("%w: %s is mounted at %s", ErrBusy, name, mp)
	}
	log, err := m.st.HeadLog(name, 0)
	if err != nil {
		return store.ID{}, err
	}
	// Position of the entry that is "current" for undo purposes.
	cur := 0
	if len(log) > 0 && log[0].Kind == store.GenUndo {
		var restored uint64
		if _, err := fmt.Sscanf(log[0].Operation, "undo to %d", &restored); err == nil {
			for i, e := range log {
				if e.Seq == restored {
					cur = i
					break
				}
			}
		}
	}
	if cur+1 >= len(log) {
		return store.ID{}, fmt.Errorf("%w: %s", ErrNoHistory, name)
	}
	target := log[cur+1]
	_, err = m.st.CompareAndAppend(name, w.Head, store.HeadEntry{Gen: target.Gen, Base: target.Base, Kind: store.GenUndo, Operation: fmt.Sprintf("undo to %d %s", target.Seq, newOperationID()), Time: m.now()}, nil)
	if err != nil {
		return store.ID{}, fmt.Errorf("undo %s: %w", name, err)
	}
	if err := m.afterInPlaceMoved(context.Background(), name); err != nil {
		return store.ID{}, fmt.Errorf("undo %s: undone, but writing it into its directory failed: %w", name, err)
	}
	m.headChanged(name)
	return target.Gen, nil
}

// Remove deletes a workspace; with recursive, its descendants first.
// Mounted workspaces are refused.
func (m *Manager) Remove(name string, recursive bool) ([]string, error) {
	if _, err := m.Get(name); err != nil {
		return nil, err
	}
	kids, err := m.st.Children(name)
	if err != nil {
		return nil, err
	}
	if len(kids) > 0 && !recursive {
		return nil, fmt.Errorf("%w: %s has %d (%s…); use --recursive", ErrHasChildren, name, len(kids), kids[0])
	}
	// Check the whole subtree for mounts before deleting anything.
	var order []string
	var walk func(n string) error
	walk = func(n string) error {
		if mp, ok, err := m.mountedAt(n); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("%w: %s is mounted at %s; unmount it first", ErrBusy, n, mp)
		}
		ks, err := m.st.Children(n)
		if err != nil {
			return err
		}
		for _, k := range ks {
			if err := walk(k); err != nil {
				return err
			}
		}
		order = append(order, n)
		return nil
	}
	if err := walk(name); err != nil {
		return nil, err
	}
	for _, n := range order {
		if err := m.st.DeleteWorkspace(n); err != nil {
			return nil, fmt.Errorf("remove %s: %w", n, err)
		}
		_ = m.st.DeleteMeta(metaConflicts, n)
		if _, rev, found, err := m.ip.loadInPlace(n); err == nil && found {
			_ = m.cs.CompareAndDelete(familyInPlace, n, rev)
		}
		if _, rev, found, err := m.GitBinding(n); err == nil && found {
			_ = m.DeleteGitBinding(n, rev)
		}
	}
	return order, nil
}
