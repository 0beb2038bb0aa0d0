package workspace

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// Conflicts are state, not output: a merge that cannot settle a path
// still produces a generation, whose tree holds a stand-in at the path
// (ours, or conflict markers) and whose Conflicts list keeps base, ours and
// theirs. Every generation made from it (a capture, a commit, a rebase)
// carries the list until Resolve drops a path from it, and Land refuses a
// workspace whose head has conflicts its parent's head does not share.
// Ours is always the workspace's own version, theirs its parent's.

// conflictsOf returns the recorded conflicts of generation gen.
func (m *Manager) conflictsOf(gen store.ID) ([]store.Conflict, error) {
	if gen.IsZero() {
		return nil, nil
	}
	g, err := m.st.GetGeneration(gen)
	if err != nil {
		return nil, err
	}
	return g.Conflicts, nil
}

// storeConflicts converts a merge's conflicts into recorded ones.
func storeConflicts(cs []rebase.Conflict) []store.Conflict {
	out := make([]store.Conflict, 0, len(cs))
	for _, c := range cs {
		out = append(out, store.Conflict{Path: c.Path, Kind: string(c.Kind),
			Base: store.SideOf(c.Base), Ours: store.SideOf(c.Ours), Theirs: store.SideOf(c.Theirs)})
	}
	return out
}

