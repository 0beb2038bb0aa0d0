package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/internal/fusectl"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// In-place workspaces (docs/inplace.md). The base of an in-place workspace
// is a real directory DIR, named in trees by store base references (stat
// fingerprints), so creating one reads nothing. Its state record says which
// generation DIR holds (Materialized) and, in the shadow (a store lazy
// overlay), the fingerprints of the files acyclicfs itself wrote into DIR.
const familyInPlace = "inplace"

type inPlaceState struct {
	Version int      `json:"version"`
	Dir     string   `json:"dir"`
	Base    store.ID `json:"base"`
	// Materialized is the generation whose tree DIR holds.
	Materialized store.ID `json:"materialized"`
	// Shadow is a lazy-overlay root: path → the ref ID (fingerprint) of
	// each file acyclicfs wrote into DIR, so an edit by another program to
	// such a file is detected.
	Shadow store.ID `json:"shadow,omitempty"`
}

// InPlaceInfo describes an in-place workspace for status and mount.
type InPlaceInfo struct {
	Dir          string   `json:"dir"`
	Base         store.ID `json:"base"`
	Materialized store.ID `json:"materialized"`
}

// ErrNotInPlace is returned by in-place operations on other workspaces.
var ErrNotInPlace = fmt.Errorf("%w: not an in-place workspace", ErrInvalidInput)

// CreateInPlace makes name a root workspace whose base is the directory dir,
// read lazily: nothing under dir is read or hashed here.
func (m *inPlaces) CreateInPlace(name, dir string) (store.ID, error) {
	if err := ValidateName(name); err != nil {
		return store.ID{}, err
	}
	if _, err := m.st.GetWorkspace(name); err == nil {
		return store.ID{}, fmt.Errorf("%w: %q", ErrExists, name)
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.ID{}, err
	}
	abs, err := m.inPlaceDir(dir)
	if err != nil {
		return store.ID{}, err
	}
	defer m.locks.lock(name)()
	release := m.st.HoldGC()
	defer release()
	base, root, err := m.st.CreateBase(abs)
	if err != nil {
		return store.ID{}, fmt.Errorf("create in-place base %s: %w", abs, err)
	}
	op := newOperationID()
	gen, err := m.st.PutGeneration(&store.Generation{Root: root, Workspace: name, Kind: store.GenCreate, Operation: op, Time: m.now()})
	if err != nil {
		return store.ID{}, fmt.Errorf("store generation: %w", err)
	}
	// The state record first: a crash before the workspace exists leaves a
	// record nobody names (dropped by the next create of that name).
	if err := m.putInPlace(name, 0, inPlaceState{Version: 1, Dir: abs, Base: base, Materialized: gen}, true); err != nil {
		return store.ID{}, err
	}
	_, err = m.st.CreateWorkspace(store.Workspace{Name: name, Created: m.now(), InPlace: abs, BaseRoot: base},
		store.HeadEntry{Gen: gen, Kind: store.GenCreate, Operation: op, Time: m.now()})
	if errors.Is(err, store.ErrExists) {
		return store.ID{}, fmt.Errorf("%w: %q", ErrExists, name)
	}
	if err != nil {
		return store.ID{}, fmt.Errorf("create workspace %q: %w", name, err)
	}
	return gen, nil
}

// inPlaceDir validates an in-place directory: an existing directory (not a
// symlink to one), not holding the store, not inside the store, and not
// already the directory of another in-place workspace.
func (m *inPlaces) inPlaceDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrInvalidInput, dir, err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return "", fmt.Errorf("%w: in-place directory %s: %w", ErrInvalidInput, abs, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: in-place directory %s is not a directory", ErrInvalidInput, abs)
	}
	storeDir, err := filepath.Abs(m.dir)
	if err != nil {
		return "", err
	}
	if dirfd.Within(storeDir, abs) {
		return "", fmt.Errorf("%w: the store %s is inside %s; mounting over it would hide the store", ErrInvalidInput, storeDir, abs)
	}
	if dirfd.Within(abs, storeDir) {
		return "", fmt.Errorf("%w: %s is inside the store %s", ErrInvalidInput, abs, storeDir)
	}
	keys, err := m.cs.Keys(familyInPlace)
	if err != nil {
		return "", err
	}
	for _, k := range keys {
		st, _, found, err := m.loadInPlace(k)
		if err != nil || !found {
			continue
		}
		if _, err := m.st.GetWorkspace(k); err != nil {
			continue // a record left by a crashed create
		}
		if st.Dir == abs {
			return "", fmt.Errorf("%w: %s is already the directory of in-place workspace %s", ErrExists, abs, k)
		}
	}
	// The workspace mounts over DIR itself, and a mountpoint cannot take
	// a second mount: refuse now, not at every mount.
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%w: in-place directory %s: %w", ErrInvalidInput, abs, err)
	}
	if _, fstype, mounted := fusectl.Find(resolved); mounted {
		return "", fmt.Errorf("%w: %s is a mountpoint (%s); an in-place workspace is mounted over its directory, which must not be one", ErrInvalidInput, abs, fstype)
	}
	return abs, nil
}

