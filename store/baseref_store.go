package store

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/internal/gitrepo"
	"golang.org/x/sys/unix"
)

// baseMemo is the in-process state of in-place bases. Refs and expanded
// trees are memoized here, never written on the read path: PutTrees,
// PutGeneration and Resolve persist the refs that stored objects name.
type baseMemo struct {
	// mu protects every field below.
	mu    sync.Mutex
	refs  map[ID]BaseRef // refs built by CreateBase, CurrentRef and expansions
	trees map[ID]*Tree   // expansions of directory refs (GetTree hands out clones; Expanded the tree, read-only)
	// watched are the expansions listed under a watch of their base's
	// change watcher, with no event during the listing (ExpansionWatch).
	watched  map[ID]expansionWatch
	paths    map[ID]string      // base ID → its recorded directory (records are immutable)
	attached map[ID]*attachment // base ID → the Dir reads go through (AttachBase)
	// stored are refs known to be in the baserefs bucket (a transaction
	// that put or found them committed; emptied by GC): memoRefsNamed
	// skips them, so a capture does not encode and look up again the
	// references of every unchanged sibling it already stored.
	stored map[ID]struct{}
	// read holds the distinct paths whose content was opened (test hook),
	// at most maxReadPaths of them.
	read map[string]struct{}
	// gitReaders are the blob readers of git bases (gitref.go).
	gitReaders map[ID]*gitrepo.BlobReader
}

// expansionWatch is the change watcher that watched an expansion's
// directory from before it was listed, and its sequence number after.
type expansionWatch struct {
	w   Watcher
	seq uint64
}

// maxReadPaths bounds the distinct read paths remembered for BaseReadPaths.
const maxReadPaths = 4096

// attachment is one AttachBase registration; users counts OpenBase
// callers that have not released it yet.
type attachment struct {
	d     *dirfd.Dir
	users sync.WaitGroup
	// watch reports changes to d's tree (OpenBaseWatched; nil until tried,
	// or when unsupported); closed by detach. Both fields under baseMemo.mu.
	watch      Watcher
	watchTried bool
}

// baseRecord is the value in the bases bucket.
type baseRecord struct {
	Dir     string `json:"dir"`
	Created int64  `json:"created"` // Unix ms
	// Git: Dir is a repository's git directory, the base of git object
	// references (GitBase), not of an in-place workspace.
	Git bool `json:"git,omitempty"`
}

func (m *baseMemo) ref(id ID) (BaseRef, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.refs[id]
	return r, ok
}

func (m *baseMemo) addRef(id ID, r BaseRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refs == nil {
		m.refs = make(map[ID]BaseRef)
	}
	m.refs[id] = r
}

// BaseReads returns how many times this process opened a base file's
// content from its base directory (a test hook proving reads are lazy).
func (s *Store) BaseReads() int64 { return s.baseReads.Load() }

