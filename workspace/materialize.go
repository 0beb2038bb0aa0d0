package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// Materialization writes an in-place workspace's head into its directory
// under a journal (corestate family "materialize", key = workspace):
//
//  1. Plan (no journal yet, DIR untouched): diff the generation DIR holds
//     with the target; store every preimage — the content each edit
//     overwrites or removes — as a blob, and every reference the target
//     names for new content as a blob too, so nothing the edits need can be
//     destroyed by an earlier edit. Old generations stay readable: each
//     overwritten reference is resolved to its preimage.
//  2. Phase "prepared": the plan and preimages are durable. From here a
//     crash rolls forward: every edit is idempotent (write to a temporary
//     name in the same directory, then rename over the target).
//  3. Apply: removals and new directories, then every write's content
//     under its temporary name, the renames, and one concurrent wave of
//     fsyncs of the written files and changed directories. An error (not a
//     crash) while applying rolls back: the edits done so far are undone
//     from the preimages, phase "rolled-back".
//  4. The state record is updated (the new materialized generation and
//     shadow), then the journal deleted. A journal whose target the state
//     already names is complete: recovery drops it without touching DIR.
const familyMaterialize = "materialize"

// matTempPrefix names materialization temporaries inside DIR.
const matTempPrefix = ".acyclicfs-mat-"

func isMaterializeTemp(name string) bool { return strings.HasPrefix(name, matTempPrefix) }

type matJournal struct {
	Version   int       `json:"version"`
	Op        string    `json:"op"`
	Workspace string    `json:"workspace"`
	Dir       string    `json:"dir"`
	Base      store.ID  `json:"base"`
	From      store.ID  `json:"from"`
	To        store.ID  `json:"to"`
	Phase     string    `json:"phase"` // prepared, rolled-back
	Edits     []matEdit `json:"edits"`
}

// matEdit is one step. Ops: "remove" (a file or symlink), "rmdir" (an empty
// directory), "mkdir", "chmod" (a directory's mode alone changed), "write"
// (a file or symlink, replacing what is there).
type matEdit struct {
	Op    string     `json:"op"`
	Path  string     `json:"path"`
	Kind  store.Kind `json:"kind,omitempty"`
	ID    store.ID   `json:"id,omitempty"`
	Mtime int64      `json:"mtime,omitempty"`
	Rdev  uint64     `json:"rdev,omitempty"` // a device's number
	// What was at Path before (PreKind 0: nothing); for files and
	// symlinks Pre is a stored blob, for a device PreRdev its number.
	PreKind  store.Kind `json:"pre_kind,omitempty"`
	Pre      store.ID   `json:"pre,omitempty"`
	PreMtime int64      `json:"pre_mtime,omitempty"`
	PreRdev  uint64     `json:"pre_rdev,omitempty"`
	// Mode and PreMode: the permission bits where they are not the
	// kind's default (absent in journals from before modes were kept).
	Mode    *uint32 `json:"mode,omitempty"`
	PreMode *uint32 `json:"pre_mode,omitempty"`
}

// permOf is e's mode for a journal: nil for its kind's default.
func permOf(e *store.Entry) *uint32 {
	if !e.HasPerm() {
		return nil
	}
	p := e.Perm()
	return &p
}

// editPerm is the mode a journal's edit writes a kind with.
func editPerm(k store.Kind, p *uint32) uint32 {
	if p == nil {
		return store.DefaultPerm(k)
	}
	return *p & store.PermMask
}