func (m *inPlaces) loadInPlace(name string) (inPlaceState, uint64, bool, error) {
	var st inPlaceState
	rev, found, err := m.cs.Load(familyInPlace, name, &st)
	if err != nil {
		return st, 0, false, fmt.Errorf("in-place state of %s: %w", name, err)
	}
	return st, rev, found, nil
}

func (m *inPlaces) putInPlace(name string, rev uint64, st inPlaceState, create bool) error {
	if create {
		// Replace a record left by a crashed create of the same name.
		var old inPlaceState
		r, found, err := m.cs.Load(familyInPlace, name, &old)
		if err != nil {
			return err
		}
		if found {
			rev = r
		}
	}
	if _, err := m.cs.CompareAndSwap(familyInPlace, name, rev, st); err != nil {
		return fmt.Errorf("save in-place state of %s: %w", name, err)
	}
	return nil
}

// inPlace returns name's in-place state, or ErrNotInPlace.
func (m *inPlaces) inPlace(name string) (store.Workspace, inPlaceState, uint64, error) {
	w, err := m.Get(name)
	if err != nil {
		return w, inPlaceState{}, 0, err
	}
	if w.InPlace == "" {
		return w, inPlaceState{}, 0, fmt.Errorf("%w: %s", ErrNotInPlace, name)
	}
	st, rev, found, err := m.loadInPlace(name)
	if err != nil {
		return w, st, 0, err
	}
	if !found {
		return w, st, 0, fmt.Errorf("%w: in-place workspace %s has no state record", store.ErrCorrupt, name)
	}
	return w, st, rev, nil
}

// InPlace returns what an in-place workspace is over; ok is false for
// other workspaces.
func (m *inPlaces) InPlace(name string) (InPlaceInfo, bool, error) {
	w, st, _, err := m.inPlace(name)
	if errors.Is(err, ErrNotInPlace) {
		return InPlaceInfo{}, false, nil
	}
	if err != nil {
		return InPlaceInfo{}, false, err
	}
	_ = w
	return InPlaceInfo{Dir: st.Dir, Base: st.Base, Materialized: st.Materialized}, true, nil
}

// SyncInPlace is Manager.SyncInPlace.
func (m *inPlaces) SyncInPlace(ctx context.Context, name string) (Result, error) {
	defer m.locks.lock(name)()
	release := m.st.HoldGC()
	defer release()
	if err := m.finishMaterialization(name); err != nil {
		return Result{Workspace: name}, err
	}
	res, err := m.syncInPlace(ctx, name, nil)
	if !errors.Is(err, store.ErrBaseChanged) {
		return res, err
	}
	// The head names content DIR no longer holds (lostContent): take DIR's
	// side there and sync again, once.
	lost, lerr := m.dropLostContent(name)
	if lerr != nil || len(lost) == 0 {
		return res, errors.Join(err, lerr)
	}
	return m.syncInPlace(ctx, name, lost)
}

