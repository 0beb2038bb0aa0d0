package rebase

import (
	"fmt"
	"sort"

	"github.com/acyclicfs/acyclicfs/store"
)

// Merge3 merges the root trees ours and theirs against their common
// ancestor base (a zero ID is the empty tree) and, when no conflict is left
// unresolved, writes the merged objects and returns the merged root.
//
// Per path: unchanged on one side (same kind and ID as base; mtime is
// ignored) takes the other side; the same change on both takes ours'
// entry; two edits of a regular text file merge line by line (MergeText)
// with the exec bit merged separately; directories recurse; anything else
// is a Conflict. A subtree with the same ID on two sides is never read, so
// the work is proportional to the changed paths, not the tree.
//
// Two edits of a regular file follow the file's .gitattributes "merge"
// attribute with git's meaning (attrs.go says which files are read):
// unset, "merge" or "merge=text" merge by lines; "-merge" (and the binary
// macro, and "merge=binary") never merge: a content conflict; "merge=union"
// merges by lines taking both sides of a conflicting region (MergeUnion);
// "merge=NAME" goes to Options.Driver, falling back as git does to the
// built-in of that name or the line merge. Both-added files follow it too
// (against an empty base).
//
// With unresolved conflicts Result.Tree is zero and nothing is written: a
// conflicted rebase changes nothing. All conflicts are still collected (up
// to Limits.MaxConflicts).
//
// Entries built by the merge (a merged text file or directory) carry the
// later of ours' and theirs' mtimes.
func Merge3(r TreeReader, w TreeWriter, base, ours, theirs store.ID, opt Options) (Result, error) {
	switch {
	case ours == theirs, base == theirs:
		return Result{Tree: ours}, nil
	case base == ours:
		return Result{Tree: theirs}, nil
	}
	m := &merger{
		r:       r,
		opt:     opt,
		lim:     opt.Limits.WithDefaults(),
		written: store.IDSet{},
		attrs:   newAttrReader(r, ours, theirs),
	}
	root, _, err := m.mergeDir("", base, ours, theirs)
	if err != nil {
		return Result{}, err
	}
	sortConflicts(m.conflicts)
	sortConflicts(m.resolved)
	res := Result{Conflicts: m.conflicts, Resolved: m.resolved, Changed: m.changed}
	if m.conflicts != nil && !opt.KeepConflicts {
		return res, nil
	}
	if err := m.flush(w); err != nil {
		return Result{}, err
	}
	res.Tree = root
	return res, nil
}

func sortConflicts(cs []Conflict) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].Path < cs[j].Path })
}

// pendingObj is an object the merge will write if it ends without
// unresolved conflicts. Exactly one of blob and tree is set.
type pendingObj struct {
	id   store.ID
	blob []byte
	tree *store.Tree
}

type merger struct {
	r         TreeReader
	opt       Options
	lim       Limits
	changed   int
	nconflict int // resolved + unresolved, checked against MaxConflicts
	conflicts []Conflict
	resolved  []Conflict
	// pending holds new objects in dependency order (a tree after its
	// children); it stops growing once an unresolved conflict makes the
	// result moot.
	pending []pendingObj
	written store.IDSet // IDs already in pending
	attrs   *attrReader // .gitattributes, read lazily
}

// voided reports whether an unresolved conflict has made the merge's
// objects moot.
func (m *merger) voided() bool { return m.conflicts != nil && !m.opt.KeepConflicts }

func (m *merger) queueBlob(b []byte) store.ID {
	id := store.BlobID(b)
	if !m.voided() && !m.written.Has(id) {
		m.written.Add(id)
		m.pending = append(m.pending, pendingObj{id: id, blob: b})
	}
	return id
}

func (m *merger) queueTree(t *store.Tree, path string) (store.ID, error) {
	enc, err := t.Encode()
	if err != nil {
		return store.ID{}, fmt.Errorf("rebase: encode merged tree %q: %w", path, err)
	}
	id := store.TreeID(enc)
	if !m.voided() && !m.written.Has(id) {
		m.written.Add(id)
		m.pending = append(m.pending, pendingObj{id: id, tree: t})
	}
	return id, nil
}

