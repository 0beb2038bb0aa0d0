package workspace

import (
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// ConflictLostUnderneath is the conflict kind of a path whose content in
// the workspace was DIR's file by reference (never read, never changed in
// the workspace: e.g. renamed under the mount) when another program
// changed or removed that file underneath the mount. Those bytes exist
// nowhere any more; the path takes what DIR holds in their place
// (Manager.successor).
const ConflictLostUnderneath = "lost-underneath"

// dropLostContent gives DIR's side to every entry of an in-place
// workspace's head whose content is a base reference DIR no longer holds:
// the entry becomes what DIR holds in its place (successor; nothing if
// DIR has nothing there), published as an external generation on top of
// the head. Without this a head naming lost bytes could never be
// materialized, and every reconcile — every unmount — would fail.
//
// It compares the head with the generation DIR holds and looks only where
// they differ (an entry both name holds what DIR holds, or detection takes
// DIR's change in). It returns the paths it changed, as conflicts.
func (m *inPlaces) dropLostContent(name string) ([]ConflictInfo, error) {
	w, st, _, err := m.inPlace(name)
	if err != nil {
		return nil, err
	}
	mroot, err := m.rootOf(st.Materialized)
	if err != nil {
		return nil, err
	}
	hroot, err := m.rootOf(w.Head)
	if err != nil {
		return nil, err
	}
	bd, release, err := m.st.OpenBase(st.Base)
	if err != nil {
		return nil, err
	}
	defer release()
	d := detector{m: m, st: st, dir: bd, stats: &detectStats{}}
	var lost []ConflictInfo
	p := m.newPreserver()
	defer p.batch.Abort()
	root, changed, err := m.replaceLost(d, p, "", mroot, hroot, &lost)
	if err != nil || !changed {
		return nil, err
	}
	if err := p.batch.Commit(); err != nil {
		return nil, err
	}
	if pr, err := m.st.PrepareResolve(p.trees, p.res); err != nil {
		return nil, err
	} else if err := m.st.WriteResolve(pr); err != nil {
		return nil, err
	}
	links, err := m.linksOf(w.Head)
	if err != nil {
		return nil, err
	}
	if links, err = m.fitLinks(root, links); err != nil {
		return nil, err
	}
	op := "external " + newOperationID()
	gen, err := m.st.PutGeneration(&store.Generation{Root: root, Parents: []store.ID{w.Head}, Workspace: name, Kind: store.GenExternal, Operation: op, Time: m.now(), Links: links})
	if err != nil {
		return nil, fmt.Errorf("store generation: %w", err)
	}
	if _, err := m.st.CompareAndAppend(name, w.Head, store.HeadEntry{Gen: gen, Base: w.Base, Kind: store.GenExternal, Operation: op, Time: m.now()}, nil); err != nil {
		return nil, fmt.Errorf("publish what %s holds in place of lost content: %w", st.Dir, err)
	}
	return lost, nil
}

// replaceLost rewrites the head tree hid at path p (mid: the tree DIR
// holds there, zero if none) with every lost entry replaced by DIR's. A
// successor taken from another path is kept by pres (its bytes, its
// listings): it names that path, and the materialization copies it.
func (m *inPlaces) replaceLost(d detector, pres *preserver, p string, mid, hid store.ID, lost *[]ConflictInfo) (store.ID, bool, error) {
	ht, err := m.st.GetTree(hid)
	if err != nil {
		return store.ID{}, false, err
	}
	var mt *store.Tree
	if !mid.IsZero() {
		if mt, err = m.st.GetTree(mid); err != nil && !errors.Is(err, store.ErrBaseChanged) {
			return store.ID{}, false, err
		}
	}
	return m.rewriteTree(hid, ht, func(e store.Entry) (*store.Entry, bool, error) {
		var me store.Entry
		inM := false
		if mt != nil {
			me, inM = mt.Lookup(e.Name)
		}
		if inM && rebase.SameContent(&me, &e) {
			return &e, false, nil
		}
		ep := joinRel(p, e.Name)
		ok, err := m.holdsContent(e)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", ep, err)
		}
		if !ok {
			cur, moved, err := m.successor(d, ep, e)
			if err == nil && moved {
				if cur.Kind == store.KindDir {
					err = pres.tree(cur.ID)
				} else {
					err = pres.file(cur)
				}
			}
			if err != nil {
				return nil, false, fmt.Errorf("%s: %w", ep, err)
			}
			*lost = append(*lost, ConflictInfo{Path: ep, Kind: ConflictLostUnderneath})
			return cur, true, nil
		}
		if e.Kind != store.KindDir {
			return &e, false, nil
		}
		var sub store.ID
		if inM && me.Kind == store.KindDir {
			sub = me.ID
		}
		id, ch, err := m.replaceLost(d, pres, ep, sub, e.ID, lost)
		e.ID = id
		return &e, ch, err
	})
}

