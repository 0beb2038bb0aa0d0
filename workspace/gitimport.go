package workspace

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/acyclicfs/acyclicfs/internal/fsmtoken"
	"github.com/acyclicfs/acyclicfs/internal/gitrepo"
	"github.com/acyclicfs/acyclicfs/internal/pathino"
	"github.com/acyclicfs/acyclicfs/store"
)

// GitImport is what CreateFromGit made.
type GitImport struct {
	Gen    store.ID
	GitDir string // the repository's git directory
	Commit string
	Branch string // full ref; "" when the revision was not a branch
	Files  int    // files, symlinks and submodules in the tree
	Blobs  int    // distinct blobs read from the repository
	Bytes  int64  // bytes of those blobs
	// Resolved counts the git object references GitImportOptions.Resolve
	// stored.
	Resolved int
}

// ErrBadGitTree is returned for a commit whose tree a workspace cannot
// hold as a checkout would (a ".git" entry, a name git itself refuses).
var ErrBadGitTree = errors.New("tree cannot be checked out")

// CreateFromGit is Manager.CreateFromGit.
func (m *gitNative) CreateFromGit(ctx context.Context, name, repoPath, rev string, opt GitImportOptions) (GitImport, error) {
	var res GitImport
	if err := ValidateName(name); err != nil {
		return res, err
	}
	if _, err := m.st.GetWorkspace(name); err == nil {
		return res, fmt.Errorf("%w: %q", ErrExists, name)
	} else if !errors.Is(err, store.ErrNotFound) {
		return res, err
	}
	repo, err := gitrepo.Open(ctx, repoPath)
	if err != nil {
		return res, err
	}
	at, err := repo.Resolve(ctx, rev)
	if err != nil {
		return res, err
	}
	res.GitDir, res.Commit, res.Branch = repo.GitDir, at.Commit, at.Branch
	release := m.st.HoldGC()
	defer release()

	now := time.UnixMilli(m.now())
	// Files are two seconds older than the index, so that none is "racily
	// clean" (git re-reads a file whose mtime is not older than the index).
	fileTime := now.Add(-2 * time.Second).UnixNano()
	batch := m.st.NewBlobBatch()
	b, worktree, index, trees, err := m.importGitWorktree(ctx, repo, at.Commit, fileTime, batch, &res)
	if err != nil {
		batch.Abort()
		return res, err
	}

	// The working .git.
	refs, err := repo.Refs(ctx)
	if err != nil {
		batch.Abort()
		return res, err
	}
	head := at.Commit + "\n"
	var packed []gitrepo.Ref
	for _, r := range refs {
		if r.Name != at.Branch {
			packed = append(packed, r)
		}
	}
	tok := fsmtoken.CleanAt(worktree)
	// The index carries the commit's trees (git's cache tree), so that
	// git status compares it with HEAD without reading a tree object
	// through the mount (45 ms of a first status on the Go tree).
	trees[""] = at.Tree
	idx, err := gitrepo.EncodeIndex(index, gitrepo.IndexExtensions{FSMonitorToken: tok.String(), Trees: trees})
	if err != nil {
		batch.Abort()
		return res, err
	}
	objects := path.Join(repo.GitDir, "objects")
	dot := map[string][]byte{
		"HEAD":                    []byte(head),
		"config":                  []byte("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"),
		"description":             []byte("Unnamed repository; edit this file 'description' to name the repository.\n"),
		"objects/info/alternates": []byte(objects + "\n"),
		"packed-refs":             gitrepo.PackedRefs(packed),
		"index":                   idx,
	}
	if at.Branch != "" {
		dot["HEAD"] = []byte("ref: " + at.Branch + "\n")
		dot[at.Branch] = []byte(at.Commit + "\n")
	}
	gb := newTreeBuilder()
	for _, d := range []string{"objects/pack", "refs/heads", "refs/tags", "info"} {
		gb.dir(d)
	}
	gitTime := now.UnixNano()
	for p, data := range dot {
		id, err := batch.WriteBlobBytes(data)
		if err != nil {
			batch.Abort()
			return res, fmt.Errorf("store .git/%s: %w", p, err)
		}
		gb.file(p, store.Entry{Kind: store.KindFile, Size: int64(len(data)), Mtime: gitTime, ID: id})
	}
	dotGit, err := gb.put(m.st)
	if err != nil {
		batch.Abort()
		return res, err
	}
	b.sub("", ".git", dotGit)
	root, err := b.put(m.st)
	if err != nil {
		batch.Abort()
		return res, err
	}
	if err := batch.Commit(); err != nil {
		return res, fmt.Errorf("store blobs: %w", err)
	}
	if opt.Resolve {
		p, err := m.resolveGitRefs(ctx, worktree, GitResolveOptions{})
		if err != nil {
			return res, err
		}
		res.Resolved, res.Blobs, res.Bytes = p.Resolved, res.Blobs+p.Resolved, res.Bytes+p.Bytes
	}

	op := newOperationID()
	gen, err := m.st.PutGeneration(&store.Generation{Root: root, Workspace: name, Kind: store.GenCreate, Operation: op, Time: m.now()})
	if err != nil {
		return res, fmt.Errorf("store generation: %w", err)
	}
	_, err = m.st.CreateWorkspace(store.Workspace{Name: name, Created: m.now()},
		store.HeadEntry{Gen: gen, Kind: store.GenCreate, Operation: op, Time: m.now()})
	if errors.Is(err, store.ErrExists) {
		return res, fmt.Errorf("%w: %q", ErrExists, name)
	}
	if err != nil {
		return res, fmt.Errorf("create workspace %q: %w", name, err)
	}
	res.Gen = gen
	if _, err := m.SetGitBinding(name, 0, GitBinding{Repo: repo.GitDir, Branch: at.Branch, Base: at.Commit, BaseTree: root.String()}); err != nil {
		return res, fmt.Errorf("bind %s to %s: %w", name, repo.GitDir, err)
	}
	return res, nil
}