func (m *inPlaces) materializeInPlace(name string, st inPlaceState, rev uint64, to store.ID) (int, error) {
	fromRoot, err := m.rootOf(st.Materialized)
	if err != nil {
		return 0, err
	}
	toRoot, err := m.rootOf(to)
	if err != nil {
		return 0, err
	}
	changes, err := rebase.Diff(merger{m.st}, fromRoot, toRoot)
	if err != nil {
		return 0, fmt.Errorf("plan materialization of %s: %w", name, err)
	}
	edits, err := m.planEdits(fromRoot, toRoot, changes)
	if err != nil {
		return 0, fmt.Errorf("plan materialization of %s: %w", name, err)
	}
	j := matJournal{Version: 1, Op: newOperationID(), Workspace: name, Dir: st.Dir, Base: st.Base,
		From: st.Materialized, To: to, Phase: "prepared", Edits: edits}
	if len(edits) > 0 {
		if _, err := m.cs.CompareAndSwap(familyMaterialize, name, 0, j); err != nil {
			return 0, fmt.Errorf("journal materialization of %s: %w", name, err)
		}
		failpoint.Hit("materialize.after-prepared")
		if err := m.applyEdits(&j); err != nil {
			return 0, err
		}
	}
	return len(edits), m.completeMaterialization(name, st, rev, &j, len(edits) > 0)
}

// planEdits turns a diff into ordered, idempotent edits: removals deepest
// first, then directories parents first, then writes.
func (m *inPlaces) planEdits(fromRoot, toRoot store.ID, changes []rebase.Change) ([]matEdit, error) {
	// Pin what DIR holds along every changed path (listings and replaced
	// files), so that the generation DIR held stays readable and a later
	// detection compares listings, not directory fingerprints our own
	// renames moved.
	if err := m.preserveReplaced(fromRoot, toRoot); err != nil {
		return nil, err
	}
	var removes, mkdirs, chmods, writes []matEdit
	removedDirs := map[string]store.Entry{}
	addedDirs := map[string]store.Entry{}
	for _, c := range changes {
		if c.Old != nil {
			for d := path.Dir(c.Path); d != "." && d != ""; d = path.Dir(d) {
				if _, seen := removedDirs[d]; !seen {
					removedDirs[d] = store.Entry{}
				}
			}
			if c.Old.Kind == store.KindDir {
				removedDirs[c.Path] = *c.Old
			} else if c.New == nil || c.Kind == rebase.TypeChg {
				pre, err := m.preserve(c.Old)
				if err != nil {
					return nil, fmt.Errorf("preimage of %s: %w", c.Path, err)
				}
				removes = append(removes, matEdit{Op: "remove", Path: c.Path, PreKind: c.Old.Kind, Pre: pre, PreMtime: c.Old.Mtime, PreRdev: c.Old.Rdev(), PreMode: permOf(c.Old)})
			}
		}
		if c.New != nil {
			for d := path.Dir(c.Path); d != "." && d != ""; d = path.Dir(d) {
				addedDirs[d] = store.Entry{}
			}
			if c.New.Kind == store.KindDir {
				addedDirs[c.Path] = *c.New
				if c.Old != nil && c.Old.Kind == store.KindDir {
					// Both directories: the differ reports one only for
					// its own mode.
					chmods = append(chmods, matEdit{Op: "chmod", Path: c.Path, Kind: store.KindDir, Mode: permOf(c.New),
						PreKind: store.KindDir, PreMode: permOf(c.Old)})
				}
				continue
			}
			id, err := m.preserve(c.New)
			if err != nil {
				return nil, fmt.Errorf("content of %s: %w", c.Path, err)
			}
			w := matEdit{Op: "write", Path: c.Path, Kind: c.New.Kind, ID: id, Mtime: c.New.Mtime, Rdev: c.New.Rdev(), Mode: permOf(c.New)}
			if c.Old != nil && c.Kind != rebase.TypeChg {
				pre, err := m.preserve(c.Old)
				if err != nil {
					return nil, fmt.Errorf("preimage of %s: %w", c.Path, err)
				}
				w.PreKind, w.Pre, w.PreMtime, w.PreRdev, w.PreMode = c.Old.Kind, pre, c.Old.Mtime, c.Old.Rdev(), permOf(c.Old)
			}
			writes = append(writes, w)
		}
	}
	// A directory present in from but absent in to is removed once empty;
	// one present in to but absent in from is created. The changed paths
	// share their ancestors: each tree is loaded (and verified) once.
	trees := map[store.ID]*store.Tree{}
	for d := range removedDirs {
		inTo, err := m.kindAt(trees, toRoot, d)
		if err != nil {
			return nil, err
		}
		if inTo == store.KindDir {
			continue
		}
		inFrom, err := m.kindAt(trees, fromRoot, d)
		if err != nil {
			return nil, err
		}
		if inFrom == store.KindDir {
			removes = append(removes, matEdit{Op: "rmdir", Path: d, PreKind: store.KindDir})
		}
	}
	for d := range addedDirs {
		inFrom, err := m.kindAt(trees, fromRoot, d)
		if err != nil {
			return nil, err
		}
		if inFrom != store.KindDir {
			to, err := m.entryIn(trees, toRoot, d)
			if err != nil {
				return nil, err
			}
			mkdirs = append(mkdirs, matEdit{Op: "mkdir", Path: d, Kind: store.KindDir, Mode: permOf(&to)})
		}
	}
	sort.Slice(removes, func(i, j int) bool { return removes[i].Path > removes[j].Path })
	sort.Slice(mkdirs, func(i, j int) bool { return mkdirs[i].Path < mkdirs[j].Path })
	sort.Slice(chmods, func(i, j int) bool { return chmods[i].Path < chmods[j].Path })
	sort.Slice(writes, func(i, j int) bool { return writes[i].Path < writes[j].Path })
	out := append(removes, mkdirs...)
	out = append(out, chmods...)
	return append(out, writes...), nil
}