// rewriteTree stores tree t (id) with each entry replaced by what f
// returns for it (nil: left out); changed reports whether f changed any,
// and when none did the result is id itself, nothing stored.
func (m *inPlaces) rewriteTree(id store.ID, t *store.Tree, f func(store.Entry) (_ *store.Entry, changed bool, _ error)) (store.ID, bool, error) {
	out := &store.Tree{Entries: make([]store.Entry, 0, len(t.Entries))}
	changed := false
	for _, e := range t.Entries {
		ne, ch, err := f(e)
		if err != nil {
			return store.ID{}, false, err
		}
		if ne != nil {
			out.Entries = append(out.Entries, *ne)
		}
		changed = changed || ch
	}
	if !changed {
		return id, false, nil
	}
	out.Sort() // replacements keep their names: this only guards the encoding
	nid, err := m.st.PutTree(out)
	return nid, true, err
}

// successor is what DIR holds now in place of the lost entry e at path p:
// what the reference's own path holds, when it is of e's kind (the file a
// program rewrote, or a directory it added names to: a rename under the
// mount then carries the program's change, as a merge would); else what p
// holds (nil: nothing). moved reports the former: the entry names another
// path than p.
func (m *inPlaces) successor(d detector, p string, e store.Entry) (_ *store.Entry, moved bool, _ error) {
	r, _, err := m.st.BaseRefOf(e.ID)
	if err != nil {
		return nil, false, err
	}
	cur, err := d.current(r.Path, e.Name)
	if err != nil || cur != nil && (cur.Kind == e.Kind || cur.Kind.IsRegular() && e.Kind.IsRegular()) {
		return cur, r.Path != p, err
	}
	cur, err = d.current(p, e.Name)
	return cur, false, err
}

// holdsContent reports whether e's content can still be read: anything
// but an unresolved base reference whose path in DIR changed.
func (m *inPlaces) holdsContent(e store.Entry) (bool, error) {
	if _, isRef, err := m.st.BaseRefOf(e.ID); err != nil || !isRef {
		return true, err
	}
	if _, ok, err := m.st.Resolution(e.ID); err != nil || ok {
		return true, err
	}
	if e.Kind == store.KindDir {
		_, err := m.st.GetTree(e.ID)
		if errors.Is(err, store.ErrBaseChanged) {
			return false, nil
		}
		return err == nil, err
	}
	return m.st.HasBlob(e.ID)
}

// baseWithoutLost returns the merge base b without what is lost in it,
// wherever a 3-way merge with ours o and theirs t reads it (both sides
// differ from the base there): a directory whose listing is lost (an
// unresolved reference DIR changed before anyone listed it) becomes the
// empty tree, and a file whose content is lost (DIR changed it before
// anyone kept it: e.g. a program rewrote it underneath while the view
// rewrote it too) is left out. Merged against nothing, what either side
// holds there is kept (identical entries once; different ones as add/add
// conflicts, both versions kept): a lost base can make nothing disappear.
func (m *inPlaces) baseWithoutLost(b, o, t store.ID) (store.ID, bool, error) {
	bt, err := m.st.GetTree(b)
	if errors.Is(err, store.ErrBaseChanged) {
		return store.EmptyTreeID(), true, nil
	}
	if err != nil {
		return store.ID{}, false, err
	}
	side := func(id store.ID) (*store.Tree, error) {
		if id.IsZero() {
			return &store.Tree{}, nil
		}
		return m.st.GetTree(id)
	}
	ot, err := side(o)
	if err != nil {
		return store.ID{}, false, err
	}
	tt, err := side(t)
	if err != nil {
		return store.ID{}, false, err
	}
	return m.rewriteTree(b, bt, func(e store.Entry) (*store.Entry, bool, error) {
		oe, inO := ot.Lookup(e.Name)
		te, inT := tt.Lookup(e.Name)
		if inO && oe.ID == e.ID || inT && te.ID == e.ID {
			return &e, false, nil // one side kept it: the merge takes the other whole
		}
		if e.Kind != store.KindDir {
			ok, err := m.holdsContent(e)
			if !ok || err != nil {
				return nil, !ok, err
			}
			return &e, false, nil
		}
		var sub [2]store.ID
		for j, x := range []struct {
			e  store.Entry
			in bool
		}{{oe, inO}, {te, inT}} {
			if x.in && x.e.Kind == store.KindDir {
				sub[j] = x.e.ID
			}
		}
		id, ch, err := m.baseWithoutLost(e.ID, sub[0], sub[1])
		e.ID = id
		return &e, ch, err
	})
}