// syncInPlace is SyncInPlace after recovery; lost are the paths
// dropLostContent gave DIR's side, reported as conflicts with the merge's.
func (m *inPlaces) syncInPlace(ctx context.Context, name string, lost []ConflictInfo) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{Workspace: name}, fmt.Errorf("sync %s: %w", name, err)
	}
	w, st, rev, err := m.inPlace(name)
	if err != nil {
		return Result{Workspace: name}, err
	}
	res := Result{Workspace: name, Outcome: OutcomeCurrent, Head: w.Head, Base: w.Base, Sync: &SyncTiming{}}
	start := time.Now()
	// A directory that went away (moved, deleted, replaced by a file) is
	// not "everything deleted": refuse, and keep every generation as is.
	if fi, err := os.Lstat(st.Dir); err != nil || !fi.IsDir() {
		return res, fmt.Errorf("%w: the directory %s of in-place workspace %s is missing or not a directory; restore it (or export the workspace elsewhere)", ErrInvalidInput, st.Dir, name)
	}
	mroot, err := m.rootOf(st.Materialized)
	if err != nil {
		return res, err
	}
	ext, changed, quiet, err := m.detectExternal(st, mroot, true)
	if err == nil && quiet && w.Head != st.Materialized {
		// Events vouched for directories: check every path the
		// materialization will write with an lstat, and detect in full if
		// one changed unseen.
		var ok bool
		ok, err = m.plannedUnchanged(st, mroot, w.Head)
		if err == nil && !ok {
			ext, changed, _, err = m.detectExternal(st, mroot, false)
		}
	}
	if err != nil {
		return res, fmt.Errorf("detect changes in %s: %w", st.Dir, err)
	}
	var markers []ConflictInfo
	var op string
	if changed {
		op = "external " + newOperationID()
		var carried []store.Conflict
		if w.Head == st.Materialized { // egen becomes the head: it keeps the head's conflicts
			if carried, err = m.conflictsOf(w.Head); err != nil {
				return res, err
			}
		}
		egen, err := m.st.PutGeneration(&store.Generation{Root: ext, Parents: []store.ID{st.Materialized}, Workspace: name, Kind: store.GenExternal, Operation: op, Time: m.now(), Conflicts: carried})
		if err != nil {
			return res, fmt.Errorf("store generation: %w", err)
		}
		newHead := egen
		kind := store.GenExternal
		if w.Head != st.Materialized {
			hroot, err := m.rootOf(w.Head)
			if err != nil {
				return res, err
			}
			opt := rebase.Options{Markers: true, KeepConflicts: true}
			mr, err := m.merge3(mroot, hroot, ext, opt)
			if errors.Is(err, store.ErrBaseChanged) {
				// Part of what DIR held is lost (a listing, a file's
				// bytes): merge as if it had not been there, so both
				// sides' entries are kept.
				var base store.ID
				if base, _, err = m.baseWithoutLost(mroot, hroot, ext); err == nil {
					mr, err = m.merge3(base, hroot, ext, opt)
				}
			}
			if err != nil {
				return res, fmt.Errorf("merge changes made in %s into %s: %w", st.Dir, name, err)
			}
			markers = toInfos(mr.Resolved)
			if mr.Tree.IsZero() {
				mr.Tree = store.EmptyTreeID() // both sides emptied the directory
			}
			fromHead, err := m.conflictsOf(w.Head)
			if err != nil {
				return res, err
			}
			conflicts := unionConflicts(storeConflicts(mr.Resolved), storeConflicts(mr.Conflicts), fromHead)
			if newHead, err = m.st.PutGeneration(&store.Generation{Root: mr.Tree, Parents: []store.ID{w.Head, egen}, Workspace: name, Kind: store.GenRebase, Operation: op, Time: m.now(), Conflicts: conflicts}); err != nil {
				return res, fmt.Errorf("store generation: %w", err)
			}
			kind = store.GenRebase
		}
		nw, err := m.st.CompareAndAppend(name, w.Head, store.HeadEntry{Gen: newHead, Base: w.Base, Kind: kind, Operation: op, Time: m.now()}, nil)
		if err != nil {
			return res, fmt.Errorf("publish changes made in %s: %w", st.Dir, err)
		}
		// DIR holds the external generation now.
		st.Materialized = egen
		if err := m.putInPlace(name, rev, st, false); err != nil {
			return res, err
		}
		if _, rev, _, err = m.loadInPlace(name); err != nil {
			return res, err
		}
		res.Outcome, res.Head = OutcomeRebased, nw.Head
		if len(markers) > 0 {
			res.Markers = markers
		} else if len(lost) == 0 {
			m.clearConflicts(name)
		}
		w = nw
	}
	if conflicts := append(slices.Clone(lost), markers...); len(conflicts) > 0 {
		res.Outcome, res.Head, res.Conflicts = OutcomeConflicted, w.Head, conflicts
		if len(lost) > 0 { // merges' conflicts are in the generation; lost content is a notice
			if err := m.recordConflicts(name, conflictRecord{Head: w.Head, Key: op, Time: m.now(), Conflicts: lost}); err != nil {
				return res, err
			}
		}
	}
	res.Sync.Detect = time.Since(start)
	if w.Head != st.Materialized {
		if err := ctx.Err(); err != nil {
			// The head moved (and is announced below when it came
			// from DIR); the next sync writes it into DIR.
			if changed || len(lost) > 0 {
				m.headChanged(name)
			}
			return res, fmt.Errorf("sync %s: %w", name, err)
		}
		mstart := time.Now()
		n, err := m.materializeInPlace(name, st, rev, w.Head)
		if err != nil {
			return res, err
		}
		res.Sync.Materialize, res.Sync.Edits = time.Since(mstart), n
	}
	if changed || len(lost) > 0 {
		m.headChanged(name)
	}
	return res, nil
}