// kindAt is the kind of the entry at p in root, 0 when absent. Trees it
// loads are kept in trees (by ID; never modified).
func (m *inPlaces) kindAt(trees map[store.ID]*store.Tree, root store.ID, p string) (store.Kind, error) {
	e, err := m.entryIn(trees, root, p)
	return e.Kind, err
}

// entryIn is the entry at p below root (kind 0: none), loading trees
// through the cache trees.
func (m *inPlaces) entryIn(trees map[store.ID]*store.Tree, root store.ID, p string) (store.Entry, error) {
	id := root
	parts := strings.Split(p, "/")
	for i, name := range parts {
		t := trees[id]
		if t == nil {
			var err error
			if t, err = m.st.GetTree(id); err != nil {
				return store.Entry{}, err
			}
			trees[id] = t
		}
		e, ok := t.Lookup(name)
		if !ok {
			return store.Entry{}, nil
		}
		if i == len(parts)-1 {
			return e, nil
		}
		if e.Kind != store.KindDir {
			return store.Entry{}, nil
		}
		id = e.ID
	}
	return store.Entry{Kind: store.KindDir, ID: root}, nil
}

// dirPerm is the mode a materialization gives a directory of mode p: p,
// with the owner's rwx added unless the daemon is root (which writes into
// any directory), so that what goes into it can be written.
func dirPerm(p *uint32) uint32 {
	perm := editPerm(store.KindDir, p)
	if os.Geteuid() != 0 {
		perm |= 0o700
	}
	return perm
}

// preserve makes sure e's content is a stored blob and returns its ID: a
// base reference is read now and resolved to the blob, so neither this
// materialization nor a later edit of DIR can lose it.
func (m *inPlaces) preserve(e *store.Entry) (store.ID, error) {
	if _, isRef, err := m.st.BaseRefOf(e.ID); err != nil {
		return store.ID{}, err
	} else if !isRef {
		return e.ID, nil
	}
	// Resolved already (a capture preserves what it replaces): the blob
	// is stored and durable.
	if target, ok, err := m.st.Resolution(e.ID); err != nil {
		return store.ID{}, err
	} else if ok {
		return target, nil
	}
	r, err := m.st.OpenBlob(e.ID)
	if err != nil {
		return store.ID{}, err
	}
	defer r.Close()
	id, _, err := m.st.WriteBlob(r)
	if err != nil {
		return store.ID{}, err
	}
	if err := m.st.Resolve(e.ID, id); err != nil {
		return store.ID{}, err
	}
	return id, nil
}