// BaseReadPaths returns the distinct base paths (relative to their base
// directory) whose content this process opened, sorted; at most the first
// 4096 are remembered.
func (s *Store) BaseReadPaths() []string {
	s.bases.mu.Lock()
	defer s.bases.mu.Unlock()
	out := make([]string, 0, len(s.bases.read))
	for p := range s.bases.read {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func (m *baseMemo) noteRead(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.read == nil {
		m.read = make(map[string]struct{})
	}
	if len(m.read) < maxReadPaths {
		m.read[p] = struct{}{}
	}
}

// CreateBase registers dir, an absolute path to an existing directory, as
// the base of an in-place workspace, and returns the new base ID and the
// ID of the reference to dir itself (a directory ref, usable as a
// generation root). It reads no content: one open and one stat.
//
// The base record is kept by GC only while some workspace's BaseRoot names
// it or a kept ref needs it; hold HoldGC from CreateBase until the
// workspace record is written.
func (s *Store) CreateBase(dir string) (base ID, root ID, err error) {
	if !filepath.IsAbs(dir) {
		return ID{}, ID{}, fmt.Errorf("create base %q: %w: not an absolute path", dir, ErrInvalidName)
	}
	dir = filepath.Clean(dir)
	d, err := dirfd.Open(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return ID{}, ID{}, fmt.Errorf("create base %s: %w: %w", dir, ErrNotDirectory, err)
		}
		return ID{}, ID{}, fmt.Errorf("create base %s: %w", dir, err)
	}
	defer d.Close()
	st, err := d.Lstat("")
	if err != nil {
		return ID{}, ID{}, fmt.Errorf("create base %s: %w", dir, err)
	}
	if _, err := rand.Read(base[:]); err != nil {
		return ID{}, ID{}, fmt.Errorf("create base %s: %w", dir, err)
	}
	ref, _ := baseRefFromStat(base, "", &st)
	enc, err := ref.Encode()
	if err != nil {
		return ID{}, ID{}, fmt.Errorf("create base %s: %w", dir, err)
	}
	rec, err := json.Marshal(baseRecord{Dir: dir, Created: s.clock()})
	if err != nil {
		return ID{}, ID{}, fmt.Errorf("create base %s: %w", dir, err)
	}
	root = BaseRefID(enc)
	err = s.update(func(tx *stx) error {
		if err := tx.put(prefixBases, base[:], rec); err != nil {
			return err
		}
		return tx.put(prefixBaseRefs, root[:], enc)
	})
	if err != nil {
		return ID{}, ID{}, fmt.Errorf("create base %s: %w", dir, err)
	}
	s.bases.addRef(root, ref)
	return base, root, nil
}

// BaseDirPath returns the directory base was registered with.
func (s *Store) BaseDirPath(base ID) (string, error) {
	s.bases.mu.Lock()
	p, ok := s.bases.paths[base]
	s.bases.mu.Unlock()
	if ok {
		return p, nil
	}
	var rec baseRecord
	err := s.view(func(tx *stx) error {
		v, err := tx.get(prefixBases, base[:])
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("base %s: %w", base.Short(), ErrNotFound)
		}
		if err := json.Unmarshal(v, &rec); err != nil || !filepath.IsAbs(rec.Dir) {
			return fmt.Errorf("%w: base %s: record %q", ErrCorrupt, base.Short(), v)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	s.bases.mu.Lock()
	if s.bases.paths == nil {
		s.bases.paths = make(map[ID]string)
	}
	s.bases.paths[base] = rec.Dir
	s.bases.mu.Unlock()
	return rec.Dir, nil
}

// AttachBase makes every access to base go through d until detach is
// called: the daemon mounts its overlay over the base directory and keeps
// d open on the directory underneath (opening it by path would then enter
// our own mount). detach waits until no OpenBase user of d is left, so the
// caller may close d right after it; it is idempotent. A later AttachBase
// of the same base replaces this one.
func (s *Store) AttachBase(base ID, d *dirfd.Dir) (detach func()) {
	a := &attachment{d: d}
	m := &s.bases
	m.mu.Lock()
	if m.attached == nil {
		m.attached = make(map[ID]*attachment)
	}
	m.attached[base] = a
	m.mu.Unlock()
	return sync.OnceFunc(func() {
		m.mu.Lock()
		if m.attached[base] == a {
			delete(m.attached, base)
		}
		m.mu.Unlock()
		// Every Add happened under m.mu while a was still attached.
		a.users.Wait()
		if a.watch != nil {
			_ = a.watch.Close()
			m.mu.Lock()
			for id, x := range m.watched {
				if x.w == a.watch {
					delete(m.watched, id) // nothing may keep a closed watcher alive
				}
			}
			m.mu.Unlock()
		}
	})
}

// maxBaseWatches bounds the directories a base's watcher watches. Watches
// come out of the user's inotify quota (fs.inotify.max_user_watches, 8,192
// on older kernels), which editors and build tools need too; past the
// bound (or the quota) directories are just not watched, and detection
// lists them as it did without events.
const maxBaseWatches = 8192

// BaseWatching reports how many directories of an attached base its
// change watcher watches; ok is false when the base is not attached or
// has no watcher (none created yet, or its file system is not one inotify
// fully reports).
func (s *Store) BaseWatching(base ID) (dirs int, ok bool) {
	m := &s.bases
	m.mu.Lock()
	a := m.attached[base]
	var w Watcher
	if a != nil {
		w = a.watch
	}
	m.mu.Unlock()
	if w == nil {
		return 0, false
	}
	dirs, _ = w.Watching()
	return dirs, true
}

// OpenBaseWatched is OpenBase that also returns the attached base's change
// watcher (created on first use), or nil when base is not attached or its
// file system is not one whose changes inotify fully reports. The watcher
// is valid until release.
func (s *Store) OpenBaseWatched(base ID) (d *dirfd.Dir, w Watcher, release func(), err error) {
	m := &s.bases
	m.mu.Lock()
	a := m.attached[base]
	if a == nil {
		m.mu.Unlock()
		d, release, err := s.OpenBase(base)
		return d, nil, release, err
	}
	a.users.Add(1)
	if !a.watchTried {
		a.watchTried = true
		if s.watchers != nil && s.watchers.Supported(a.d.Fd()) {
			if w, err := s.watchers.New(maxBaseWatches); err == nil {
				a.watch = w
			}
		}
	}
	w = a.watch
	m.mu.Unlock()
	return a.d, w, sync.OnceFunc(a.users.Done), nil
}

// OpenBase returns the directory of base: the attached Dir, or one opened
// at the recorded path. Call release when done with d (and do not close
// it); release is idempotent.
func (s *Store) OpenBase(base ID) (d *dirfd.Dir, release func(), err error) {
	m := &s.bases
	m.mu.Lock()
	if a := m.attached[base]; a != nil {
		a.users.Add(1)
		m.mu.Unlock()
		return a.d, sync.OnceFunc(a.users.Done), nil
	}
	m.mu.Unlock()
	dir, err := s.BaseDirPath(base)
	if err != nil {
		return nil, nil, err
	}
	d, err = dirfd.Open(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("base %s: %w", base.Short(), err)
	}
	return d, func() { d.Close() }, nil
}

// BaseRefOf returns the base reference id, from this process's memo or
// the baserefs bucket; false if id is not a known reference.
func (s *Store) BaseRefOf(id ID) (BaseRef, bool, error) {
	if r, ok := s.bases.ref(id); ok {
		return r, true, nil
	}
	var r BaseRef
	var found bool
	err := s.view(func(tx *stx) error {
		var err error
		r, found, err = storedRefTx(tx, id)
		return err
	})
	return r, found, err
}

func storedRefTx(tx *stx, id ID) (BaseRef, bool, error) {
	v, err := tx.get(prefixBaseRefs, id[:])
	if err != nil {
		return BaseRef{}, false, fmt.Errorf("base ref %s: %w", id.Short(), err)
	}
	if v == nil {
		return BaseRef{}, false, nil
	}
	if got := BaseRefID(v); got != id {
		return BaseRef{}, false, fmt.Errorf("%w: base ref %s: content hashes to %s", ErrCorrupt, id.Short(), got.Short())
	}
	r, err := DecodeBaseRef(v)
	if err != nil {
		return BaseRef{}, false, fmt.Errorf("base ref %s: %w", id.Short(), err)
	}
	return r, true, nil
}

// CurrentRef stats path in base now and returns the reference naming what
// is there, memoized in this process (not persisted). A path that does not
// exist (or is a fifo, socket or device, or lies under a symlink) is an
// error wrapping ErrNotFound.
func (s *Store) CurrentRef(base ID, path string) (BaseRef, ID, error) {
	if !validRefPath(path) {
		return BaseRef{}, ID{}, fmt.Errorf("base %s path %q: %w", base.Short(), path, ErrInvalidName)
	}
	d, release, err := s.OpenBase(base)
	if err != nil {
		return BaseRef{}, ID{}, err
	}
	defer release()
	st, err := d.Lstat(path)
	if err != nil {
		if dirfd.Missing(err) {
			return BaseRef{}, ID{}, fmt.Errorf("base %s path %q: %w", base.Short(), path, ErrNotFound)
		}
		return BaseRef{}, ID{}, fmt.Errorf("base %s: %w", base.Short(), err)
	}
	r, ok := baseRefFromStat(base, path, &st)
	if !ok {
		return BaseRef{}, ID{}, fmt.Errorf("base %s path %q: not a file, symlink or directory: %w", base.Short(), path, ErrNotFound)
	}
	id := r.ID()
	s.bases.addRef(id, r)
	return r, id, nil
}

// RefFromStat is CurrentRef for a path whose lstat the caller already has
// (from a dirfd listing of its parent, say): the reference naming what the
// stat describes, memoized in this process. ok is false for a fifo, socket
// or device, or an invalid path.
func (s *Store) RefFromStat(base ID, path string, st *unix.Stat_t) (r BaseRef, id ID, ok bool) {
	if !validRefPath(path) {
		return BaseRef{}, ID{}, false
	}
	if r, ok = baseRefFromStat(base, path, st); !ok {
		return BaseRef{}, ID{}, false
	}
	id = r.ID()
	s.bases.addRef(id, r)
	return r, id, true
}

// RefMatchingStat returns reference id when st (an lstat of path in base)
// is its fingerprint, as this process knows id: the caller may name what
// is at path by id without hashing a new reference.
func (s *Store) RefMatchingStat(id, base ID, path string, st *unix.Stat_t) (BaseRef, bool) {
	r, ok := s.bases.ref(id)
	if !ok {
		return BaseRef{}, false
	}
	nr, ok := baseRefFromStat(base, path, st)
	if !ok || nr != r {
		return BaseRef{}, false
	}
	return r, true
}

// Resolve records that reference ref's content is target: a stored blob
// for a file or symlink ref, a stored tree for a directory ref. Reads of
// ref then return target's content whatever happens to the base directory,
// so materialization calls it before overwriting a path whose old
// generations must stay readable. The ref itself is persisted if only
// memoized. Resolving again replaces the target (both must describe the
// same content). Hold HoldGC until something reachable names ref.
func (s *Store) Resolve(ref, target ID) error {
	memo, inMemo := s.bases.ref(ref)
	err := s.update(func(tx *stx) error {
		r, found, err := storedRefTx(tx, ref)
		if err != nil {
			return err
		}
		if !found {
			if !inMemo {
				return fmt.Errorf("base ref %s: %w", ref.Short(), ErrNotFound)
			}
			enc, err := memo.Encode()
			if err != nil {
				return err
			}
			if err := tx.put(prefixBaseRefs, ref[:], enc); err != nil {
				return err
			}
			r = memo
		}
		if r.Kind == KindDir {
			if target != emptyTreeID {
				if ok, err := tx.has(prefixTrees, target[:]); err != nil {
					return err
				} else if !ok {
					return fmt.Errorf("target tree %s: %w", target.Short(), ErrNotFound)
				}
			}
		} else if _, err := s.objs.Stat(bid(target)); err != nil {
			return fmt.Errorf("target %w", err)
		}
		return tx.put(prefixBaseResolved, ref[:], target[:])
	})
	if err != nil {
		return fmt.Errorf("resolve base ref %s: %w", ref.Short(), err)
	}
	return nil
}

// Resolution pairs a base reference with what it resolves to (Resolve).
type Resolution struct {
	Ref, Target ID
}

// ResolveMany stores trees and records every resolution in one metadata
// transaction (one sync instead of one per Resolve): what preserving the
// paths a capture or materialization replaces needs. A resolution's
// target is a blob that must already be durable (a committed BlobBatch),
// or a tree stored before or by this call. The trees' entries' refs and
// the resolved refs are persisted as by PutTrees and Resolve. Hold
// HoldGC until something reachable names the refs.
func (s *Store) ResolveMany(trees []*Tree, rs []Resolution) error {
	pr, err := s.PrepareResolve(trees, rs)
	if err != nil {
		return err
	}
	return s.WriteResolve(pr)
}

// TreeIDs returns the IDs of the prepared trees, in the order given.
func (pr *PreparedResolve) TreeIDs() []ID {
	if pr == nil {
		return nil
	}
	return pr.tids
}

// WriteResolve writes a prepared resolve in its own transaction (nil: no-op).
func (s *Store) WriteResolve(pr *PreparedResolve) error {
	if pr == nil {
		return nil
	}
	if lim, ok := s.txLimits(); ok {
		return pr.writeBounded(lim)
	}
	return s.update(pr.putTx)
}

// PreparedResolve is a ResolveMany encoded and ready to be written in
// another transaction: PublishGeneration takes it, so that a capture's
// preservation and its generation cost one metadata sync, not two. The
// same rules as for ResolveMany hold for its targets.
type PreparedResolve struct {
	s    *Store
	encs [][]byte
	tids []ID
	refs map[ID][]byte
	rs   []Resolution
}

// PrepareResolve encodes what ResolveMany(trees, rs) would write; nil
// when there is nothing to write. References that after (prepared
// writes that will be written first, in the same transaction or before)
// already carry are left to them.
func (s *Store) PrepareResolve(trees []*Tree, rs []Resolution, after ...*PreparedResolve) (*PreparedResolve, error) {
	if len(trees) == 0 && len(rs) == 0 {
		return nil, nil
	}
	pr := &PreparedResolve{s: s, encs: make([][]byte, len(trees)), tids: make([]ID, len(trees)), rs: rs}
	for i, t := range trees {
		enc, err := t.Encode()
		if err != nil {
			return nil, fmt.Errorf("resolve: put tree: %w", err)
		}
		pr.encs[i], pr.tids[i] = enc, TreeID(enc)
	}
	refs, err := s.memoRefsNamed(func(yield func(ID)) {
		carried := func(id ID) bool {
			for _, a := range after {
				if a != nil {
					if _, ok := a.refs[id]; ok {
						return true
					}
				}
			}
			return false
		}
		for _, t := range trees {
			for _, e := range t.Entries {
				if !carried(e.ID) {
					yield(e.ID)
				}
			}
		}
		for _, r := range rs {
			if !carried(r.Ref) {
				yield(r.Ref)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("resolve: %w", err)
	}
	pr.refs = refs
	return pr, nil
}

// putTx writes the prepared trees, refs and resolutions in tx.
func (pr *PreparedResolve) putTx(tx *stx) error {
	if err := putRefsTx(tx, &pr.s.bases, pr.refs); err != nil {
		return fmt.Errorf("resolve %d base refs: %w", len(pr.rs), err)
	}
	for i, enc := range pr.encs {
		ok, err := tx.has(prefixTrees, pr.tids[i][:])
		if err == nil && !ok {
			err = tx.put(prefixTrees, pr.tids[i][:], enc)
		}
		if err != nil {
			return fmt.Errorf("resolve %d base refs: %w", len(pr.rs), err)
		}
	}
	return pr.putResolutionsTx(tx, pr.rs)
}

// putResolutionsTx records the resolutions rs (of pr) after checking each.
func (pr *PreparedResolve) putResolutionsTx(tx *stx, rs []Resolution) error {
	for _, r := range rs {
		ref, found, err := storedRefTx(tx, r.Ref)
		if err != nil {
			return fmt.Errorf("resolve %d base refs: %w", len(pr.rs), err)
		}
		if !found {
			return fmt.Errorf("resolve %d base refs: base ref %s: %w", len(pr.rs), r.Ref.Short(), ErrNotFound)
		}
		if ref.Kind == KindDir {
			if r.Target != emptyTreeID {
				if ok, err := tx.has(prefixTrees, r.Target[:]); err != nil {
					return fmt.Errorf("resolve %d base refs: %w", len(pr.rs), err)
				} else if !ok {
					return fmt.Errorf("resolve %d base refs: target tree %s: %w", len(pr.rs), r.Target.Short(), ErrNotFound)
				}
			}
		} else if _, err := pr.s.objs.Stat(bid(r.Target)); err != nil {
			return fmt.Errorf("resolve %d base refs: target %w", len(pr.rs), err)
		}
		if err := tx.put(prefixBaseResolved, r.Ref[:], r.Target[:]); err != nil {
			return fmt.Errorf("resolve %d base refs: %w", len(pr.rs), err)
		}
	}
	return nil
}

// refState is what a read needs to know about a reference.
type refState struct {
	ref      BaseRef
	target   ID   // the resolution, if resolved
	resolved bool // target is set
}

// lookupRefTx finds id's reference (bucket, else memo) and resolution;
// false if id is no reference.
func (s *Store) lookupRefTx(tx *stx, id ID) (refState, bool, error) {
	var st refState
	r, found, err := storedRefTx(tx, id)
	if err != nil {
		return st, false, err
	}
	if !found {
		if r, found = s.bases.ref(id); !found {
			return st, false, nil
		}
	}
	st.ref = r
	v, err := tx.get(prefixBaseResolved, id[:])
	if err != nil {
		return st, false, fmt.Errorf("base ref %s: %w", id.Short(), err)
	}
	if v != nil {
		if len(v) != IDSize {
			return st, false, fmt.Errorf("%w: base ref %s: resolution of %d bytes", ErrCorrupt, id.Short(), len(v))
		}
		copy(st.target[:], v)
		st.resolved = true
	}
	return st, true, nil
}

// Resolution returns what reference id was resolved to (Resolve); ok is
// false when id is no reference or an unresolved one.
func (s *Store) Resolution(id ID) (target ID, ok bool, err error) {
	st, found, err := s.lookupRef(id)
	if err != nil || !found || !st.resolved {
		return ID{}, false, err
	}
	return st.target, true, nil
}

// RefStatus is what RefStatuses reports about one ID.
type RefStatus struct {
	IsRef    bool // a base reference (stored or memoized in this process)
	Resolved bool // resolved to a stored blob or tree (Resolve)
}

// RefStatuses looks up many IDs in one read transaction: whether each is a
// base reference and whether it is resolved. Detection of changes in an
// in-place directory asks this for every directory entry of a listing.
func (s *Store) RefStatuses(ids []ID) ([]RefStatus, error) {
	if len(ids) == 0 {
		return nil, nil // no transaction: a detection asks for every directory it checks, most have no subdirectories
	}
	out := make([]RefStatus, len(ids))
	err := s.view(func(tx *stx) error {
		for i, id := range ids {
			// A reference this process built (a listing's lstat, say) needs
			// no decoding and verification of its stored copy.
			if _, ok := s.bases.ref(id); ok {
				v, err := tx.get(prefixBaseResolved, id[:])
				if err != nil {
					return err
				}
				if v != nil && len(v) != IDSize {
					return fmt.Errorf("%w: base ref %s: resolution of %d bytes", ErrCorrupt, id.Short(), len(v))
				}
				out[i] = RefStatus{IsRef: true, Resolved: v != nil}
				continue
			}
			st, found, err := s.lookupRefTx(tx, id)
			if err != nil {
				return err
			}
			out[i] = RefStatus{IsRef: found, Resolved: found && st.resolved}
		}
		return nil
	})
	return out, err
}

func (s *Store) lookupRef(id ID) (refState, bool, error) {
	var st refState
	var found bool
	err := s.view(func(tx *stx) error {
		var err error
		st, found, err = s.lookupRefTx(tx, id)
		return err
	})
	return st, found, err
}

// blobRef returns the reference behind a blob ID whose object file does
// not exist; ok is false if id is no reference either. Directory refs are
// not blobs.
func (s *Store) blobRef(id ID) (refState, bool, error) {
	st, ok, err := s.lookupRef(id)
	if err != nil || !ok {
		return st, false, err
	}
	if st.ref.Kind == KindDir {
		return st, false, fmt.Errorf("blob %s: base ref to a directory: %w", id.Short(), ErrNotFound)
	}
	return st, true, nil
}

func baseChanged(id ID, r BaseRef, what string) error {
	return fmt.Errorf("base ref %s (%q): %s: %w", id.Short(), r.Path, what, ErrBaseChanged)
}

// statRef lstats r's path and checks the fingerprint.
func (s *Store) statRef(id ID, r BaseRef) (unix.Stat_t, error) {
	d, release, err := s.OpenBase(r.Base)
	if err != nil {
		return unix.Stat_t{}, refOpenError(id, r, err)
	}
	defer release()
	return statRefIn(d, id, r)
}

func statRefIn(d *dirfd.Dir, id ID, r BaseRef) (unix.Stat_t, error) {
	st, err := d.Lstat(r.Path)
	if err != nil {
		return st, refOpenError(id, r, err)
	}
	if !r.matches(&st) {
		return st, baseChanged(id, r, "fingerprint differs")
	}
	return st, nil
}

// refOpenError turns a vanished path (or base directory) into
// ErrBaseChanged.
func refOpenError(id ID, r BaseRef, err error) error {
	if dirfd.Missing(err) {
		return baseChanged(id, r, "gone")
	}
	return fmt.Errorf("base ref %s (%q): %w", id.Short(), r.Path, err)
}

// openRefFile opens a file ref's content in its base directory, checked
// against the fingerprint, and counts a base read.
func (s *Store) openRefFile(id ID, r BaseRef) (*os.File, error) {
	d, release, err := s.OpenBase(r.Base)
	if err != nil {
		return nil, refOpenError(id, r, err)
	}
	defer release()
	f, err := d.OpenFile(r.Path, os.O_RDONLY, 0)
	if err != nil {
		return nil, refOpenError(id, r, err)
	}
	s.baseReads.Add(1)
	s.bases.noteRead(r.Path)
	if err := checkRefFile(f, id, r); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func checkRefFile(f *os.File, id ID, r BaseRef) error {
	var st unix.Stat_t
	if err := fstat(f, &st); err != nil {
		return fmt.Errorf("base ref %s (%q): %w", id.Short(), r.Path, err)
	}
	if !r.matches(&st) {
		return baseChanged(id, r, "fingerprint differs")
	}
	return nil
}

func fstat(f *os.File, st *unix.Stat_t) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), st) }); err != nil {
		return err
	}
	return serr
}

// readRefLink returns a symlink ref's target.
func (s *Store) readRefLink(id ID, r BaseRef) ([]byte, error) {
	d, release, err := s.OpenBase(r.Base)
	if err != nil {
		return nil, refOpenError(id, r, err)
	}
	defer release()
	target, err := d.Readlink(r.Path)
	if err != nil {
		if errors.Is(err, unix.EINVAL) { // no longer a symlink
			return nil, baseChanged(id, r, "not a symlink")
		}
		return nil, refOpenError(id, r, err)
	}
	// A symlink's target never changes in place: if the path still has the
	// fingerprint after the readlink, the target read is the one named.
	if _, err := statRefIn(d, id, r); err != nil {
		return nil, err
	}
	return []byte(target), nil
}

// readRef is ReadBlob of an unresolved file or symlink ref.
func (s *Store) readRef(id ID, r BaseRef) ([]byte, error) {
	if r.Kind == KindSymlink {
		return s.readRefLink(id, r)
	}
	f, err := s.openRefFile(id, r)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readAllInto(f, make([]byte, 0, min(r.Size+1, 64<<20)))
	if err != nil {
		return nil, fmt.Errorf("base ref %s (%q): %w", id.Short(), r.Path, err)
	}
	// A write while we read changes mtime and ctime.
	if err := checkRefFile(f, id, r); err != nil {
		return nil, err
	}
	if int64(len(b)) != r.Size {
		return nil, baseChanged(id, r, fmt.Sprintf("read %d bytes, fingerprint says %d", len(b), r.Size))
	}
	return b, nil
}

func readAllInto(r io.Reader, b []byte) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// refReader streams an unresolved file ref and, at EOF, checks that the
// file still has its fingerprint (ErrBaseChanged instead of io.EOF if not).
type refReader struct {
	f   *os.File
	id  ID
	ref BaseRef
	n   int64
	err error // sticky terminal error
}

func (v *refReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.f.Read(p)
	v.n += int64(n)
	switch {
	case err == io.EOF:
		v.err = checkRefFile(v.f, v.id, v.ref)
		if v.err == nil && v.n != v.ref.Size {
			v.err = baseChanged(v.id, v.ref, fmt.Sprintf("read %d bytes, fingerprint says %d", v.n, v.ref.Size))
		}
		if v.err == nil {
			v.err = io.EOF
		}
		return n, v.err
	case err != nil:
		return n, fmt.Errorf("read base ref %s: %w", v.id.Short(), err)
	}
	return n, nil
}

func (v *refReader) Close() error { return v.f.Close() }

// memfdWith returns an unlinked in-memory file holding b, positioned at 0:
// OpenBlobFile of a symlink ref (a symlink has no file to open).
func memfdWith(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+name)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	return f, nil
}

// expandRef returns the tree of an unresolved directory ref: the memoized
// expansion, or a fresh listing of the directory if it still has the
// fingerprint. Children become memoized refs; nothing is persisted.
func (s *Store) expandRef(id ID, r BaseRef) (*Tree, error) {
	m := &s.bases
	m.mu.Lock()
	t, ok := m.trees[id]
	m.mu.Unlock()
	if ok {
		return cloneTree(t), nil
	}
	d, w, release, err := s.OpenBaseWatched(r.Base)
	if err != nil {
		return nil, refOpenError(id, r, err)
	}
	defer release()
	if _, err := statRefIn(d, id, r); err != nil {
		return nil, err
	}
	// Under the base's change watcher (a mounted base), the directory is
	// watched before it is listed: detection then knows the listing still
	// holds while no event came, without listing it again.
	var start uint64
	watched := false
	ents, err := d.ReadDirWith(r.Path, func(fd int) error {
		if w != nil && s.watchers.Supported(fd) {
			if _, err := w.Add(r.Path, fd); err == nil {
				start, err = w.Sync()
				watched = err == nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, refOpenError(id, r, err)
	}
	// An entry added or removed during the listing moves the directory's
	// mtime and ctime.
	if _, err := statRefIn(d, id, r); err != nil {
		return nil, err
	}
	var ew expansionWatch
	if watched {
		if seq, err := w.Sync(); err == nil && w.Quiet(r.Path, start, false) {
			ew = expansionWatch{w: w, seq: seq}
		}
	}
	t = &Tree{Entries: make([]Entry, 0, len(ents))}
	children := make(map[int]BaseRef, len(ents))
	for i := range ents {
		e := &ents[i]
		if !ValidName(e.Name) {
			continue
		}
		if k, ok := SpecialKindOfMode(e.Stat.Mode); ok {
			// A FIFO, socket or device has no content to refer to: the
			// entry itself is all there is.
			if e.Stat.Rdev > MaxRdev {
				continue // a device number no tree (nor FUSE) can carry
			}
			t.Entries = append(t.Entries, SpecialEntry(e.Name, k, e.Stat.Rdev, e.Stat.Mtim.Nano()).WithPerm(e.Stat.Mode))
			continue
		}
		c, ok := baseRefFromStat(r.Base, joinRefPath(r.Path, e.Name), &e.Stat)
		if !ok || !validRefPath(c.Path) {
			continue // a path too long to name, or a device number out of range
		}
		children[len(t.Entries)] = c
		t.Entries = append(t.Entries, Entry{Name: e.Name, Kind: c.Kind, Size: c.Size, Mtime: c.Mtime, ID: c.ID()}.WithPerm(c.Mode))
	}
	// ReadDir sorts by name, as trees are.
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.trees[id]; ok {
		return cloneTree(prev), nil // a concurrent expansion won
	}
	if m.refs == nil {
		m.refs = make(map[ID]BaseRef)
	}
	if m.trees == nil {
		m.trees = make(map[ID]*Tree)
	}
	for i, c := range children {
		m.refs[t.Entries[i].ID] = c
	}
	m.trees[id] = t
	if ew.w != nil {
		if m.watched == nil {
			m.watched = make(map[ID]expansionWatch)
		}
		m.watched[id] = ew
	}
	return cloneTree(t), nil
}

// ExpansionWatch reports the change watcher w that watched the directory
// of expansion id (Expanded) from before it was listed, and its sequence
// number seq after the listing: while w reports no event in that directory
// after seq, DIR still holds the listing.
func (s *Store) ExpansionWatch(id ID) (w Watcher, seq uint64, ok bool) {
	m := &s.bases
	m.mu.Lock()
	defer m.mu.Unlock()
	x, ok := m.watched[id]
	return x.w, x.seq, ok
}

// Expanded returns the listing this process handed out for the
// unresolved directory reference id (GetTree lists DIR once per reference
// and keeps the answer), if it did. Views loaded from it name its
// children's fingerprints: detection compares them with DIR. The tree is
// the store's own: callers must not modify it.
func (s *Store) Expanded(id ID) (*Tree, bool) {
	m := &s.bases
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.trees[id]
	return t, ok
}

func cloneTree(t *Tree) *Tree {
	return &Tree{Entries: append([]Entry(nil), t.Entries...)}
}

// memoRefsNamed returns the encodings of the memoized refs that ids name
// (callers persist them next to what names them).
func (s *Store) memoRefsNamed(each func(yield func(ID))) (map[ID][]byte, error) {
	m := &s.bases
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.refs) == 0 {
		return nil, nil
	}
	var out map[ID][]byte
	var err error
	each(func(id ID) {
		r, ok := m.refs[id]
		if !ok || err != nil {
			return
		}
		if _, ok := m.stored[id]; ok {
			return
		}
		if _, dup := out[id]; dup {
			return
		}
		var enc []byte
		if enc, err = r.Encode(); err != nil {
			return
		}
		if out == nil {
			out = make(map[ID][]byte)
		}
		out[id] = enc
	})
	return out, err
}

// putRefsTx persists refs not yet stored; once tx commits, memo knows them
// stored.
func putRefsTx(tx *stx, memo *baseMemo, refs map[ID][]byte) error {
	for id, enc := range refs {
		ok, err := tx.has(prefixBaseRefs, id[:])
		if err == nil && !ok {
			err = tx.put(prefixBaseRefs, id[:], enc)
		}
		if err != nil {
			return err
		}
	}
	if len(refs) > 0 {
		tx.onCommit(func() { memo.markStored(refs) })
	}
	return nil
}

// markStored records refs as stored.
func (m *baseMemo) markStored(refs map[ID][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stored == nil || len(m.stored) > maxStoredRefs {
		m.stored = make(map[ID]struct{}, len(refs))
	}
	for id := range refs {
		m.stored[id] = struct{}{}
	}
}

// forgetStored empties the stored set (GC may have swept any of them).
func (m *baseMemo) forgetStored() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stored = nil
}

// maxStoredRefs bounds the stored set; past it, it starts over.
const maxStoredRefs = 1 << 20