// importGitWorktree reads commit's tree from repo: its files as git
// object references (refGitBlobs; on a store whose blobs live on a
// remote, their blobs into batch), its trees into the store. It returns the builder holding the tree (for
// the caller to add .git to), the work tree's ID and the index entries of
// its files, stat data as a mount reports them with fileTime as mtime, and
// the git tree object of every directory below the root, by path.
func (m *gitNative) importGitWorktree(ctx context.Context, repo *gitrepo.Repo, commit string, fileTime int64, batch *store.BlobBatch, res *GitImport) (*treeBuilder, store.ID, []gitrepo.IndexEntry, map[string]string, error) {
	b := newTreeBuilder()
	var index []gitrepo.IndexEntry
	entries, err := repo.ListTree(ctx, commit)
	if err != nil {
		return nil, store.ID{}, nil, nil, err
	}
	trees := map[string]string{}
	var blobs []string
	want := map[string]bool{}
	for _, e := range entries {
		if err := checkGitPath(e.Path); err != nil {
			return nil, store.ID{}, nil, nil, err
		}
		switch e.Mode {
		case gitrepo.ModeTree:
			b.dir(e.Path)
			trees[e.Path] = e.OID
			continue
		case gitrepo.ModeGitlink: // a submodule: an empty directory, as a checkout without it
			b.dir(e.Path)
			index = append(index, gitrepo.IndexEntry{Path: e.Path, Mode: e.Mode, OID: e.OID})
			res.Files++
			continue
		case gitrepo.ModeFile, gitrepo.ModeExec, gitrepo.ModeSymlink:
		default:
			return nil, store.ID{}, nil, nil, fmt.Errorf("%w: %s has mode %o", ErrBadGitTree, e.Path, e.Mode)
		}
		if !want[e.OID] {
			want[e.OID] = true
			blobs = append(blobs, e.OID)
		}
		index = append(index, gitrepo.IndexEntry{Path: e.Path, Mode: e.Mode, OID: e.OID, Size: uint32(e.Size),
			Ino: uint32(pathino.Of(e.Path)), UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Mtime: fileTime, Ctime: fileTime})
		res.Files++
	}

	var ids map[string]store.ID
	if m.st.HasRemote() {
		// Other nodes read what this one publishes: every file must be an
		// object of the remote, uploaded before the head naming it.
		var n int64
		ids, n, err = m.storeGitBlobs(ctx, repo, batch, blobs)
		res.Bytes = n
		res.Blobs = len(blobs)
	} else {
		ids, err = m.refGitBlobs(repo, entries)
	}
	if err != nil {
		return nil, store.ID{}, nil, nil, err
	}
	m.rememberGitBlobs(repo.GitDir, ids)
	for _, e := range entries {
		kind, ok := gitFileKind(e.Mode)
		if !ok {
			continue
		}
		b.file(e.Path, store.Entry{Kind: kind, Size: e.Size, Mtime: fileTime, ID: ids[e.OID]})
	}
	worktree, err := b.put(m.st)
	if err != nil {
		return nil, store.ID{}, nil, nil, err
	}
	return b, worktree, index, trees, nil

}

