package workspace

import (
	"errors"
	"path"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/dirwatch"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// Detection from events.
//
// Detection lists every directory the materialized tree lists and lstats
// each entry, at every lease end: after a session had changed files in 300
// directories of 100 files, a lease that changed nothing spent 100-250 ms
// in it. While the daemon has DIR attached under its mount, the store
// watches DIR's directories with inotify (internal/dirwatch), and a
// directory's listing that matched its tree is remembered with the
// watcher's sequence number. At the next detection a directory with no
// event since, whose unresolved subdirectories had no event changing their
// own lstat either, is not listed: its entries that the tree names as
// before are unchanged, only the others are looked at (one lstat each),
// and resolved or stored subdirectories are checked in turn.
//
// A listing counts only if the watch was in place before it began and no
// event arrived in the directory while it ran; a subdirectory watched for
// the first time after the listing is re-checked with fstat against the
// listing's lstat.
//
// inotify misses writes through a shared mapping and through a hard link
// from outside DIR. So the plan of a materialization is checked path by
// path against DIR before it writes whenever a directory was answered
// from events (SyncInPlace): nothing is overwritten unseen. A change
// inotify missed elsewhere is taken in by the full detection of the next
// mount.

// listWatch is how a listing stood with the watcher: ok when p was watched
// before the listing began, seq the sequence number then.
type listWatch struct {
	ok  bool
	seq uint64
}

// leafDir is an unresolved subdirectory of a listing, with its lstat.
type leafDir struct {
	path string
	st   *unix.Stat_t
}

// detectQuiet is a directory's listing that matched tree at seq of w.
type detectQuiet struct {
	w          store.Watcher
	seq        uint64
	tree       store.ID
	shadowRoot store.ID
	uses       []shadowUse
}

// watchListing watches p (open as fd) before it is listed. A directory on
// another file system mounted inside DIR is watched only if that one's
// changes are all reported too.
func (d detector) watchListing(p string, fd int) listWatch {
	if !dirwatch.Supported(fd) {
		return listWatch{}
	}
	if _, err := d.w.Add(p, fd); err != nil {
		return listWatch{}
	}
	seq, err := d.w.Sync()
	if err != nil {
		return listWatch{}
	}
	return listWatch{ok: true, seq: seq}
}

// rememberListing records that p's listing, begun at lw, matched tree
// (every file and unresolved subdirectory in leafDirs), if no event in p
// came during it and every leaf directory is watched without a change to
// its own lstat since; matched false forgets p.
func (d detector) rememberListing(p string, lw listWatch, tree store.ID, leafDirs []leafDir, uses []shadowUse, matched bool) {
	key := detectKey{base: d.st.Base, path: p}
	if !matched || !d.watchLeaves(lw.seq, leafDirs) {
		d.m.detect.forgetQuiet(key)
		return
	}
	seq, err := d.w.Sync()
	if err != nil || !d.w.Quiet(p, lw.seq, false) {
		d.m.detect.forgetQuiet(key)
		return
	}
	for _, l := range leafDirs {
		// No change to its own lstat since the listing began (or since
		// its watch was added, after an fstat matched the listing's).
		if !d.w.QuietSince(l.path, lw.seq, true) {
			d.m.detect.forgetQuiet(key)
			return
		}
	}
	d.m.detect.rememberQuiet(key, detectQuiet{w: d.w, seq: seq, tree: tree, shadowRoot: d.st.Shadow, uses: uses})
}

// watchLeaves watches each leaf directory not watched since seq; one
// watched only now must still have the lstat the listing saw.
func (d detector) watchLeaves(seq uint64, leafDirs []leafDir) bool {
	for _, l := range leafDirs {
		if d.w.Quiet(l.path, seq, true) {
			continue
		}
		err := d.dir.WithDir(l.path, func(fd int) error {
			if !dirwatch.Supported(fd) {
				return errLeafMoved
			}
			if _, err := d.w.Add(l.path, fd); err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return err
			}
			if !sameStat(&st, l.st) {
				return errLeafMoved
			}
			return nil
		})
		if err != nil {
			return false
		}
	}
	return true
}

// errLeafMoved: a leaf directory cannot be vouched for by events (changed
// since listed, or on a file system whose changes inotify misses).
var errLeafMoved = errors.New("changed since listed, or not watchable")