// unionConflicts merges conflict lists; for a path in several lists the
// first list's record wins. The result is sorted by path.
func unionConflicts(lists ...[]store.Conflict) []store.Conflict {
	var out []store.Conflict
	seen := map[string]bool{}
	for _, l := range lists {
		for _, c := range l {
			if !seen[c.Path] {
				seen[c.Path] = true
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b store.Conflict) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// withTheirs returns cs with each conflict's theirs side set to what the
// parent's tree (root) now holds at its path: a carried conflict stays
// about the parent's newest version.
func (m *Manager) withTheirs(cs []store.Conflict, root store.ID) ([]store.Conflict, error) {
	out := slices.Clone(cs)
	for i := range out {
		e, err := m.entryAt(root, out[i].Path)
		if err != nil {
			return nil, err
		}
		out[i].Theirs = store.SideOf(e)
	}
	return out, nil
}

// infosOf converts recorded conflicts for output.
func infosOf(cs []store.Conflict) []ConflictInfo {
	out := make([]ConflictInfo, 0, len(cs))
	for _, c := range cs {
		out = append(out, ConflictInfo{Path: c.Path, Kind: c.Kind, Base: c.Base, Ours: c.Ours, Theirs: c.Theirs})
	}
	return out
}

// pendingConflicts returns the conflicts of w's head that landing would
// publish: all of them, except those at a path where the parent's head
// has a conflict too and w holds exactly what the parent holds there (a
// conflict w inherited from its parent and did not touch: landing it
// changes nothing at that path).
func (m *Manager) pendingConflicts(w store.Workspace) ([]store.Conflict, error) {
	cs, err := m.conflictsOf(w.Head)
	if err != nil || len(cs) == 0 || w.Parent == "" {
		return cs, err
	}
	p, err := m.st.GetWorkspace(w.Parent)
	if err != nil {
		return nil, fmt.Errorf("parent %s of %s: %w", w.Parent, w.Name, err)
	}
	theirs, err := m.conflictsOf(p.Head)
	if err != nil {
		return nil, err
	}
	var ownRoot, parentRoot store.ID
	var out []store.Conflict
	for _, c := range cs {
		if !slices.ContainsFunc(theirs, func(t store.Conflict) bool { return t.Path == c.Path }) {
			out = append(out, c)
			continue
		}
		if ownRoot.IsZero() {
			if ownRoot, err = m.rootOf(w.Head); err != nil {
				return nil, err
			}
			if parentRoot, err = m.rootOf(p.Head); err != nil {
				return nil, err
			}
		}
		mine, err := m.entryAt(ownRoot, c.Path)
		if err != nil {
			return nil, err
		}
		parents, err := m.entryAt(parentRoot, c.Path)
		if err != nil {
			return nil, err
		}
		if !rebase.SameContent(mine, parents) {
			out = append(out, c)
		}
	}
	return out, nil
}

// settleOutcome turns a rebase's result into conflicted when name's head
// holds conflicts its parent's does not share.
func (m *Manager) settleOutcome(name string, res *Result) error {
	w, err := m.st.GetWorkspace(name)
	if err != nil {
		return err
	}
	pending, err := m.pendingConflicts(w)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		res.Outcome, res.Conflicts = OutcomeConflicted, infosOf(pending)
	}
	return nil
}

// entryAt returns the entry at slash-separated p below root (nil if
// absent; the root itself for "").
func (m *Manager) entryAt(root store.ID, p string) (*store.Entry, error) {
	if p == "" {
		return &store.Entry{Kind: store.KindDir, ID: root}, nil
	}
	cur := root
	parts := strings.Split(p, "/")
	for i, name := range parts {
		t, err := m.st.GetTree(cur)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", displayDir(strings.Join(parts[:i], "/")), err)
		}
		e, ok := t.Lookup(name)
		if !ok {
			return nil, nil
		}
		if i == len(parts)-1 {
			return &e, nil
		}
		if e.Kind != store.KindDir {
			return nil, nil
		}
		cur = e.ID
	}
	return nil, nil
}

func displayDir(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// setEntries returns root with each path of edits set to its entry (nil:
// removed), creating directories on the way and replacing whatever
// non-directory stood where one is needed. Directories left empty by a
// removal stay.
func (m *Manager) setEntries(root store.ID, edits map[string]*store.Entry) (store.ID, error) {
	t, err := m.st.GetTree(root)
	if err != nil {
		return store.ID{}, err
	}
	here := map[string]*store.Entry{}
	below := map[string]map[string]*store.Entry{}
	for p, e := range edits {
		name, rest, deeper := strings.Cut(p, "/")
		if !deeper {
			here[name] = e
			continue
		}
		if below[name] == nil {
			below[name] = map[string]*store.Entry{}
		}
		below[name][rest] = e
	}
	out := &store.Tree{Entries: slices.Clone(t.Entries)}
	put := func(name string, e *store.Entry) {
		out.Entries = slices.DeleteFunc(out.Entries, func(x store.Entry) bool { return x.Name == name })
		if e != nil {
			c := *e
			c.Name = name
			out.Entries = append(out.Entries, c)
		}
	}
	for name, sub := range below {
		cur, ok := t.Lookup(name)
		dir := store.Entry{Kind: store.KindDir, ID: store.EmptyTreeID()}
		if ok && cur.Kind == store.KindDir {
			dir = cur // keeps its mtime and mode
		}
		id, err := m.setEntries(dir.ID, sub)
		if err != nil {
			return store.ID{}, err
		}
		dir.ID = id
		put(name, &dir)
	}
	for name, e := range here {
		put(name, e)
	}
	out.Sort()
	return m.st.PutTree(out)
}

// ResolveSide says which version Resolve takes.
type ResolveSide int

// Resolve sides.
const (
	// ResolveCurrent takes the path as the workspace's head holds it now.
	ResolveCurrent ResolveSide = iota
	ResolveOurs
	ResolveTheirs
	ResolveBase
)

// ResolveOptions steer Resolve.
type ResolveOptions struct {
	Side ResolveSide
	// All resolves every recorded conflict; Paths must then be empty.
	All bool
	// Force takes a current file that still holds conflict markers.
	Force bool
}

// ResolveResult is what Resolve did.
type ResolveResult struct {
	Workspace string         `json:"workspace"`
	Head      store.ID       `json:"head"`
	Resolved  []ConflictInfo `json:"resolved"`
	Remaining []ConflictInfo `json:"remaining"`
}

// Resolve settles recorded conflicts of name's head: each path takes the
// chosen side (an absent side removes it) or, with ResolveCurrent, stays as
// the head holds it — refused with ErrUnresolved while a regular file there
// still holds conflict markers, unless Force. The result is one new
// generation (kind resolve) without those conflicts. A mounted workspace
// must have been captured first (its caller makes sure no lease is open).
func (m *Manager) Resolve(name string, paths []string, opt ResolveOptions) (ResolveResult, error) {
	release := m.st.HoldGC()
	defer release()
	res := ResolveResult{Workspace: name}
	w, err := m.Get(name)
	if err != nil {
		return res, err
	}
	g, err := m.st.GetGeneration(w.Head)
	if err != nil {
		return res, err
	}
	res.Head = w.Head
	switch {
	case opt.All && len(paths) > 0:
		return res, fmt.Errorf("%w: name paths or --all, not both", ErrInvalidInput)
	case !opt.All && len(paths) == 0:
		return res, fmt.Errorf("%w: no path to resolve (name paths, or --all)", ErrInvalidInput)
	case len(g.Conflicts) == 0:
		return res, fmt.Errorf("%w: %s has no recorded conflicts", ErrNoConflicts, name)
	}
	chosen := map[string]bool{}
	if opt.All {
		for _, c := range g.Conflicts {
			chosen[c.Path] = true
		}
	}
	for _, p := range paths {
		cp, err := cleanTreePath(p)
		if err != nil {
			return res, err
		}
		if !slices.ContainsFunc(g.Conflicts, func(c store.Conflict) bool { return c.Path == cp }) {
			return res, fmt.Errorf("%w: %s is not a recorded conflict of %s", ErrNoConflicts, quoteOne(cp), name)
		}
		chosen[cp] = true
	}
	edits := map[string]*store.Entry{}
	var remaining []store.Conflict
	for _, c := range g.Conflicts {
		if !chosen[c.Path] {
			remaining = append(remaining, c)
			continue
		}
		res.Resolved = append(res.Resolved, infosOf([]store.Conflict{c})...)
		base := path.Base(c.Path)
		switch opt.Side {
		case ResolveOurs:
			edits[c.Path] = c.Ours.Entry(base)
		case ResolveTheirs:
			edits[c.Path] = c.Theirs.Entry(base)
		case ResolveBase:
			edits[c.Path] = c.Base.Entry(base)
		default:
			if opt.Force {
				continue
			}
			e, err := m.entryAt(g.Root, c.Path)
			if err != nil {
				return res, err
			}
			if marked, err := m.holdsMarkers(e); err != nil {
				return res, err
			} else if marked {
				return res, fmt.Errorf("%w: %s still holds conflict markers (edit it, take a side with --ours/--theirs/--base, or take it as it is with --force)", ErrUnresolved, quoteOne(c.Path))
			}
		}
	}
	root := g.Root
	if len(edits) > 0 {
		if root, err = m.setEntries(g.Root, edits); err != nil {
			return res, fmt.Errorf("resolve %s: %w", name, err)
		}
	}
	links, err := m.fitLinks(root, g.Links)
	if err != nil {
		return res, fmt.Errorf("resolve %s: %w", name, err)
	}
	op := "resolve " + newOperationID()
	failpoint.Hit("resolve.before-publish")
	gen, _, err := m.st.PublishGeneration(&store.Generation{Root: root, Parents: []store.ID{w.Head}, Workspace: name, Kind: store.GenResolve, Operation: op, Time: m.now(), Conflicts: remaining, Links: links},
		name, w.Head, store.HeadEntry{Base: w.Base, Kind: store.GenResolve, Operation: op, Time: m.now()}, nil)
	if err != nil {
		return res, fmt.Errorf("resolve %s: %w", name, err)
	}
	failpoint.Hit("resolve.after-publish")
	res.Head = gen
	res.Remaining = infosOf(remaining)
	m.headChanged(name)
	if err := m.afterInPlaceMoved(context.Background(), name); err != nil {
		return res, fmt.Errorf("resolve %s: resolved, but writing it into its directory failed: %w", name, err)
	}
	return res, nil
}

// holdsMarkers reports whether e is a regular text file holding a whole
// set of conflict markers (an ours line, a separator, a theirs line, in
// that order, each at a line start).
func (m *Manager) holdsMarkers(e *store.Entry) (bool, error) {
	if e == nil || !e.Kind.IsRegular() || e.Size > m.limit.WithDefaults().MaxTextBytes {
		return false, nil
	}
	b, err := m.st.ReadBlob(e.ID)
	if err != nil {
		return false, err
	}
	return HasConflictMarkers(b), nil
}

// HasConflictMarkers reports whether b holds a line starting with
// "<<<<<<<", then one that is "=======", then one starting with ">>>>>>>"
// — the markers of a text merge (rebase.MergeText) or of git.
func HasConflictMarkers(b []byte) bool {
	if rebase.IsBinary(b) {
		return false
	}
	state := 0
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case state == 0 && bytes.HasPrefix(line, []byte("<<<<<<<")):
			state = 1
		case state == 1 && string(line) == "=======":
			state = 2
		case state == 2 && bytes.HasPrefix(line, []byte(">>>>>>>")):
			return true
		}
	}
	return false
}