// refGitBlobs names every blob of entries by a git object reference
// (store.GitRef): nothing is read from the repository now; a file's
// content is read from it, checked against its object name, when first
// read. Blobs the object-name cache names and the store holds as blobs
// are used as they are.
func (m *gitNative) refGitBlobs(repo *gitrepo.Repo, entries []gitrepo.TreeEntry) (map[string]store.ID, error) {
	ids := map[string]store.ID{}
	var oids []string
	for _, e := range entries {
		if e.Mode == gitrepo.ModeFile || e.Mode == gitrepo.ModeExec || e.Mode == gitrepo.ModeSymlink {
			oids = append(oids, e.OID)
		}
	}
	known := m.knownGitBlobs(oids)
	var base store.ID
	for _, e := range entries {
		kind, ok := gitFileKind(e.Mode)
		if !ok {
			continue
		}
		if _, ok := ids[e.OID]; ok {
			continue
		}
		if id, ok := known[e.OID]; ok {
			// A stored blob. A reference the cache names is made again
			// below (same base, same ID) rather than trusted: its base may
			// have been swept since.
			if r, isRef, err := m.st.BaseRefOf(id); err != nil {
				return nil, err
			} else if !isRef || r.Git == "" {
				ids[e.OID] = id
				continue
			}
		}
		if base.IsZero() {
			var err error
			if base, err = m.st.GitBase(repo.GitDir); err != nil {
				return nil, err
			}
		}
		id, err := m.st.GitRef(base, e.OID, kind, e.Size)
		if err != nil {
			return nil, fmt.Errorf("git object %s at %s: %w", e.OID, e.Path, err)
		}
		ids[e.OID] = id
	}
	return ids, nil
}

// checkGitPath refuses what a checkout refuses: a .git component
// anywhere (git's own fsck forbids it), empty, dot or dot-dot names.
func checkGitPath(p string) error {
	for name := range strings.SplitSeq(p, "/") {
		if !store.ValidName(name) || strings.EqualFold(name, ".git") {
			return fmt.Errorf("%w: path %q", ErrBadGitTree, p)
		}
	}
	return nil
}

// treeBuilder assembles trees from paths: directories are created on
// demand, and put writes every tree bottom-up in one PutTrees.
type treeBuilder struct {
	dirs map[string]*builderDir
}

type builderDir struct {
	entries map[string]store.Entry
	subs    map[string]bool // names that are directories built here
}

