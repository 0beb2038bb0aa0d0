package gitmerge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// Store is what the merger reads and writes. *store.Store satisfies it
// (and BlobPather).
type Store interface {
	GetTree(id store.ID) (*store.Tree, error)
	PutTree(t *store.Tree) (store.ID, error)
	OpenBlob(id store.ID) (io.ReadCloser, error)
	WriteBlob(r io.Reader) (store.ID, int64, error)
}

// BlobPather is optionally implemented by a Store whose blobs are plain
// files that are never written once they exist: the merger then hard-links
// them into its temp git directory instead of copying.
type BlobPather interface {
	BlobPath(id store.ID) string
}

// Conflict kinds the merger reports (beside rebase's own).
const (
	// ConflictRef: a ref both sides moved to commits git cannot merge
	// cleanly (or a ref that is not a branch moved differently). Ours
	// stays; theirs is kept at refs/acyclicfs/theirs/<name minus refs/>.
	ConflictRef rebase.ConflictKind = "git-ref"
	// ConflictIndex: staged, uncommitted changes that cannot be combined
	// with the merged HEAD or with each other. Ours' index stays.
	ConflictIndex rebase.ConflictKind = "git-index"
	// ConflictObject: an object file with the same name and different
	// content on the two sides (a corrupt object). Ours stays.
	ConflictObject rebase.ConflictKind = "git-object"
	// ConflictHead: HEAD names a branch that the merge removed.
	ConflictHead rebase.ConflictKind = "git-head"
)

// DefaultTimeout bounds all git runs of one MergeSubtree.
const DefaultTimeout = 60 * time.Second

// TheirsPrefix is where a ref's theirs value is kept when the merge keeps
// ours on the ref.
const TheirsPrefix = "refs/acyclicfs/theirs/"

// Merger merges git directories; it implements rebase.SubtreeMerger. It
// is safe for concurrent use.
type Merger struct {
	// Store holds the trees and blobs of the three sides; the merged
	// objects are written to it.
	Store Store
	// Git is the git binary; empty means "git" on PATH. It must be 2.38
	// or later.
	Git string
	// TempDir is where the private git directory of a merge is made (and
	// removed); empty means os.TempDir(). Hard links need it on the
	// store's filesystem, else objects are copied.
	TempDir string
	// Timeout bounds all git runs of one MergeSubtree; zero means
	// DefaultTimeout. On timeout git is killed and MergeSubtree fails with
	// ErrGitTimeout (Merge3 then fails and publishes nothing; blobs
	// already written are unreferenced and left to the store's GC).
	Timeout time.Duration
}

// New returns a Merger over s with default settings.
func New(s Store) *Merger { return &Merger{Store: s} }

func (m *Merger) gitBin() string {
	if m.Git == "" {
		return "git"
	}
	return m.Git
}

var _ rebase.SubtreeMerger = (*Merger)(nil)

// MergeSubtree merges the git directory at p (see rebase.SubtreeMerger).
// It declines (ok false) anything whose last element is not ".git" or
// where either side lacks HEAD, objects/ or refs/.
func (m *Merger) MergeSubtree(p string, base, ours, theirs *store.Entry) (*store.Entry, []rebase.Conflict, bool, error) {
	if path.Base(p) != ".git" || ours == nil || theirs == nil || ours.Kind != store.KindDir || theirs.Kind != store.KindDir {
		return nil, nil, false, nil
	}
	ot, err := m.Store.GetTree(ours.ID)
	if err != nil {
		return nil, nil, false, fmt.Errorf("gitmerge: read %s (ours): %w", p, err)
	}
	tt, err := m.Store.GetTree(theirs.ID)
	if err != nil {
		return nil, nil, false, fmt.Errorf("gitmerge: read %s (theirs): %w", p, err)
	}
	if !isGitDir(ot) || !isGitDir(tt) {
		return nil, nil, false, nil
	}
	bt := &store.Tree{}
	if base != nil && base.Kind == store.KindDir {
		if bt, err = m.Store.GetTree(base.ID); err != nil {
			return nil, nil, false, fmt.Errorf("gitmerge: read %s (base): %w", p, err)
		}
	}
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	j := &job{
		m:     m,
		ctx:   ctx,
		path:  p,
		bt:    bt,
		ot:    ot,
		tt:    tt,
		stamp: max(ours.Mtime, theirs.Mtime),
		blobs: map[store.ID][]byte{},
	}
	defer j.close()
	id, err := j.run()
	if err != nil {
		return nil, nil, false, err
	}
	e := *ours
	e.ID = id
	e.Mtime = j.stamp
	sort.Slice(j.conflicts, func(a, b int) bool { return j.conflicts[a].Path < j.conflicts[b].Path })
	return &e, j.conflicts, true, nil
}