// applyEdits applies every edit; on an error it rolls back what was done.
func (m *inPlaces) applyEdits(j *matJournal) error {
	d, release, err := m.st.OpenBase(j.Base)
	if err != nil {
		return fmt.Errorf("open %s: %w", j.Dir, err)
	}
	defer release()
	// The plan puts writes last. Their contents are written under
	// temporary names all at once, after the removals and directories they
	// may need, and renamed into place in plan order. Then one concurrent
	// wave of fsyncs makes the written files and every changed directory
	// durable together (the file system merges concurrent fsyncs into few
	// journal commits). A crash before that wave completes leaves the
	// journal prepared, and recovery writes every edit again, synced, so
	// the order of renames and syncs is not what keeps DIR whole.
	writes := len(j.Edits)
	for writes > 0 && j.Edits[writes-1].Op == "write" {
		writes--
	}
	var temps []string
	var files []*os.File
	defer func() {
		for _, t := range temps {
			if t != "" {
				_ = d.Remove(t)
			}
		}
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i := range j.Edits {
		if i == writes {
			temps, files, err = m.prepareWrites(d, j, writes)
		}
		if err == nil {
			if i >= writes {
				err = placeTemp(d, j.Edits[i].Path, temps[i-writes])
				temps[i-writes] = ""
			} else {
				err = m.applyEdit(d, j, i)
			}
		}
		if err == nil && i == 0 {
			failpoint.Hit("materialize.after-first")
			err = failpoint.Fail("materialize.apply")
		}
		if err != nil {
			rerr := m.rollbackEdits(d, j, i)
			if rerr != nil {
				return fmt.Errorf("materialize into %s: %w (rollback failed, journal kept for recovery: %w)", j.Dir, err, rerr)
			}
			return fmt.Errorf("materialize into %s: %w (rolled back: %s is as it was)", j.Dir, err, j.Dir)
		}
	}
	if err := syncApplied(d, j.Edits, files); err != nil {
		return err // the journal stays prepared: the next sync rolls forward
	}
	failpoint.Hit("materialize.after-apply")
	return nil
}

// prepareWrites writes the contents of edits [from:] (all writes) under
// temporary names, a few at a time, not yet synced; it returns their names
// and open files (nil for symlinks) in order, for syncApplied. On error
// the temporaries already written are removed.
func (m *inPlaces) prepareWrites(d *dirfd.Dir, j *matJournal, from int) ([]string, []*os.File, error) {
	n := len(j.Edits) - from
	temps := make([]string, n)
	files := make([]*os.File, n)
	errs := make([]error, n)
	// Part of one journaled step: every write runs (no cancellation
	// here), and every error is reported.
	var g errgroup.Group
	g.SetLimit(8)
	for k := range n {
		i := from + k
		e := &j.Edits[i]
		g.Go(func() error {
			temps[k], files[k], errs[k] = m.writeTemp(d, e.Path, e.Kind, editPerm(e.Kind, e.Mode), e.ID, e.Rdev, e.Mtime, fmt.Sprintf("%s%s-%d", matTempPrefix, j.Op[:8], i), true)
			return nil
		})
	}
	_ = g.Wait() // the errors are in errs
	if err := errors.Join(errs...); err != nil {
		for k, t := range temps {
			if files[k] != nil {
				files[k].Close()
			}
			if t != "" {
				_ = d.Remove(t)
			}
		}
		return nil, nil, err
	}
	return temps, files, nil
}

// applyEdit applies edit i. Every edit is idempotent, also when later
// edits were applied already (a roll forward after a crash starts again at
// the first edit): a path under a directory a later edit replaced by a
// file or symlink is absent (dirfd.Missing: a walk inside DIR never
// follows a symlink), a file's removal leaves a directory a later edit
// made at its name, and a directory that already exists is kept.
//
// DIR may hold entries the view did not show (a device whose number no
// tree can hold, or a node made after the detection). Where the new tree
// puts a directory at such a name, the node is replaced; a directory the
// tree drops but that still holds such entries is kept, and the next
// detection takes it back into the workspace as DIR's: nothing is deleted
// that the view never showed.
func (m *inPlaces) applyEdit(d *dirfd.Dir, j *matJournal, i int) error {
	e := &j.Edits[i]
	switch e.Op {
	case "remove":
		st, err := d.Lstat(e.Path)
		if dirfd.Missing(err) || err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return nil // gone, or replaced by a directory a later edit made
		}
		if err == nil {
			err = d.Remove(e.Path)
		}
		if err != nil && !dirfd.Missing(err) {
			return fmt.Errorf("remove %s: %w", e.Path, err)
		}
	case "rmdir":
		if err := d.Remove(e.Path); err != nil && !dirfd.Missing(err) && !errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("remove directory %s: %w", e.Path, err)
		}
	case "mkdir":
		err := d.Mkdir(e.Path, 0o700)
		if errors.Is(err, fs.ErrExist) {
			err = replaceSpecial(d, e.Path)
		}
		if err == nil {
			err = d.Chmod(e.Path, dirPerm(e.Mode)) // its mode; umask does not apply
		}
		if err != nil {
			return fmt.Errorf("create directory %s: %w", e.Path, err)
		}
	case "chmod":
		if err := d.Chmod(e.Path, dirPerm(e.Mode)); err != nil && !dirfd.Missing(err) {
			return fmt.Errorf("chmod directory %s: %w", e.Path, err)
		}
	case "write":
		return m.writeEntry(d, e.Path, e.Kind, editPerm(e.Kind, e.Mode), e.ID, e.Rdev, e.Mtime, fmt.Sprintf("%s%s-%d", matTempPrefix, j.Op[:8], i))
	default:
		return fmt.Errorf("%w: materialization edit %q", store.ErrCorrupt, e.Op)
	}
	return nil
}