// detectExternal compares DIR with the tree it should hold (mroot) where
// that tree says anything: every fingerprint it names and every directory
// it lists. Directories still named by a reference are only compared by
// their own fingerprint; what is inside them is DIR's, whatever it is. It
// returns the tree DIR holds now, with references for what changed.
//
// Cost: one listing (getdents and one lstat per entry) of each directory
// the tree lists, and no metadata lookup for a file whose fingerprint is
// the one the tree names — the common case.
//
// With events (while the daemon has DIR attached under its mount, on a
// local file system), a directory verified before and quiet since (no
// inotify event in it, none changing a subdirectory's own lstat) is not
// listed again: only what its tree names differently from the verified
// one is looked at (detect_watch.go). quiet reports whether any directory
// was answered so.
func (m *inPlaces) detectExternal(st inPlaceState, mroot store.ID, events bool) (_ store.ID, changed, quiet bool, _ error) {
	d := detector{m: m, st: st, stats: &detectStats{}}
	var bd *dirfd.Dir
	var release func()
	var err error
	if events {
		bd, d.w, release, err = m.st.OpenBaseWatched(st.Base)
	} else {
		bd, release, err = m.st.OpenBase(st.Base)
	}
	if err != nil {
		return store.ID{}, false, false, err
	}
	defer release()
	d.dir = bd
	if d.w != nil {
		if d.seqNow, err = d.w.Sync(); err != nil {
			d.w = nil // detection without events
		}
	}
	cur, err := d.current("", "")
	if err != nil {
		return store.ID{}, false, false, err
	}
	e := store.Entry{Kind: store.KindDir, ID: mroot}
	if err := d.prime(&e, cur); err != nil {
		return store.ID{}, false, false, err
	}
	ne, changed, err := d.entry("", &e, cur, nil)
	quiet = d.stats.quiet > 0
	if err != nil || !changed {
		return mroot, false, quiet, err
	}
	if ne == nil || ne.Kind != store.KindDir {
		return store.ID{}, false, false, fmt.Errorf("%w: %s is no longer a directory", ErrInvalidInput, st.Dir)
	}
	return ne.ID, true, quiet, nil
}

type detector struct {
	m   *inPlaces
	st  inPlaceState
	dir *dirfd.Dir // DIR (OpenBase)
	// uses, when set, collects the shadow fingerprints a leaf's verdict
	// relied on (detectMemo keeps them with the verdict).
	uses *[]shadowUse
	// w reports changes in DIR (nil: none); seqNow is its sequence number
	// when this detection began.
	w      store.Watcher
	seqNow uint64
	stats  *detectStats
}

// detectStats counts what one detection did.
type detectStats struct {
	quiet int // directories answered from events, not listed
}