func isGitDir(t *store.Tree) bool {
	h, ok1 := t.Lookup("HEAD")
	o, ok2 := t.Lookup("objects")
	r, ok3 := t.Lookup("refs")
	return ok1 && ok2 && ok3 && h.Kind.IsRegular() && o.Kind == store.KindDir && r.Kind == store.KindDir
}

// job is one MergeSubtree.
type job struct {
	m          *Merger
	ctx        context.Context
	path       string // the .git directory's path from the root
	bt, ot, tt *store.Tree
	stamp      int64 // mtime of entries the merge makes
	conflicts  []rebase.Conflict
	blobs      map[store.ID][]byte // small blobs read (refs, HEAD)

	objects   *objectsMerge
	refs      *refsResult
	mergeDate string // date of the last merge commit made
	repo      *repo
	// reflogAdd are reflog lines the merge adds (a merge commit), by
	// reflog path under logs/ ("refs/heads/main", "HEAD").
	reflogAdd map[string][]string
}

func (j *job) close() { j.repo.close() }

func (j *job) full(rel string) string { return j.path + "/" + rel }

func (j *job) conflict(kind rebase.ConflictKind, rel string, b, o, t *store.Entry) {
	j.conflicts = append(j.conflicts, rebase.Conflict{Path: j.full(rel), Kind: kind, Base: clone(b), Ours: clone(o), Theirs: clone(t)})
}

// git returns the temp repository, making it (and linking every object
// into it) on first use: a merge that needs no git never pays for it.
func (j *job) git() (*repo, error) {
	if j.repo != nil {
		return j.repo, nil
	}
	if err := checkVersionOnce(j.m.gitBin()); err != nil {
		return nil, err
	}
	format, err := j.objectFormat()
	if err != nil {
		return nil, err
	}
	r, err := j.m.newRepo(j.ctx, format)
	if err != nil {
		return nil, err
	}
	if err := j.addSideAlternates(r); err != nil {
		r.close()
		return nil, err
	}
	objs, later, err := j.objects.linkList(j)
	if err != nil {
		r.close()
		return nil, err
	}
	loose, packs := splitPacks(objs)
	if err := r.link(packs); err != nil {
		r.close()
		return nil, err
	}
	if err := r.pack(loose); err != nil {
		r.close()
		return nil, err
	}
	shallow, err := j.shallowUnion()
	if err != nil {
		r.close()
		return nil, err
	}
	if shallow != nil {
		if err := writeFile(r.gitDir+"/shallow", shallow); err != nil {
			r.close()
			return nil, err
		}
	}
	r.later = later
	j.repo = r
	return r, nil
}

// run merges the top level of the git directory and returns the merged
// tree's ID.
func (j *job) run() (store.ID, error) {
	out := map[string]*store.Entry{}
	var err error
	if j.objects, err = j.mergeObjects(); err != nil {
		return store.ID{}, err
	}
	refs, err := j.mergeRefs()
	if err != nil {
		return store.ID{}, err
	}
	j.refs = refs
	out["refs"], out["packed-refs"] = refs.refsEntry, refs.packedEntry
	if out["HEAD"], err = j.mergeHEAD(refs); err != nil {
		return store.ID{}, err
	}
	if out["index"], err = j.mergeIndex(refs, out["HEAD"]); err != nil {
		return store.ID{}, err
	}
	// Crash tests: git has run and written objects back, nothing merged
	// is referenced yet.
	failpoint.Hit("gitmerge.after-git")
	handled := map[string]bool{"objects": true, "refs": true, "packed-refs": true, "HEAD": true, "index": true}
	var rerr error
	eachName(j.bt, j.ot, j.tt, func(name string, b, o, t *store.Entry) {
		if handled[name] || rerr != nil {
			return
		}
		out[name], rerr = j.mergeTop(name, b, o, t)
	})
	if rerr != nil {
		return store.ID{}, rerr
	}
	if out["objects"], err = j.objects.finish(j); err != nil {
		return store.ID{}, err
	}
	t := &store.Tree{}
	for name, e := range out {
		if e != nil {
			c := *e
			c.Name = name
			t.Entries = append(t.Entries, c)
		}
	}
	t.Sort()
	return j.putTree(t, "")
}