func newTreeBuilder() *treeBuilder {
	return &treeBuilder{dirs: map[string]*builderDir{"": {entries: map[string]store.Entry{}, subs: map[string]bool{}}}}
}

// dir makes sure directory p (and its parents) exists.
func (b *treeBuilder) dir(p string) *builderDir {
	if d, ok := b.dirs[p]; ok {
		return d
	}
	d := &builderDir{entries: map[string]store.Entry{}, subs: map[string]bool{}}
	b.dirs[p] = d
	parent, name := path.Split(p)
	parent = strings.TrimSuffix(parent, "/")
	b.dir(parent).subs[name] = true
	return d
}

// file adds e at p.
func (b *treeBuilder) file(p string, e store.Entry) {
	parent, name := path.Split(p)
	e.Name = name
	b.dir(strings.TrimSuffix(parent, "/")).entries[name] = e
}

// sub adds an already stored tree as directory name of dir.
func (b *treeBuilder) sub(dir, name string, tree store.ID) {
	b.dir(dir).entries[name] = store.Entry{Name: name, Kind: store.KindDir, ID: tree}
}

// put stores every tree and returns the root's.
func (b *treeBuilder) put(st *store.Store) (store.ID, error) {
	paths := make([]string, 0, len(b.dirs))
	for d := range b.dirs {
		paths = append(paths, d)
	}
	// Deepest first, so that every subtree's ID is known before its parent.
	sort.Slice(paths, func(i, j int) bool {
		di, dj := strings.Count(paths[i], "/"), strings.Count(paths[j], "/")
		if paths[i] == "" {
			di = -1
		}
		if paths[j] == "" {
			dj = -1
		}
		if di != dj {
			return di > dj
		}
		return paths[i] < paths[j]
	})
	ids := make(map[string]store.ID, len(paths))
	trees := make([]*store.Tree, 0, len(paths))
	for _, d := range paths {
		dir := b.dirs[d]
		t := &store.Tree{Entries: make([]store.Entry, 0, len(dir.entries)+len(dir.subs))}
		for _, e := range dir.entries {
			t.Entries = append(t.Entries, e)
		}
		for name := range dir.subs {
			child := name
			if d != "" {
				child = d + "/" + name
			}
			if _, ok := dir.entries[name]; ok {
				return store.ID{}, fmt.Errorf("%w: %s is both a file and a directory", ErrBadGitTree, child)
			}
			t.Entries = append(t.Entries, store.Entry{Name: name, Kind: store.KindDir, ID: ids[child]})
		}
		t.Sort()
		enc, err := t.Encode()
		if err != nil {
			return store.ID{}, fmt.Errorf("encode tree %q: %w", d, err)
		}
		ids[d] = store.TreeID(enc)
		trees = append(trees, t)
	}
	if _, err := st.PutTrees(trees); err != nil {
		return store.ID{}, fmt.Errorf("store trees: %w", err)
	}
	return ids[""], nil
}

// inlineBlob is the largest blob storeGitBlobs reads into memory and
// hands to a writer goroutine; larger ones stream straight into the batch.
const inlineBlob = 1 << 20

// catStreams is how many `git cat-file --batch` processes an import runs
// at once: inflating objects is git's CPU work, and one process uses one
// core.
var catStreams = max(2, runtime.GOMAXPROCS(0))

// storeGitBlobs makes sure every blob of blobs is in the store and returns
// their store IDs and the bytes read from the repository. Blobs the
// object-name cache names and the store holds (a second workspace of the
// repository) are not read at all. The rest are read by catStreams
// cat-file streams over contiguous runs of the list (pack locality); small
// blobs are hashed in memory first and written only when the store lacks
// them, by a few writer goroutines, so that file creation in the store
// overlaps the streams.
func (m *gitNative) storeGitBlobs(ctx context.Context, repo *gitrepo.Repo, batch *store.BlobBatch, blobs []string) (map[string]store.ID, int64, error) {
	ids := m.knownGitBlobs(blobs)
	var todo []string
	for _, b := range blobs {
		if _, ok := ids[b]; !ok {
			todo = append(todo, b)
		}
	}
	read, n, err := m.readGitBlobs(ctx, repo, batch, todo, catStreams, 4, false)
	maps.Copy(ids, read)
	return ids, n, err
}