func (m *merger) flush(w TreeWriter) error {
	for _, p := range m.pending {
		var got store.ID
		var err error
		what := "blob"
		if p.tree != nil {
			what = "tree"
			got, err = w.PutTree(p.tree)
		} else {
			got, err = w.WriteBlobBytes(p.blob)
		}
		if err != nil {
			return fmt.Errorf("rebase: write merged %s %s: %w", what, p.id.Short(), err)
		}
		if got != p.id {
			return fmt.Errorf("%w: merged %s %s stored as %s", ErrIDMismatch, what, p.id.Short(), got.Short())
		}
	}
	return nil
}

func (m *merger) loadTree(path string, id store.ID) (*store.Tree, error) {
	if id.IsZero() {
		return &store.Tree{}, nil
	}
	t, err := m.r.GetTree(id)
	if err != nil {
		return nil, fmt.Errorf("rebase: read tree %s at %q: %w", id.Short(), displayPath(path), err)
	}
	return t, nil
}

func displayPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// mergeDir merges three directories (zero ID = empty or absent) and returns
// the merged tree's ID and entry count. The tree is queued for writing.
func (m *merger) mergeDir(path string, b, o, t store.ID) (store.ID, int, error) {
	bt, err := m.loadTree(path, b)
	if err != nil {
		return store.ID{}, 0, err
	}
	ot, err := m.loadTree(path, o)
	if err != nil {
		return store.ID{}, 0, err
	}
	tt, err := m.loadTree(path, t)
	if err != nil {
		return store.ID{}, 0, err
	}
	m.attrs.enter(path, ot, tt)
	defer m.attrs.leave(path)
	out := &store.Tree{Entries: make([]store.Entry, 0, max(len(ot.Entries), len(tt.Entries)))}
	err = ZipEntries(bt, ot, tt, func(name string, bp, op, tp *store.Entry) error {
		e, err := m.mergeEntry(joinPath(path, name), bp, op, tp)
		if err != nil {
			return err
		}
		if e != nil {
			e.Name = name
			out.Entries = append(out.Entries, *e)
		}
		return nil
	})
	if err != nil {
		return store.ID{}, 0, err
	}
	id, err := m.queueTree(out, path)
	return id, len(out.Entries), err
}

// ZipEntries calls fn once per name of the three trees (any may be nil),
// in name order, with each tree's entry of that name (nil where it has
// none), and stops at fn's first error.
func ZipEntries(b, o, t *store.Tree, fn func(name string, b, o, t *store.Entry) error) error {
	var be, oe, te []store.Entry
	if b != nil {
		be = b.Entries
	}
	if o != nil {
		oe = o.Entries
	}
	if t != nil {
		te = t.Entries
	}
	for len(be) > 0 || len(oe) > 0 || len(te) > 0 {
		// Smallest name among the three heads; entries are sorted.
		name, first := "", true
		for _, es := range [][]store.Entry{be, oe, te} {
			if len(es) > 0 && (first || es[0].Name < name) {
				name, first = es[0].Name, false
			}
		}
		var bp, op, tp *store.Entry
		if len(be) > 0 && be[0].Name == name {
			bp, be = &be[0], be[1:]
		}
		if len(oe) > 0 && oe[0].Name == name {
			op, oe = &oe[0], oe[1:]
		}
		if len(te) > 0 && te[0].Name == name {
			tp, te = &te[0], te[1:]
		}
		if err := fn(name, bp, op, tp); err != nil {
			return err
		}
	}
	return nil
}

// SameContent reports whether two optional entries are the same content:
// both absent, or the same kind, mode and ID — and for special files (no
// content, zero ID) the same device number (store.SameMeta). Names, mtimes
// and file sizes are not compared; a mode-only change is a change.
func SameContent(a, b *store.Entry) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return store.SameMeta(a, b)
}