// cleanTreePath turns a user's path into a tree path: slash-separated,
// relative to the workspace root, no "." or ".." elements.
func cleanTreePath(p string) (string, error) {
	c := path.Clean("/" + p)
	if p == "" || c == "/" {
		return "", fmt.Errorf("%w: %q names the workspace root, not a path in it", ErrInvalidInput, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: %q: paths are relative to the workspace root and may not hold a \"..\" element", ErrInvalidInput, p)
		}
	}
	return c[1:], nil
}

func quoteOne(p string) string { return fmt.Sprintf("%q", p) }

// ConflictSide names a side of a recorded conflict for Cat.
type ConflictSide string

// Conflict sides.
const (
	SideNone   ConflictSide = ""
	SideBase   ConflictSide = "base"
	SideOurs   ConflictSide = "ours"
	SideTheirs ConflictSide = "theirs"
)

// CatEntry returns the entry that `cat` prints: the file at p in
// generation gen (zero: name's head) or, with side, that side of name's
// recorded conflict at p.
func (m *Manager) CatEntry(name string, gen store.ID, p string, side ConflictSide) (store.Entry, error) {
	cp, err := cleanTreePath(p)
	if err != nil {
		return store.Entry{}, err
	}
	if gen.IsZero() {
		w, err := m.Get(name)
		if err != nil {
			return store.Entry{}, err
		}
		gen = w.Head
	}
	g, err := m.st.GetGeneration(gen)
	if err != nil {
		return store.Entry{}, err
	}
	var e *store.Entry
	if side != SideNone {
		i := slices.IndexFunc(g.Conflicts, func(c store.Conflict) bool { return c.Path == cp })
		if i < 0 {
			return store.Entry{}, fmt.Errorf("%w: %s is not a recorded conflict of %s", ErrNoConflicts, quoteOne(cp), name)
		}
		c := g.Conflicts[i]
		var sd *store.Side
		switch side {
		case SideBase:
			sd = c.Base
		case SideOurs:
			sd = c.Ours
		case SideTheirs:
			sd = c.Theirs
		default:
			return store.Entry{}, fmt.Errorf("%w: conflict side %q (base, ours or theirs)", ErrInvalidInput, side)
		}
		if sd == nil {
			return store.Entry{}, fmt.Errorf("%w: %s is absent on the %s side of the conflict", ErrNoSuchPath, quoteOne(cp), side)
		}
		e = sd.Entry(path.Base(cp))
	} else if e, err = m.entryAt(g.Root, cp); err != nil {
		return store.Entry{}, err
	}
	switch {
	case e == nil:
		return store.Entry{}, fmt.Errorf("%w: %s: no such file in %s", ErrNoSuchPath, quoteOne(cp), gen.Short())
	case e.Kind == store.KindDir:
		return store.Entry{}, fmt.Errorf("%w: %s is a directory", ErrNoSuchPath, quoteOne(cp))
	case e.Kind.IsSpecial():
		return store.Entry{}, fmt.Errorf("%w: %s is a %s: it has no content", ErrNoSuchPath, quoteOne(cp), e.Kind)
	}
	return *e, nil
}