// writeEntry places a file, symlink or special file at p: written in full
// under a temporary name in the same directory, synced, then renamed over p.
func (m *inPlaces) writeEntry(d *dirfd.Dir, p string, kind store.Kind, perm uint32, id store.ID, rdev uint64, mtime int64, tempName string) error {
	tmp, _, err := m.writeTemp(d, p, kind, perm, id, rdev, mtime, tempName, false)
	if err != nil {
		return err
	}
	return placeTemp(d, p, tmp)
}

// writeTemp writes p's new content under tempName in p's directory, with
// its mode (perm) and mtime, and returns the temporary's path. With keep, a file
// is left open and unsynced and returned (the caller syncs and closes it);
// otherwise it is synced and closed.
func (m *inPlaces) writeTemp(d *dirfd.Dir, p string, kind store.Kind, perm uint32, id store.ID, rdev uint64, mtime int64, tempName string, keep bool) (string, *os.File, error) {
	tmp := joinRel(path.Dir(p), tempName)
	if path.Dir(p) == "." {
		tmp = tempName
	}
	if err := d.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("remove stale %s: %w", tmp, err)
	}
	var kept *os.File
	if kind.IsSpecial() {
		// A FIFO, socket node or device: a name, nothing to sync but the
		// directory. A device needs CAP_MKNOD: without it the error
		// rolls the materialization back and says so.
		if err := d.Mknod(tmp, store.SpecialMode(kind)|perm&0o777, rdev); err != nil {
			return "", nil, fmt.Errorf("create %s %s: %w", kind, p, err)
		}
		if err := d.Chmod(tmp, perm); err != nil { // umask may have narrowed it
			_ = d.Remove(tmp)
			return "", nil, fmt.Errorf("create %s %s: %w", kind, p, err)
		}
	} else if kind == store.KindSymlink {
		target, err := m.st.ReadBlob(id)
		if err != nil {
			return "", nil, fmt.Errorf("symlink %s: %w", p, err)
		}
		if err := d.Symlink(string(target), tmp); err != nil {
			return "", nil, fmt.Errorf("symlink %s: %w", p, err)
		}
	} else {
		// Private while written, then the recorded mode (fchmod: no umask).
		f, err := d.OpenFile(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			return "", nil, fmt.Errorf("write %s: %w", p, err)
		}
		_, err = m.st.CopyBlob(id, f) // keeps a sparse blob's holes
		if err == nil {
			err = unix.Fchmod(int(f.Fd()), perm)
		}
		if err == nil && !keep {
			err = f.Sync()
		}
		if err == nil && keep {
			kept = f
		} else if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if kept != nil {
				kept.Close()
			}
			_ = d.Remove(tmp)
			return "", nil, fmt.Errorf("write %s: %w", p, err)
		}
	}
	if mtime != 0 {
		_ = d.SetMtime(tmp, mtime)
	}
	return tmp, kept, nil
}