// scratch are the single-value files (and directories of them) where the
// newer side wins when both changed: git rewrites them whole, and no
// reader needs both.
var scratch = map[string]bool{
	"COMMIT_EDITMSG": true, "ORIG_HEAD": true, "FETCH_HEAD": true, "MERGE_MSG": true,
	"MERGE_HEAD": true, "MERGE_MODE": true, "MERGE_RR": true, "AUTO_MERGE": true,
	"CHERRY_PICK_HEAD": true, "REVERT_HEAD": true, "SQUASH_MSG": true, "TAG_EDITMSG": true,
	"description": true, "hooks": true, "info": true, "gitk.cache": true,
}

func (j *job) mergeTop(name string, b, o, t *store.Entry) (*store.Entry, error) {
	switch {
	case name == "logs":
		return j.mergeLogs(b, o, t)
	case name == "shallow" && !rebase.SameContent(o, t) && !rebase.SameContent(b, o) && !rebase.SameContent(b, t) && o != nil && t != nil:
		data, err := j.shallowUnion()
		if err != nil {
			return nil, err
		}
		return j.newBlobEntry(data, o, t)
	case scratch[name]:
		return j.merge3(name, b, o, t, newer)
	}
	return j.merge3(name, b, o, t, oursPolicy)
}

// policy settles a path both sides changed differently that is not a
// directory on both: rel is its path under .git.
type policy func(j *job, rel string, b, o, t *store.Entry) (*store.Entry, error)

func oursPolicy(_ *job, _ string, _, o, _ *store.Entry) (*store.Entry, error) { return clone(o), nil }

// newer takes the side with the later mtime (ours on a tie, or where a
// side deleted it).
func newer(_ *job, _ string, _, o, t *store.Entry) (*store.Entry, error) {
	if o != nil && t != nil && t.Mtime > o.Mtime {
		return clone(t), nil
	}
	return clone(o), nil
}

// merge3 merges a path under .git: unchanged on one side takes the other,
// directories on both recurse, anything else is pol's to settle.
func (j *job) merge3(rel string, b, o, t *store.Entry, pol policy) (*store.Entry, error) {
	switch {
	case rebase.SameContent(o, t):
		return clone(o), nil
	case rebase.SameContent(b, o):
		return clone(t), nil
	case rebase.SameContent(b, t):
		return clone(o), nil
	}
	if o == nil || t == nil || o.Kind != store.KindDir || t.Kind != store.KindDir {
		return pol(j, rel, b, o, t)
	}
	bt, ot, tt, err := j.readDirs(rel, b, o, t)
	if err != nil {
		return nil, err
	}
	out := &store.Tree{}
	eachName(bt, ot, tt, func(name string, be, oe, te *store.Entry) {
		if err != nil {
			return
		}
		var e *store.Entry
		e, err = j.merge3(rel+"/"+name, be, oe, te, pol)
		if e != nil {
			e.Name = name
			out.Entries = append(out.Entries, *e)
		}
	})
	if err != nil {
		return nil, err
	}
	return j.dirEntry(rel, out, o, t)
}

// dirEntry writes t and returns a directory entry for it based on o.
func (j *job) dirEntry(rel string, t *store.Tree, o, th *store.Entry) (*store.Entry, error) {
	id, err := j.putTree(t, rel)
	if err != nil {
		return nil, err
	}
	e := clone(o)
	if e == nil {
		e = clone(th)
	}
	if e == nil {
		e = &store.Entry{Kind: store.KindDir, Mtime: j.stamp}
	}
	e.Kind, e.ID, e.Size = store.KindDir, id, 0
	if th != nil {
		e.Mtime = max(e.Mtime, th.Mtime)
	}
	return e, nil
}

func (j *job) readDirs(rel string, b, o, t *store.Entry) (bt, ot, tt *store.Tree, err error) {
	read := func(e *store.Entry, side string) (*store.Tree, error) {
		if e == nil || e.Kind != store.KindDir {
			return &store.Tree{}, nil
		}
		tr, err := j.m.Store.GetTree(e.ID)
		if err != nil {
			return nil, fmt.Errorf("gitmerge: read %s (%s): %w", j.full(rel), side, err)
		}
		return tr, nil
	}
	if bt, err = read(b, "base"); err != nil {
		return
	}
	if ot, err = read(o, "ours"); err != nil {
		return
	}
	tt, err = read(t, "theirs")
	return
}