// markConflicts gives each recorded text conflict of w's head whose path
// still holds ours the diff3 markers of its three sides, as one new
// generation (the conflicts stay recorded). It returns the head and the
// paths it marked.
func (m *Manager) markConflicts(w store.Workspace, permit *store.Permit) (store.ID, []ConflictInfo, error) {
	g, err := m.st.GetGeneration(w.Head)
	if err != nil {
		return w.Head, nil, err
	}
	lim := m.limit.WithDefaults()
	read := func(sd *store.Side) ([]byte, bool, error) {
		if sd == nil {
			return nil, true, nil
		}
		if !sd.Kind.IsRegular() || sd.Size > lim.MaxTextBytes {
			return nil, false, nil
		}
		b, err := m.st.ReadBlob(sd.ID)
		if err != nil || rebase.IsBinary(b) {
			return nil, false, err
		}
		return b, true, nil
	}
	edits := map[string]*store.Entry{}
	var marked []store.Conflict
	for _, c := range g.Conflicts {
		if c.Ours == nil || c.Theirs == nil {
			continue
		}
		cur, err := m.entryAt(g.Root, c.Path)
		if err != nil {
			return w.Head, nil, err
		}
		if cur == nil || !rebase.SameContent(cur, c.Ours.Entry(cur.Name)) {
			continue // edited since, or not a file: leave it as it is
		}
		var sides [3][]byte
		ok := true
		for i, sd := range c.Sides() {
			var good bool
			if sides[i], good, err = read(sd); err != nil {
				return w.Head, nil, err
			}
			ok = ok && good
		}
		if !ok {
			continue
		}
		text, clean := rebase.MergeText(sides[0], sides[1], sides[2])
		if clean {
			continue
		}
		id, err := m.st.WriteBlobBytes(text)
		if err != nil {
			return w.Head, nil, err
		}
		e := *cur
		e.ID, e.Size = id, int64(len(text))
		edits[c.Path] = &e
		marked = append(marked, c)
	}
	if len(edits) == 0 {
		return w.Head, nil, nil
	}
	root, err := m.setEntries(g.Root, edits)
	if err != nil {
		return w.Head, nil, err
	}
	links, err := m.fitLinks(root, g.Links)
	if err != nil {
		return w.Head, nil, err
	}
	op := "markers " + newOperationID()
	gen, _, err := m.st.PublishGeneration(&store.Generation{Root: root, Parents: []store.ID{w.Head}, Workspace: w.Name, Kind: store.GenRebase, Operation: op, Time: m.now(), Conflicts: g.Conflicts, Links: links},
		w.Name, w.Head, store.HeadEntry{Base: w.Base, Kind: store.GenRebase, Operation: op, Time: m.now()}, permit)
	if err != nil {
		return w.Head, nil, fmt.Errorf("write conflict markers into %s: %w", w.Name, err)
	}
	m.headChanged(w.Name)
	return gen, infosOf(marked), nil
}