// replaceSpecial makes p, where mkdir found something, a directory: a
// directory is kept; a fifo, socket or device node (a name without
// content, which the workspace cannot show) is replaced; a file or
// symlink is an error (the plan did not expect it there).
func replaceSpecial(d *dirfd.Dir, p string) error {
	st, err := d.Lstat(p)
	if err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return nil
	case unix.S_IFREG, unix.S_IFLNK:
		return fmt.Errorf("%w: a file is there", fs.ErrExist)
	}
	if err := d.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return d.Mkdir(p, 0o755)
}

// placeTemp renames a temporary from writeTemp over p.
func placeTemp(d *dirfd.Dir, p, tmp string) error {
	if err := d.Rename(tmp, p); err != nil {
		_ = d.Remove(tmp)
		return fmt.Errorf("place %s: %w", p, err)
	}
	return nil
}

// rollbackEdits undoes edits [0, upto] in reverse from their preimages.
func (m *inPlaces) rollbackEdits(d *dirfd.Dir, j *matJournal, upto int) error {
	for i := upto; i >= 0; i-- {
		e := &j.Edits[i]
		var err error
		switch e.Op {
		case "mkdir":
			if err = d.Remove(e.Path); dirfd.Missing(err) || errors.Is(err, unix.ENOTEMPTY) {
				err = nil // gone, or holding what the view never showed: kept
			}
		case "rmdir":
			if err = d.Mkdir(e.Path, 0o755); errors.Is(err, fs.ErrExist) {
				err = nil
			}
		case "chmod":
			if err = d.Chmod(e.Path, dirPerm(e.PreMode)); dirfd.Missing(err) {
				err = nil
			}
		case "remove", "write":
			switch {
			case e.PreKind == 0:
				if err = d.Remove(e.Path); dirfd.Missing(err) {
					err = nil
				}
			default:
				err = m.writeEntry(d, e.Path, e.PreKind, editPerm(e.PreKind, e.PreMode), e.Pre, e.PreRdev, e.PreMtime, fmt.Sprintf("%s%s-r%d", matTempPrefix, j.Op[:8], i))
			}
		}
		if err != nil {
			return fmt.Errorf("restore %s: %w", e.Path, err)
		}
	}
	if err := syncEditDirs(d, j.Edits[:upto+1]); err != nil {
		return err
	}
	// The restored files are new files with the old content: record their
	// fingerprints, so that they are not taken for edits by other programs.
	puts := map[string][]byte{}
	for _, e := range j.Edits[:upto+1] {
		if e.PreKind == 0 {
			continue
		}
		if _, id, err := m.st.CurrentRef(j.Base, e.Path); err == nil {
			puts[e.Path] = append([]byte(nil), id[:]...)
		}
	}
	if len(puts) > 0 {
		st, rev, found, err := m.loadInPlace(j.Workspace)
		if err != nil {
			return err
		}
		if found {
			if st.Shadow, err = m.st.OverlayApply(st.Shadow, puts, nil); err != nil {
				return fmt.Errorf("record fingerprints: %w", err)
			}
			if err := m.putInPlace(j.Workspace, rev, st, false); err != nil {
				return err
			}
		}
	}
	j.Phase = "rolled-back"
	return m.dropMaterialization(j.Workspace)
}