// current is the entry for DIR/p as it is now, or nil when p is absent
// (or a device whose number no tree can hold). A FIFO, socket or device is
// its special entry: it has no fingerprint.
func (d detector) current(p, name string) (*store.Entry, error) {
	ref, id, err := d.m.st.CurrentRef(d.st.Base, p)
	if errors.Is(err, store.ErrNotFound) && p != "" {
		if st, serr := d.dir.Lstat(p); serr == nil {
			return specialEntry(name, &st), nil
		}
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return refEntry(name, ref, id), nil
}

// listed is current for an entry of a listing, from the lstat the listing
// made: no further system call. was is the ID the tree names there: when
// st is that reference's fingerprint, no new reference is built.
func (d detector) listed(p, name string, st *unix.Stat_t, was store.ID) *store.Entry {
	if ref, ok := d.m.st.RefMatchingStat(was, d.st.Base, p, st); ok {
		return refEntry(name, ref, was)
	}
	ref, id, ok := d.m.st.RefFromStat(d.st.Base, p, st)
	if !ok {
		return specialEntry(name, st)
	}
	return refEntry(name, ref, id)
}

// specialEntry is the tree entry of a FIFO, socket or device with stat st,
// nil for anything else (or a device number a tree cannot hold).
func specialEntry(name string, st *unix.Stat_t) *store.Entry {
	k, ok := store.SpecialKindOfMode(st.Mode)
	if !ok || k.IsDevice() && st.Rdev > store.MaxRdev {
		return nil
	}
	e := store.SpecialEntry(name, k, st.Rdev, st.Mtim.Nano()).WithPerm(st.Mode)
	return &e
}

func refEntry(name string, ref store.BaseRef, id store.ID) *store.Entry {
	if !ref.Kind.Valid() {
		return nil
	}
	size := ref.Size
	if ref.Kind == store.KindDir {
		size = 0
	}
	e := &store.Entry{Name: name, Kind: ref.Kind, Size: size, Mtime: ref.Mtime, ID: id}
	if ref.Git == "" { // a git object reference records no mode: the kind's
		e.SetPerm(ref.Mode)
	}
	return e
}

// samePerm returns e, unchanged, for a path whose content DIR still holds
// — or, where DIR's mode is not the one e records (a chmod in DIR, or a
// tree made before trees kept modes), e with DIR's mode, as a change.
func samePerm(e, cur *store.Entry) (*store.Entry, bool, error) {
	if e.Perm() == cur.Perm() {
		return e, false, nil
	}
	c := *e
	c.SetPerm(cur.Perm())
	return &c, true, nil
}

// entry checks one entry e of the materialized tree at path p against cur,
// what DIR holds there now (nil: nothing). rs is e's reference status when
// the caller looked it up already (directories of a listing), else nil.
func (d detector) entry(p string, e, cur *store.Entry, rs *store.RefStatus) (*store.Entry, bool, error) {
	if cur == nil {
		return nil, true, nil
	}
	// A file or symlink with the fingerprint the tree names is unchanged,
	// and so is a special file of the same kind and number (it has no
	// fingerprint: its mtime moves with every write to a FIFO).
	if e.Kind.IsSpecial() || cur.Kind.IsSpecial() {
		if rebase.SameContent(e, cur) {
			return e, false, nil
		}
		return cur, true, nil
	}
	if e.Kind != store.KindDir && cur.ID == e.ID {
		return samePerm(e, cur)
	}
	if rs == nil {
		st, err := d.m.st.RefStatuses([]store.ID{e.ID})
		if err != nil {
			return nil, false, err
		}
		rs = &st[0]
	}
	isRef, resolved := rs.IsRef, rs.Resolved
	// Leaves: files, symlinks, and directory references nobody resolved
	// (those hold no opinion about their contents: only their own
	// fingerprint is compared). A resolved directory reference pins a
	// listing and is compared below like a stored tree.
	if e.Kind != store.KindDir || (isRef && !resolved) {
		same := cur.ID == e.ID
		if !same && isRef && e.Kind == store.KindDir {
			// A directory renamed or chmodded keeps its listing.
			old, _, err := d.m.st.BaseRefOf(e.ID)
			if err != nil {
				return nil, false, err
			}
			now, _, err := d.m.st.BaseRefOf(cur.ID)
			if err != nil {
				return nil, false, err
			}
			same = old.SameAs(now)
		}
		if isRef && e.Kind == store.KindDir && cur.Kind == store.KindDir {
			// Unless this process listed it: a view loaded from that
			// listing names each child's fingerprint (a program
			// rewriting a file underneath the mount leaves the
			// directory's own fingerprint as it was; a new name in it
			// changes that, but a reference to the listing's other
			// children names them as listed), so the listing is compared
			// like a stored one.
			if t, ok := d.m.st.Expanded(e.ID); ok {
				ne, ch, err := d.compareListing(p, e, cur, t)
				if err == nil && !ch && !same {
					// The listing holds, the directory's own fingerprint
					// moved (a name added and removed again): name it as it
					// is now, or another process could not list it.
					return cur, true, nil
				}
				return ne, ch, err
			}
		}
		if same {
			return samePerm(e, cur)
		}
		// What acyclicfs itself last wrote (or restored) at p.
		if p != "" && !d.st.Shadow.IsZero() {
			v, ok, err := d.m.st.OverlayGet(d.st.Shadow, p)
			if err != nil {
				return nil, false, err
			}
			if d.uses != nil {
				*d.uses = append(*d.uses, shadowUse{path: p, val: string(v), ok: ok})
			}
			if ok && string(v) == string(cur.ID[:]) {
				return e, false, nil
			}
		}
		if !isRef && e.Kind != store.KindDir {
			if same, err := d.sameContent(e, cur); err != nil || same {
				return e, false, err
			}
		}
		return cur, true, nil
	}
	if cur.Kind != store.KindDir {
		return cur, true, nil
	}
	t, err := d.m.st.GetTree(e.ID)
	if err != nil {
		return nil, false, err
	}
	return d.compareListing(p, e, cur, t)
}

// leaf reports whether the directory entry id (reference status rs) holds
// no opinion about its contents: a reference nobody resolved and this
// process never listed. Detection compares it by its own fingerprint only.
func (d detector) leaf(id store.ID, rs *store.RefStatus) bool {
	if !rs.IsRef || rs.Resolved {
		return false
	}
	_, listed := d.m.st.Expanded(id)
	return !listed
}

// compareListing is entry for a directory whose listing t the tree (or
// this process) holds: answered from events when it was quiet, else
// listed.
func (d detector) compareListing(p string, e, cur *store.Entry, t *store.Tree) (*store.Entry, bool, error) {
	if d.w != nil {
		if ne, ch, ok, err := d.quietDir(p, e, cur, t); err != nil || ok {
			return ne, ch, err
		}
	}
	return d.listDir(p, e, cur, t)
}

// listDir is entry for a directory the tree lists (a stored tree or a
// resolved reference, t), compared with DIR's listing of p.
func (d detector) listDir(p string, e, cur *store.Entry, t *store.Tree) (*store.Entry, bool, error) {
	d.m.detect.listings.Add(1)
	var lw listWatch
	var opened func(int) error
	if d.w != nil {
		opened = func(fd int) error { lw = d.watchListing(p, fd); return nil }
	}
	names, err := d.dir.ReadDirWith(p, opened)
	if err != nil {
		return nil, false, fmt.Errorf("list %s: %w", filepath.Join(d.st.Dir, p), err)
	}
	stats := make(map[string]*unix.Stat_t, len(names))
	for i := range names {
		stats[names[i].Name] = &names[i].Stat
	}
	// A listing identical to one whose files were all found unchanged
	// against the same tree (and the same shadow fingerprints) gives the
	// same verdicts: only its directories are looked at again.
	key := detectKey{base: d.st.Base, path: p}
	digest := listingDigest(names)
	filesKnown := d.m.detect.unchanged(key, e.ID, digest, d.st.Shadow, func(u shadowUse) bool {
		v, ok, err := d.m.st.OverlayGet(d.st.Shadow, u.path)
		return err == nil && ok == u.ok && string(v) == u.val
	})
	// What DIR holds for each entry (from the listing's lstats), then the
	// reference status of every directory entry, in one transaction.
	curs := make([]*store.Entry, len(t.Entries))
	lstats := make([]*unix.Stat_t, len(t.Entries))
	var dirIDs []store.ID
	for i := range t.Entries {
		old := &t.Entries[i]
		if st, ok := stats[old.Name]; ok {
			if !filesKnown || old.Kind == store.KindDir {
				curs[i] = d.listed(joinRel(p, old.Name), old.Name, st, old.ID)
			}
			lstats[i] = st
			delete(stats, old.Name)
		}
		if old.Kind == store.KindDir {
			dirIDs = append(dirIDs, old.ID)
		}
	}
	statuses, err := d.m.st.RefStatuses(dirIDs)
	if err != nil {
		return nil, false, err
	}
	changed, filesChanged, leafDirsChanged := false, false, false
	var uses []shadowUse
	var leafDirs []leafDir // unresolved directory references, for the watcher
	fd := d
	fd.uses = &uses
	out := lazyTree{old: t.Entries}
	for i := range t.Entries {
		old := &t.Entries[i]
		cp := joinRel(p, old.Name)
		c := curs[i]
		var rs *store.RefStatus
		var ne *store.Entry
		var ch bool
		var err error
		switch {
		case old.Kind == store.KindDir:
			rs = &statuses[0]
			statuses = statuses[1:]
			ne, ch, err = d.entry(cp, old, c, rs)
			if d.leaf(old.ID, rs) {
				leafDirsChanged = leafDirsChanged || ch
				if lstats[i] != nil {
					leafDirs = append(leafDirs, leafDir{path: cp, st: lstats[i]})
				}
			}
		case filesKnown:
			ne = old
		default:
			ne, ch, err = fd.entry(cp, old, c, nil)
			filesChanged = filesChanged || ch
		}
		if err != nil {
			return nil, false, err
		}
		changed = changed || ch
		out.add(i, ne)
	}
	for name, st := range stats {
		if isMaterializeTemp(name) || !store.ValidName(name) {
			continue
		}
		if ne := d.listed(joinRel(p, name), name, st, store.ID{}); ne != nil {
			out.extra(*ne)
			changed, filesChanged = true, true
		}
	}
	if !filesKnown {
		d.m.detect.record(key, e.ID, digest, d.st.Shadow, uses, !filesChanged)
	} else {
		uses = d.m.detect.usesOf(key)
	}
	ne, err := d.result(e, cur, &out, changed)
	if err != nil {
		return nil, false, err
	}
	if lw.ok {
		// DIR's listing matched what ne names, file by file and for every
		// unresolved subdirectory: remember it with the events' number.
		d.rememberListing(p, lw, ne.ID, leafDirs, uses, !filesChanged && !leafDirsChanged)
	}
	return ne, changed, nil
}

// result is what a directory's check returns: e itself when nothing in it
// changed, else an entry naming out (stored) with DIR's mtime from cur.
func (d detector) result(e, cur *store.Entry, out *lazyTree, changed bool) (*store.Entry, error) {
	if !changed {
		return e, nil
	}
	t := out.tree()
	t.Sort()
	id, err := d.m.st.PutTree(t)
	if err != nil {
		return nil, err
	}
	out2 := &store.Entry{Name: e.Name, Kind: store.KindDir, Mtime: cur.Mtime, ID: id}
	out2.SetPerm(cur.Perm())
	return out2, nil
}

// sameContent compares a file acyclicfs holds as a blob with DIR's file
// when no shadow fingerprint vouches for it (a file written before the
// shadow knew it, or touched without change). Equal content keeps the
// blob entry; the fingerprint is not a change by itself.
func (d detector) sameContent(e, cur *store.Entry) (bool, error) {
	if e.Kind != cur.Kind || e.Size != cur.Size {
		return false, nil
	}
	a, err := d.m.st.ReadBlob(e.ID)
	if err != nil {
		return false, err
	}
	b, err := d.m.st.ReadBlob(cur.ID)
	if err != nil {
		return false, err
	}
	return string(a) == string(b), nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func (m *inPlaces) derivesFromInPlace(ws string) bool {
	for i := 0; ws != "" && i < 1024; i++ {
		w, err := m.st.GetWorkspace(ws)
		if err != nil {
			return false
		}
		if w.InPlace != "" {
			return true
		}
		ws = w.Parent
	}
	return false
}

// preserveReplaced stores, for every base reference that oldRoot names and
// newRoot replaces, what it names now (a file's bytes, a directory's
// listing) and resolves the reference to it. A capture calls it before
// publishing: the generation it leaves behind stays readable (diff, undo,
// a 3-way merge's base) even after a program edits DIR. Cost: the paths
// that changed, made durable together: the file contents in one blob
// batch, then the listings and every resolution in one metadata
// transaction. References resolved already are skipped.
func (m *inPlaces) preserveReplaced(oldRoot, newRoot store.ID) error {
	pr, err := m.preparePreserve(oldRoot, newRoot, nil, nil)
	if err != nil || pr == nil {
		return err
	}
	return m.st.WriteResolve(pr)
}

// preparePreserve is preserveReplaced up to its metadata: the replaced
// contents are durable when it returns, and the listings and resolutions
// that name them are returned prepared, for the caller to write (alone, or
// with the generation that replaces them: one metadata sync instead of
// two). Until they are written, nothing may replace the paths in DIR.
//
// pending are newRoot's trees not stored yet (a capture's, to be stored
// with its generation by pt, which is written before the result); both
// may be nil.
func (m *inPlaces) preparePreserve(oldRoot, newRoot store.ID, pending []*store.Tree, pt *store.PreparedResolve) (*store.PreparedResolve, error) {
	if oldRoot == newRoot {
		return nil, nil
	}
	p := m.newPreserver()
	if ids := pt.TreeIDs(); len(ids) == len(pending) && len(pending) > 0 {
		p.pending = make(map[store.ID]*store.Tree, len(pending))
		for i, t := range pending {
			p.pending[ids[i]] = t
		}
	}
	defer p.batch.Abort()
	if err := p.replaced(oldRoot, newRoot); err != nil {
		return nil, err
	}
	if err := p.batch.Commit(); err != nil {
		return nil, err
	}
	return m.st.PrepareResolve(p.trees, p.res, pt)
}

// preserver gathers what preserveReplaced stores, for preparePreserve to
// make durable at once.
type preserver struct {
	m     *inPlaces
	batch *store.BlobBatch
	trees []*store.Tree
	res   []store.Resolution
	seen  map[store.ID]bool
	// pending are trees of the new root not stored yet.
	pending map[store.ID]*store.Tree
}

// newTree returns a tree of the new root, pending or stored.
func (p *preserver) newTree(id store.ID) (*store.Tree, error) {
	if t := p.pending[id]; t != nil {
		return t, nil
	}
	return p.m.st.GetTree(id)
}

func (m *inPlaces) newPreserver() *preserver {
	return &preserver{m: m, batch: m.st.NewBlobBatch(), seen: map[store.ID]bool{}}
}

// unresolved reports whether id is a base reference nobody resolved yet
// (and not already gathered).
func (p *preserver) unresolved(id store.ID) (bool, error) {
	if p.seen[id] {
		return false, nil
	}
	p.seen[id] = true
	st, err := p.m.st.RefStatuses([]store.ID{id})
	if err != nil {
		return false, err
	}
	return st[0].IsRef && !st[0].Resolved, nil
}

func (p *preserver) replaced(oldRoot, newRoot store.ID) error {
	if oldRoot == newRoot {
		return nil
	}
	ot, err := p.dir(oldRoot)
	if err != nil {
		return lostIsNothing(err)
	}
	nt, err := p.newTree(newRoot)
	if errors.Is(err, store.ErrBaseChanged) {
		// What replaces it is a listing already lost (a directory moved
		// there in the view, then changed underneath): nothing tells what
		// it keeps, so keep all of the old one.
		return p.tree(oldRoot)
	}
	if err != nil {
		return err
	}
	for i := range ot.Entries {
		o := &ot.Entries[i]
		n, ok := nt.Lookup(o.Name)
		if ok && rebase.SameContent(&n, o) || o.Kind.IsSpecial() {
			continue // unchanged, or a special file: nothing to keep
		}
		if o.Kind == store.KindDir {
			if ok && n.Kind == store.KindDir {
				if err := p.replaced(o.ID, n.ID); err != nil {
					return err
				}
				continue
			}
			if err := p.tree(o.ID); err != nil {
				return err
			}
			continue
		}
		if err := lostIsNothing(p.file(o)); err != nil {
			return fmt.Errorf("preserve %s: %w", o.Name, err)
		}
	}
	return nil
}

// lostIsNothing is err, except that a reference already stale is nil: its
// content was lost to a program editing DIR before anyone kept it, there
// is nothing left to preserve, and the capture itself is still good (a
// head that still names it is mended by dropLostContent).
func lostIsNothing(err error) error {
	if errors.Is(err, store.ErrBaseChanged) {
		return nil
	}
	return err
}

// dir returns the tree id names, and gathers the listing of an unresolved
// directory reference (as this process has seen it) as a tree to resolve
// it to.
func (p *preserver) dir(id store.ID) (*store.Tree, error) {
	need, err := p.unresolved(id)
	if err != nil {
		return nil, err
	}
	t, err := p.m.st.GetTree(id)
	if err != nil || !need {
		return t, err
	}
	enc, err := t.Encode()
	if err != nil {
		return nil, err
	}
	p.trees = append(p.trees, t)
	p.res = append(p.res, store.Resolution{Ref: id, Target: store.TreeID(enc)})
	return t, nil
}

// file gathers the content of an unresolved file or symlink reference.
func (p *preserver) file(e *store.Entry) error {
	if need, err := p.unresolved(e.ID); err != nil || !need {
		return err
	}
	r, err := p.m.st.OpenBlob(e.ID)
	if err != nil {
		return err
	}
	id, _, err := p.batch.WriteBlob(r)
	r.Close()
	if err != nil {
		return err
	}
	p.res = append(p.res, store.Resolution{Ref: e.ID, Target: id})
	return nil
}

// tree gathers a whole subtree that was deleted or replaced.
func (p *preserver) tree(id store.ID) error {
	t, err := p.dir(id)
	if err != nil {
		return lostIsNothing(err)
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		if e.Kind == store.KindDir {
			if err := p.tree(e.ID); err != nil {
				return err
			}
			continue
		}
		if err := lostIsNothing(p.file(e)); err != nil {
			return err
		}
	}
	return nil
}

// lazyTree builds a checked directory's new tree only once one of its
// entries differs from the old tree's: a detection walks every directory
// it verifies, and copying each unchanged listing (100,000 entries at
// every lease end over a 100,000-file tree) cost more than the checks.
type lazyTree struct {
	old  []store.Entry
	seen int         // entries of old passed to add so far
	out  *store.Tree // nil while every entry added was old's own
}

// add records the i-th entry's outcome: ne is what the new tree holds
// for old[i] (nil: nothing). Entries are added in order, each once.
func (l *lazyTree) add(i int, ne *store.Entry) {
	if l.out == nil && ne == &l.old[i] {
		l.seen = i + 1
		return
	}
	l.materialize()
	l.seen = i + 1
	if ne != nil {
		c := *ne
		c.Name = l.old[i].Name
		l.out.Entries = append(l.out.Entries, c)
	}
}

// extra appends an entry old does not name.
func (l *lazyTree) extra(e store.Entry) {
	l.materialize()
	l.out.Entries = append(l.out.Entries, e)
}

// tree is the new tree (unsorted), built if nothing differed so far.
func (l *lazyTree) tree() *store.Tree {
	l.materialize()
	return l.out
}

func (l *lazyTree) materialize() {
	if l.out != nil {
		return
	}
	l.out = &store.Tree{Entries: make([]store.Entry, 0, len(l.old))}
	l.out.Entries = append(l.out.Entries, l.old[:l.seen]...)
}