// mergePerm merges the permission bits of three versions of a path as git
// merges a file's mode: a side that kept base's takes the other's; both
// changed them alike, that; both changed them differently, ours — and ok
// is false (a mode conflict for a regular file; a directory or special
// file keeps ours without a conflict, so that its subtree still merges).
func mergePerm(b, o, t *store.Entry) (perm uint32, ok bool) {
	op, tp := o.Perm(), t.Perm()
	switch {
	case op == tp:
		return op, true
	case b == nil:
		return op, false
	case op == b.Perm():
		return tp, true
	case tp == b.Perm():
		return op, true
	}
	return op, false
}

// category groups kinds whose changes can merge: regular files (plain or
// exec), symlinks, directories.
func category(k store.Kind) store.Kind {
	if k == store.KindExec {
		return store.KindFile
	}
	return k
}

func clone(e *store.Entry) *store.Entry {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

func (m *merger) mergeEntry(path string, b, o, t *store.Entry) (*store.Entry, error) {
	if SameContent(o, t) && SameContent(b, o) {
		return clone(o), nil
	}
	m.changed++
	if m.changed > m.lim.MaxChanges {
		return nil, fmt.Errorf("%w: more than %d changed paths (at %q)", ErrLimit, m.lim.MaxChanges, path)
	}
	switch {
	case SameContent(o, t):
		return clone(o), nil
	case SameContent(b, o):
		return clone(t), nil
	case SameContent(b, t):
		return clone(o), nil
	}
	return m.bothChanged(path, b, o, t)
}

// bothChanged handles a path both sides changed, differently.
func (m *merger) bothChanged(path string, b, o, t *store.Entry) (*store.Entry, error) {
	if m.opt.Subtree != nil && o != nil && t != nil && o.Kind == store.KindDir && t.Kind == store.KindDir &&
		(b == nil || b.Kind == store.KindDir) {
		e, cs, ok, err := m.opt.Subtree.MergeSubtree(path, clone(b), clone(o), clone(t))
		if err != nil {
			return nil, fmt.Errorf("rebase: merge %q: %w", path, err)
		}
		if ok {
			for _, c := range cs {
				if _, err := m.conflict(c, nil, 0); err != nil {
					return nil, err
				}
			}
			return clone(e), nil
		}
	}
	c := Conflict{Path: path, Base: clone(b), Ours: clone(o), Theirs: clone(t)}
	switch {
	case o == nil || t == nil:
		// b != nil here: with b absent, an absent side would equal it.
		live := o
		if live == nil {
			live = t
		}
		if b.Kind == store.KindDir && live.Kind == store.KindDir {
			// Deleted dir vs edited dir: merge inside so only the paths
			// edited under it conflict; the dir survives only if something
			// is left in it.
			var oid, tid store.ID
			if o != nil {
				oid = o.ID
			}
			if t != nil {
				tid = t.ID
			}
			id, n, err := m.mergeDir(path, b.ID, oid, tid)
			if err != nil || n == 0 {
				return nil, err
			}
			e := clone(live)
			e.ID = id
			return e, nil
		}
		c.Kind = ConflictModifyDelete
		return m.conflict(c, nil, 0)
	case b == nil || category(b.Kind) != category(o.Kind) && category(o.Kind) == category(t.Kind):
		// Both added (or both turned base into the same other type): merge
		// as an add/add with no base.
		return m.bothAdded(c, o, t)
	case category(o.Kind) != category(t.Kind):
		// A directory whose tree ID changed only through mtimes below it
		// is unchanged: the other side's new type wins.
		for _, side := range []struct{ dir, other *store.Entry }{{o, t}, {t, o}} {
			if b.Kind == store.KindDir && side.dir.Kind == store.KindDir {
				eq, err := m.sameContent(path, b.ID, side.dir.ID)
				if err != nil || eq {
					return clone(side.other), err
				}
			}
		}
		c.Kind = ConflictType
		return m.conflict(c, nil, 0)
	case o.Kind == store.KindDir:
		return m.mergeSubdir(path, b, o, t)
	case o.Kind.IsSpecial() && o.Kind == t.Kind && o.Size == t.Size:
		// The same special file on both sides but for its mode.
		e := clone(o)
		perm, _ := mergePerm(b, o, t)
		e.SetPerm(perm)
		e.Mtime = max(o.Mtime, t.Mtime)
		return e, nil
	case o.Kind == store.KindSymlink, o.Kind.IsSpecial():
		// A special file has no content to merge: two different device
		// numbers conflict like two symlink targets.
		c.Kind = ConflictContent
		return m.conflict(c, nil, 0)
	}
	return m.mergeRegular(c, b, o, t)
}

func (m *merger) mergeSubdir(path string, b, o, t *store.Entry) (*store.Entry, error) {
	var bid store.ID
	if b != nil {
		bid = b.ID
	}
	id, _, err := m.mergeDir(path, bid, o.ID, t.ID)
	if err != nil {
		return nil, err
	}
	e := clone(o)
	e.ID = id
	e.Mtime = max(o.Mtime, t.Mtime)
	perm, _ := mergePerm(b, o, t) // both changed: ours (mergePerm)
	e.SetPerm(perm)
	return e, nil
}

func (m *merger) bothAdded(c Conflict, o, t *store.Entry) (*store.Entry, error) {
	switch {
	case category(o.Kind) != category(t.Kind):
		c.Kind = ConflictType
		return m.conflict(c, nil, 0)
	case o.Kind == store.KindDir:
		return m.mergeSubdir(c.Path, nil, o, t)
	case o.Kind == store.KindSymlink, o.Kind.IsSpecial():
		c.Kind = ConflictAddAdd
		return m.conflict(c, nil, 0)
	case o.ID == t.ID:
		// Same content, different modes (SameContent was false).
		c.Kind = ConflictMode
		return m.conflict(c, nil, 0)
	}
	c.Kind = ConflictAddAdd
	mode, name, err := m.contentMode(c.Path)
	if err != nil {
		return nil, err
	}
	if mode != modeText {
		// merge=union and drivers can merge an add/add (against an empty
		// base); -merge never reads the content.
		merged, clean, err := m.mergeContent(c.Path, mode, name, nil, o, t)
		if err != nil {
			return nil, err
		}
		if clean && o.Kind == t.Kind {
			e := clone(o)
			e.ID = m.queueBlob(merged)
			e.Size = int64(len(merged))
			e.Mtime = max(o.Mtime, t.Mtime)
			return e, nil
		}
		return m.conflict(c, merged, o.Perm())
	}
	var markers []byte
	if m.opt.Markers && m.opt.Prefer == PreferNone {
		_, oc, tc, ok, err := m.readSides(c.Path, nil, o, t)
		if err != nil {
			return nil, err
		}
		if ok {
			markers, _ = MergeText(nil, oc, tc)
		}
	}
	return m.conflict(c, markers, o.Perm())
}

// mergeRegular merges two edits of a regular file: the mode (permission
// bits, exec bit included) 3-way as a whole (mergePerm; two different
// changes are a mode conflict), the content 3-way and, if both changed
// it, line by line. A content conflict is reported as such whatever the
// modes; clean content with conflicting modes is a mode conflict (ours
// stands in; resolved with Options.Markers, the merged content with ours'
// mode).
func (m *merger) mergeRegular(c Conflict, b, o, t *store.Entry) (*store.Entry, error) {
	perm, permOK := mergePerm(b, o, t)
	e := clone(o)
	e.SetPerm(perm)
	e.Mtime = max(o.Mtime, t.Mtime)
	switch {
	case o.ID == b.ID:
		e.ID, e.Size = t.ID, t.Size
		return m.permConflict(c, e, permOK)
	case t.ID == b.ID, o.ID == t.ID:
		return m.permConflict(c, e, permOK)
	}
	mode, name, err := m.contentMode(c.Path)
	if err != nil {
		return nil, err
	}
	merged, clean, err := m.mergeContent(c.Path, mode, name, b, o, t)
	if err != nil {
		return nil, err
	}
	c.Kind = ConflictContent
	if merged == nil {
		return m.conflict(c, nil, perm)
	}
	if !clean {
		return m.conflict(c, merged, perm)
	}
	e.ID = m.queueBlob(merged)
	e.Size = int64(len(merged))
	return m.permConflict(c, e, permOK)
}

// permConflict returns the merged entry e of a regular file, or, when
// both sides changed its mode differently (!ok), records a mode conflict
// for which e (the merged content with ours' mode) stands in.
func (m *merger) permConflict(c Conflict, e *store.Entry, ok bool) (*store.Entry, error) {
	if ok {
		return e, nil
	}
	c.Kind = ConflictMode
	got, err := m.conflict(c, nil, 0)
	if err != nil || !m.opt.Markers || m.opt.Prefer != PreferNone {
		return got, err // ours stands in, as at every conflict
	}
	return e, nil // resolved with markers: the merged content, ours' mode
}

// readSides reads the blobs of a text merge. ok is false when any side is
// too large or binary, which makes the path unmergeable by lines.
func (m *merger) readSides(path string, b, o, t *store.Entry) (bc, oc, tc []byte, ok bool, err error) {
	bc, oc, tc, ok, err = m.readRaw(path, b, o, t)
	if !ok || err != nil || IsBinary(bc) || IsBinary(oc) || IsBinary(tc) {
		return nil, nil, nil, false, err
	}
	return bc, oc, tc, true, nil
}

// conflict records c and resolves it when Options say so. markers is the
// diff3 text for a text conflict (nil otherwise) and perm the mode a
// marker blob gets (a regular file's; its kind follows).
func (m *merger) conflict(c Conflict, markers []byte, perm uint32) (*store.Entry, error) {
	m.nconflict++
	if m.nconflict > m.lim.MaxConflicts {
		return nil, fmt.Errorf("%w: more than %d conflicts (at %q)", ErrLimit, m.lim.MaxConflicts, c.Path)
	}
	switch {
	case m.opt.Prefer == PreferOurs:
		m.resolved = append(m.resolved, c)
		return clone(c.Ours), nil
	case m.opt.Prefer == PreferTheirs:
		m.resolved = append(m.resolved, c)
		return clone(c.Theirs), nil
	case !m.opt.Markers:
		m.conflicts = append(m.conflicts, c)
		if m.voided() {
			m.pending = nil // nothing will be written; free it
		}
		return clone(c.Ours), nil
	}
	m.resolved = append(m.resolved, c)
	switch {
	case markers != nil:
		e := clone(c.Ours)
		e.SetPerm(perm)
		e.ID = m.queueBlob(markers)
		e.Size = int64(len(markers))
		if c.Theirs != nil {
			e.Mtime = max(e.Mtime, c.Theirs.Mtime)
		}
		return e, nil
	case c.Kind == ConflictModifyDelete && c.Ours == nil:
		return clone(c.Theirs), nil
	}
	return clone(c.Ours), nil
}

// sameContent reports whether two directories hold the same names, kinds
// and content, ignoring mtimes. It is used only where a directory would
// otherwise conflict, so its cost (the subtrees that differ) is paid only
// then.
func (m *merger) sameContent(path string, a, b store.ID) (bool, error) {
	if a == b {
		return true, nil
	}
	at, err := m.loadTree(path, a)
	if err != nil {
		return false, err
	}
	bt, err := m.loadTree(path, b)
	if err != nil {
		return false, err
	}
	if len(at.Entries) != len(bt.Entries) {
		return false, nil
	}
	for i := range at.Entries {
		x, y := &at.Entries[i], &bt.Entries[i]
		if x.Name != y.Name || x.Kind != y.Kind || x.Perm() != y.Perm() {
			return false, nil
		}
		if x.Kind != store.KindDir {
			if !SameContent(x, y) {
				return false, nil
			}
			continue
		}
		eq, err := m.sameContent(joinPath(path, x.Name), x.ID, y.ID)
		if err != nil || !eq {
			return false, err
		}
	}
	return true, nil
}