// expansionQuiet is what stands for a remembered listing of p when this
// process listed e, a directory reference at its own path, under the
// watcher (store.ExpansionWatch): that listing is e's tree, verified at
// the watcher's number then. The warm-up lists every directory of a view
// that way, so the first lease end after it need not list them again
// (on the Go src tree in place, 1,594 directories: measured in
// docs/inplace.md).
func (d detector) expansionQuiet(p string, e *store.Entry) (detectQuiet, bool) {
	w, seq, ok := d.m.st.ExpansionWatch(e.ID)
	if !ok || w != d.w {
		return detectQuiet{}, false
	}
	if r, isRef, err := d.m.st.BaseRefOf(e.ID); err != nil || !isRef || r.Path != p {
		return detectQuiet{}, false
	}
	return detectQuiet{w: w, seq: seq, tree: e.ID, shadowRoot: d.st.Shadow}, true
}

// sameStat compares the fields a directory reference's fingerprint uses.
func sameStat(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Mode == b.Mode && a.Size == b.Size &&
		a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

// quietDir answers entry for the directory p (tree t) from events when p
// was remembered and is quiet since; ok false: list it.
func (d detector) quietDir(p string, e, cur *store.Entry, t *store.Tree) (_ *store.Entry, changed, ok bool, _ error) {
	key := detectKey{base: d.st.Base, path: p}
	q, found := d.m.detect.quietOf(key)
	if !found || q.w != d.w {
		q, found = d.expansionQuiet(p, e)
	}
	if !found || q.w != d.w || !d.w.Quiet(p, q.seq, false) {
		return nil, false, false, nil
	}
	if q.shadowRoot != d.st.Shadow && !d.usesHold(q.uses) {
		return nil, false, false, nil
	}
	then := t
	if q.tree != e.ID {
		var err error
		if then, err = d.m.st.GetTree(q.tree); err != nil {
			return nil, false, false, nil // collected meanwhile: list
		}
	}
	var dirIDs []store.ID
	for i := range t.Entries {
		if t.Entries[i].Kind == store.KindDir {
			dirIDs = append(dirIDs, t.Entries[i].ID)
		}
	}
	statuses, err := d.m.st.RefStatuses(dirIDs)
	if err != nil {
		return nil, false, false, err
	}
	d.stats.quiet++
	d.m.detect.quietHits.Add(1)
	leafChanged, stale := false, false
	uses := slices.Clone(q.uses) // appended to: not the remembered slice
	fd := d
	fd.uses = &uses
	out := lazyTree{old: t.Entries}
	for i := range t.Entries {
		x := &t.Entries[i]
		cp := joinRel(p, x.Name)
		same := then == t
		if !same {
			mx, had := then.Lookup(x.Name)
			same = had && rebase.SameContent(&mx, x)
		}
		var ne *store.Entry
		var ch bool
		switch {
		case x.Kind == store.KindDir:
			rs := &statuses[0]
			statuses = statuses[1:]
			leaf := d.leaf(x.ID, rs)
			if same && d.w.Quiet(cp, q.seq, true) {
				// Its own lstat is as remembered: a leaf is unchanged, a
				// reference this process listed is checked by its listing.
				if leaf {
					ne = x
					break
				}
				if xt, ok := d.m.st.Expanded(x.ID); ok && rs.IsRef && !rs.Resolved {
					if ne, ch, err = d.compareListing(cp, x, x, xt); err != nil {
						return nil, false, false, err
					}
					break
				}
			}
			c, err := d.current(cp, x.Name)
			if err != nil {
				return nil, false, false, err
			}
			if ne, ch, err = d.entry(cp, x, c, rs); err != nil {
				return nil, false, false, err
			}
			if leaf {
				// Not watched as this listing's leaf: list p next time.
				leafChanged, stale = leafChanged || ch, true
			}
		case same:
			ne = x
		default:
			c, err := d.current(cp, x.Name)
			if err != nil {
				return nil, false, false, err
			}
			if ne, ch, err = fd.entry(cp, x, c, nil); err != nil {
				return nil, false, false, err
			}
			leafChanged = leafChanged || ch
		}
		changed = changed || ch
		out.add(i, ne)
	}
	// Names DIR held when p was remembered that t lacks (quiet since: DIR
	// holds them still, unless an lstat says otherwise).
	for i := range then.Entries {
		mx := &then.Entries[i]
		if then == t {
			break
		}
		if _, ok := t.Lookup(mx.Name); ok {
			continue
		}
		c, err := d.current(joinRel(p, mx.Name), mx.Name)
		if err != nil {
			return nil, false, false, err
		}
		if c != nil {
			out.extra(*c)
			changed, leafChanged = true, true
		}
	}
	ne, err := d.result(e, cur, &out, changed)
	if err != nil {
		return nil, false, false, err
	}
	if leafChanged || stale {
		d.m.detect.forgetQuiet(key)
	} else {
		d.m.detect.rememberQuiet(key, detectQuiet{w: d.w, seq: d.seqNow, tree: ne.ID, shadowRoot: d.st.Shadow, uses: dedupUses(uses)})
	}
	return ne, changed, true, nil
}

// usesHold reports whether every shadow answer a remembered verdict relied
// on is still the shadow's answer.
func (d detector) usesHold(uses []shadowUse) bool {
	for _, u := range uses {
		if d.st.Shadow.IsZero() {
			return false
		}
		v, ok, err := d.m.st.OverlayGet(d.st.Shadow, u.path)
		if err != nil || ok != u.ok || string(v) != u.val {
			return false
		}
	}
	return true
}

// dedupUses keeps the last answer per path.
func dedupUses(uses []shadowUse) []shadowUse {
	if len(uses) < 2 {
		return uses
	}
	last := make(map[string]int, len(uses))
	for i, u := range uses {
		last[u.path] = i
	}
	out := make([]shadowUse, 0, len(last))
	for i, u := range uses {
		if last[u.path] == i {
			out = append(out, u)
		}
	}
	return out
}

// prime lists the root once while it is still an unresolved reference, so
// that it is watched and remembered before a capture resolves it (the
// first lease end that changes a file would otherwise list and watch the
// whole root then). It reports nothing: an unresolved reference holds no
// opinion about its contents.
func (d detector) prime(e, cur *store.Entry) error {
	if d.w == nil || cur == nil || cur.Kind != store.KindDir {
		return nil
	}
	if !d.m.detect.primeOnce(d.st.Base, d.w) {
		return nil // once per watcher: a failed prime is not retried at every lease end
	}
	rs, err := d.m.st.RefStatuses([]store.ID{e.ID})
	if err != nil {
		return err
	}
	if !rs[0].IsRef || rs[0].Resolved || cur.ID != e.ID {
		return nil
	}
	t, err := d.m.st.GetTree(e.ID)
	if err != nil {
		return nil // the reference's listing is gone: nothing to prime
	}
	_, _, err = d.listDir("", e, cur, t)
	return err
}

// plannedUnchanged reports whether DIR still holds, at every path where
// the tree of head differs from mroot (what DIR should hold), what mroot
// names there: the paths a materialization would write or remove. It
// checks each with an lstat (a directory mroot names there is checked
// whole), not trusting events, which miss writes through shared mappings
// and hard links.
func (m *inPlaces) plannedUnchanged(st inPlaceState, mroot, head store.ID) (bool, error) {
	hroot, err := m.rootOf(head)
	if err != nil {
		return false, err
	}
	changes, err := rebase.Diff(merger{m.st}, mroot, hroot)
	if errors.Is(err, store.ErrBaseChanged) {
		return false, nil // something either names is gone from DIR: detect in full
	}
	if err != nil {
		return false, err
	}
	if len(changes) == 0 {
		return true, nil
	}
	bd, release, err := m.st.OpenBase(st.Base)
	if err != nil {
		return false, err
	}
	defer release()
	d := detector{m: m, st: st, dir: bd, stats: &detectStats{}}
	for _, c := range changes {
		cur, err := d.current(c.Path, path.Base(c.Path))
		if err != nil {
			return false, nil // let the full detection tell what it is
		}
		if c.Old == nil {
			if cur != nil {
				return false, nil
			}
			continue
		}
		old := *c.Old
		old.Name = path.Base(c.Path)
		if _, ch, err := d.entry(c.Path, &old, cur, nil); errors.Is(err, store.ErrBaseChanged) || ch {
			return false, nil
		} else if err != nil {
			return false, err
		}
	}
	return true, nil
}