// syncEditDirs fsyncs every directory an edit changed an entry of.
func syncEditDirs(d *dirfd.Dir, edits []matEdit) error {
	return syncApplied(d, edits, nil)
}

// syncApplied fsyncs files (written, not yet synced; nil entries are
// skipped) and every directory an edit changed an entry of, all
// concurrently: the file system merges concurrent fsyncs into fewer
// journal commits.
func syncApplied(d *dirfd.Dir, edits []matEdit, files []*os.File) error {
	dirs := map[string]bool{}
	for _, e := range edits {
		p := path.Dir(e.Path)
		if p == "." {
			p = ""
		}
		dirs[p] = true
	}
	var syncs []func() error
	for _, f := range files {
		if f != nil {
			syncs = append(syncs, func() error {
				if err := f.Sync(); err != nil {
					return fmt.Errorf("sync %s: %w", f.Name(), err)
				}
				return nil
			})
		}
	}
	for p := range dirs {
		syncs = append(syncs, func() error {
			// A directory an edit removed (or replaced by a file or a
			// symlink) is gone.
			if err := d.SyncDir(p); err != nil && !dirfd.Missing(err) {
				return fmt.Errorf("sync %s: %w", p, err)
			}
			return nil
		})
	}
	errs := make([]error, len(syncs))
	var g errgroup.Group
	g.SetLimit(16)
	for i, fn := range syncs {
		g.Go(func() error {
			errs[i] = fn()
			return nil
		})
	}
	_ = g.Wait() // every sync runs; the errors are in errs
	return errors.Join(errs...)
}

// completeMaterialization records that DIR holds j.To (with the shadow
// fingerprints of what was written), then drops the journal. Two durable
// writes, not one transaction: a journal whose workspace's state already
// says DIR holds its target is complete, and recovery only drops it
// (finishMaterialization), so a crash between the two never writes DIR
// again.
func (m *inPlaces) completeMaterialization(name string, st inPlaceState, rev uint64, j *matJournal, journaled bool) error {
	puts := map[string][]byte{}
	var dels []string
	for _, e := range j.Edits {
		switch {
		case e.Op == "write" && e.Kind.IsSpecial():
			// No content, no fingerprint: detection compares kind and
			// device number. Whatever was recorded there goes.
			dels = append(dels, e.Path)
		case e.Op == "write":
			_, id, err := m.st.CurrentRef(j.Base, e.Path)
			if err != nil {
				return fmt.Errorf("fingerprint %s: %w", e.Path, err)
			}
			puts[e.Path] = append([]byte(nil), id[:]...)
		case e.Op == "remove":
			dels = append(dels, e.Path)
		}
	}
	// A path whose kind changed was removed, then written: it holds the write.
	dels = slices.DeleteFunc(dels, func(p string) bool { _, ok := puts[p]; return ok })
	shadow := st.Shadow
	if len(puts)+len(dels) > 0 {
		var err error
		if shadow, err = m.st.OverlayApply(st.Shadow, puts, dels); err != nil {
			return fmt.Errorf("record fingerprints: %w", err)
		}
	}
	st.Materialized = j.To
	st.Shadow = shadow
	if err := m.putInPlace(name, rev, st, false); err != nil {
		return fmt.Errorf("complete materialization of %s: %w", name, err)
	}
	if !journaled {
		return nil
	}
	failpoint.Hit("materialize.after-state")
	if err := m.dropMaterialization(name); err != nil {
		return fmt.Errorf("complete materialization of %s: %w", name, err)
	}
	return nil
}