func (j *job) putTree(t *store.Tree, rel string) (store.ID, error) {
	id, err := j.m.Store.PutTree(t)
	if err != nil {
		return store.ID{}, fmt.Errorf("gitmerge: write tree %s: %w", j.full(rel), err)
	}
	return id, nil
}

// readBlob reads a small blob (a ref, HEAD, a reflog, the index).
func (j *job) readBlob(e *store.Entry, rel string) ([]byte, error) {
	if b, ok := j.blobs[e.ID]; ok {
		return b, nil
	}
	rc, err := j.m.Store.OpenBlob(e.ID)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: read %s: %w", j.full(rel), err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: read %s: %w", j.full(rel), err)
	}
	j.blobs[e.ID] = b
	return b, nil
}

// newBlobEntry writes data and returns a file entry for it, shaped after
// o (or t) with the later of their mtimes.
func (j *job) newBlobEntry(data []byte, o, t *store.Entry) (*store.Entry, error) {
	id, n, err := j.m.Store.WriteBlob(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("gitmerge: write blob: %w", err)
	}
	if n != int64(len(data)) {
		return nil, fmt.Errorf("%w: wrote %d bytes of %d", ErrStoreID, n, len(data))
	}
	j.blobs[id] = data
	e := &store.Entry{Kind: store.KindFile, Mtime: j.stamp}
	if o != nil && o.Kind.IsRegular() {
		e.Kind, e.Mtime = o.Kind, o.Mtime
		e.SetPerm(o.Perm())
	}
	if t != nil {
		if o == nil {
			e.Kind = t.Kind
			e.Mtime = t.Mtime
			if t.Kind.IsRegular() {
				e.SetPerm(t.Perm())
			}
		}
		e.Mtime = max(e.Mtime, t.Mtime)
	}
	if !e.Kind.IsRegular() {
		e.Kind = store.KindFile
		e.SetPerm(store.DefaultPerm(store.KindFile))
	}
	e.ID, e.Size = id, n
	return e, nil
}

func cut(p string) (first, rest string, more bool) {
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			return p[:i], p[i+1:], true
		}
	}
	return p, "", false
}

// eachName calls fn for every name in the three sorted trees, in order,
// with the entries (nil where absent).
func eachName(bt, ot, tt *store.Tree, fn func(name string, b, o, t *store.Entry)) {
	_ = rebase.ZipEntries(bt, ot, tt, func(name string, b, o, t *store.Entry) error {
		fn(name, b, o, t)
		return nil
	})
}

func clone(e *store.Entry) *store.Entry {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

// addSideAlternates makes the object directories the sides' own
// objects/info/alternates name (absolute paths that exist) alternates of
// the temp repository too: a workspace created from a repository (create
// --from-git) keeps only its new objects, and its commits' trees are read
// through the repository's objects. Objects are content-addressed, so
// what is read there is what the side's git reads.
func (j *job) addSideAlternates(r *repo) error {
	var add []string
	seen := map[string]bool{}
	for _, t := range []*store.Tree{j.bt, j.ot, j.tt} {
		e, err := j.lookupPath(t, "objects/info/alternates")
		if err != nil || e == nil || !e.Kind.IsRegular() {
			if err != nil {
				return err
			}
			continue
		}
		data, err := j.readBlob(e, "objects/info/alternates")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(data), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") || !filepath.IsAbs(l) || seen[l] || strings.ContainsAny(l, "\x00") {
				continue
			}
			if fi, err := os.Stat(l); err != nil || !fi.IsDir() {
				continue
			}
			seen[l] = true
			add = append(add, l)
		}
	}
	if len(add) == 0 {
		return nil
	}
	p := filepath.Join(r.gitDir, "objects", "info", "alternates")
	cur, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("gitmerge: read temp alternates: %w", err)
	}
	if err := os.WriteFile(p, append(cur, []byte(strings.Join(add, "\n")+"\n")...), 0o644); err != nil {
		return fmt.Errorf("gitmerge: write temp alternates: %w", err)
	}
	return nil
}

// lookupPath returns the entry at slash-separated rel below t (nil if
// absent).
func (j *job) lookupPath(t *store.Tree, rel string) (*store.Entry, error) {
	parts := strings.Split(rel, "/")
	for i, name := range parts {
		if t == nil {
			return nil, nil
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
		sub, err := j.m.Store.GetTree(e.ID)
		if err != nil {
			return nil, fmt.Errorf("gitmerge: read %s: %w", j.full(strings.Join(parts[:i+1], "/")), err)
		}
		t = sub
	}
	return nil, nil
}