// readGitBlobs reads every blob of todo from repo into batch (small ones
// hashed first and written only when the store lacks them) with streams
// cat-file streams over contiguous runs of the list (pack locality) and
// up to writers writer goroutines, so that file creation in the store
// overlaps the streams. With verify, each blob's content is checked
// against its object name (SHA-1), as a read of a git object reference
// checks it. It returns their store IDs and the bytes read.
func (m *gitNative) readGitBlobs(ctx context.Context, repo *gitrepo.Repo, batch *store.BlobBatch, todo []string, streams, writers int, verify bool) (map[string]store.ID, int64, error) {
	ids := make(map[string]store.ID, len(todo))
	var (
		mu    sync.Mutex // guards ids
		total atomic.Int64
	)
	put := func(oid string, id store.ID) {
		mu.Lock()
		ids[oid] = id
		mu.Unlock()
	}
	wg, wctx := errgroup.WithContext(ctx)
	wg.SetLimit(max(writers, 1))
	var sg errgroup.Group
	per := (len(todo) + streams - 1) / max(streams, 1)
	for lo := 0; lo < len(todo); lo += per {
		part := todo[lo:min(lo+per, len(todo))]
		sg.Go(func() error {
			return repo.CatBlobs(wctx, part, func(i int, r io.Reader, size int64) error {
				total.Add(size)
				var sum hash.Hash
				if verify {
					sum = sha1.New()
					fmt.Fprintf(sum, "blob %d\x00", size)
					r = io.TeeReader(r, sum)
				}
				if size > inlineBlob {
					id, _, err := batch.WriteBlob(r)
					if err != nil {
						return fmt.Errorf("store blob %s: %w", part[i], err)
					}
					if err := checkGitSum(sum, part[i]); err != nil {
						return err
					}
					put(part[i], id)
					return nil
				}
				buf := make([]byte, size)
				if _, err := io.ReadFull(r, buf); err != nil {
					return fmt.Errorf("read blob %s: %w", part[i], err)
				}
				if err := checkGitSum(sum, part[i]); err != nil {
					return err
				}
				wg.Go(func() error {
					h := store.NewBlobHasher()
					h.Write(buf)
					id := h.Sum()
					if have, err := m.st.HasBlob(id); err != nil || !have {
						if _, err := batch.WriteBlobBytes(buf); err != nil {
							return fmt.Errorf("store blob %s: %w", part[i], err)
						}
					}
					put(part[i], id)
					return nil
				})
				return nil
			})
		})
	}
	err := sg.Wait()
	if werr := wg.Wait(); err == nil {
		err = werr
	}
	if errors.Is(err, syscall.ENOSPC) {
		err = fmt.Errorf("store is full: %w", err)
	}
	return ids, total.Load(), err
}

// checkGitSum compares the SHA-1 of a blob's header and content (nil: not
// checked) with its object name.
func checkGitSum(sum hash.Hash, oid string) error {
	if sum == nil {
		return nil
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != oid {
		return fmt.Errorf("%w: git object %s: content hashes to %s", store.ErrCorrupt, oid, got)
	}
	return nil
}

// gitFileKind is the store kind of a git tree entry's mode; false for
// entries that hold no file content (trees, submodules).
func gitFileKind(mode uint32) (store.Kind, bool) {
	switch mode {
	case gitrepo.ModeFile:
		return store.KindFile, true
	case gitrepo.ModeExec:
		return store.KindExec, true
	case gitrepo.ModeSymlink:
		return store.KindSymlink, true
	}
	return 0, false
}