func (m *inPlaces) dropMaterialization(name string) error {
	rev, found, err := m.cs.Load(familyMaterialize, name, &matJournal{})
	if err != nil || !found {
		return err
	}
	return m.cs.CompareAndDelete(familyMaterialize, name, rev)
}

// finishMaterialization rolls an interrupted materialization of name
// forward (its journal is prepared: every preimage is stored).
func (m *inPlaces) finishMaterialization(name string) error {
	var j matJournal
	_, found, err := m.cs.Load(familyMaterialize, name, &j)
	if err != nil || !found {
		return err
	}
	if j.Phase != "prepared" {
		return m.dropMaterialization(name)
	}
	st, rev, found, err := m.loadInPlace(name)
	if err != nil {
		return err
	}
	if !found || st.Materialized == j.To {
		// Gone, or complete: the state was recorded, only the journal's
		// removal was lost. DIR may have changed since; leave it be.
		return m.dropMaterialization(name)
	}
	d, release, err := m.st.OpenBase(j.Base)
	if err != nil {
		return fmt.Errorf("open %s: %w", j.Dir, err)
	}
	for i := range j.Edits {
		if err := m.applyEdit(d, &j, i); err != nil {
			release()
			return fmt.Errorf("roll materialization into %s forward: %w", j.Dir, err)
		}
	}
	err = syncEditDirs(d, j.Edits)
	release()
	if err != nil {
		return err
	}
	return m.completeMaterialization(name, st, rev, &j, true)
}

// recoverMaterializations rolls every interrupted materialization forward.
// One whose directory cannot be reached (a dead mount still covers it) is
// left for the remount, which detaches the mount first.
func (m *inPlaces) recoverMaterializations() ([]string, error) {
	names, err := m.cs.Keys(familyMaterialize)
	if err != nil {
		return nil, err
	}
	var done []string
	for _, n := range names {
		var j matJournal
		if _, found, err := m.cs.Load(familyMaterialize, n, &j); err != nil || !found {
			continue
		}
		if deadMount(j.Dir) {
			continue
		}
		if err := m.finishMaterialization(n); err != nil {
			// DIR is the user's directory, not the store: a roll forward
			// that fails there (a directory made unwritable, a full disk)
			// must not lock every command out of the store. The journal
			// stays; the workspace's own next sync (its mount, unmount or
			// lease end) tries again and reports the error, and status
			// lists it meanwhile.
			m.opt.Warn(fmt.Sprintf("materialization of %s into %s: not rolled forward yet: %v", n, j.Dir, err))
			continue
		}
		done = append(done, "materialization of "+n+" into "+j.Dir+": rolled forward")
	}
	return done, nil
}

// deadMount reports whether dir is covered by a FUSE mount whose daemon is
// gone. A stat may still be answered from the kernel's attribute cache,
// and an open of a directory sends nothing once the mount declined
// OPENDIR; statfs always reaches the connection.
func deadMount(dir string) bool {
	var sf unix.Statfs_t
	err := unix.Statfs(dir, &sf)
	return errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.EIO) || errors.Is(err, unix.ECONNABORTED)
}

// PendingMaterializations is Manager.PendingMaterializations.
func (m *inPlaces) PendingMaterializations() ([]string, error) {
	names, err := m.cs.Keys(familyMaterialize)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		var j matJournal
		if _, found, err := m.cs.Load(familyMaterialize, n, &j); err == nil && found {
			out = append(out, fmt.Sprintf("materialization of %s into %s (%d edits, phase %s)", n, j.Dir, len(j.Edits), j.Phase))
		}
	}
	return out, nil
}
