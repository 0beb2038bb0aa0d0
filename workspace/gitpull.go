package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/gitrepo"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// PullResult is what GitPull did.
type PullResult struct {
	Result
	Repo   string `json:"repo"`
	Branch string `json:"branch"`
	Old    string `json:"old"` // the binding's Base before
	New    string `json:"new"` // the branch's commit taken in
	// Already is true when the branch had not moved.
	Already bool `json:"already_up_to_date"`
}

// GitPull is Manager.GitPull.
func (m *gitNative) GitPull(ctx context.Context, ws string, env []string) (PullResult, error) {
	release := m.st.HoldGC() // merged objects must not be swept before the append
	defer release()
	w, err := m.Get(ws)
	if err != nil {
		return PullResult{}, err
	}
	b, rev, found, err := m.GitBinding(ws)
	if err != nil {
		return PullResult{}, err
	}
	if !found {
		return PullResult{}, fmt.Errorf("%w: %s", ErrNotBound, ws)
	}
	res := PullResult{Result: Result{Workspace: ws, Head: w.Head, Base: w.Base, Outcome: OutcomeCurrent}, Repo: b.Repo, Branch: b.Branch, Old: b.Base}
	if b.Branch == "" {
		return res, fmt.Errorf("%w: %s is bound to no branch (a tag or a commit): nothing to pull", ErrInvalidInput, ws)
	}
	g := newGitRepo(b.Repo, env)
	cur, err := g.resolve(b.Branch)
	if err != nil {
		return res, fmt.Errorf("pull %s: read %s: %w", ws, b.Branch, err)
	}
	if cur == "" {
		return res, fmt.Errorf("%w: %s has no branch %s any more", ErrInvalidInput, b.Repo, strings.TrimPrefix(b.Branch, "refs/heads/"))
	}
	res.New = cur
	if cur == b.Base {
		res.Already = true
		return res, m.settleOutcome(ws, &res.Result)
	}
	baseRoot, err := store.ParseID(b.BaseTree)
	if err != nil {
		return res, fmt.Errorf("%w: %s's binding has no base tree; bind it again", ErrInvalidInput, ws)
	}
	oursRoot, err := m.rootOf(w.Head)
	if err != nil {
		return res, err
	}
	theirsRoot, err := m.pulledTree(ctx, g, b, baseRoot, cur)
	if err != nil {
		return res, fmt.Errorf("pull %s: import %s: %w", ws, short40(cur), err)
	}
	mr, err := m.merge3(baseRoot, oursRoot, theirsRoot, rebase.Options{KeepConflicts: true})
	if err != nil {
		return res, fmt.Errorf("pull %s: merge %s: %w", ws, short40(cur), err)
	}
	ours, err := m.conflictsOf(w.Head)
	if err != nil {
		return res, err
	}
	if ours, err = m.withTheirs(ours, theirsRoot); err != nil {
		return res, err
	}
	root := mr.Tree
	if root.IsZero() {
		root = store.EmptyTreeID()
	}
	// git has no hard links: the workspace's groups stay where the merge
	// kept one content.
	links, err := m.linksOf(w.Head)
	if err != nil {
		return res, err
	}
	if links, err = m.fitLinks(root, links); err != nil {
		return res, fmt.Errorf("pull %s: %w", ws, err)
	}
	key := "git pull " + short40(cur) + " " + newOperationID()
	gen, err := m.st.PutGeneration(&store.Generation{Root: root, Parents: []store.ID{w.Head}, Workspace: ws, Kind: store.GenRebase,
		Operation: key, Time: m.now(), Conflicts: unionConflicts(storeConflicts(mr.Conflicts), ours), Links: links})
	if err != nil {
		return res, fmt.Errorf("store generation: %w", err)
	}
	nw, err := m.st.CompareAndAppend(ws, w.Head, store.HeadEntry{Gen: gen, Base: w.Base, Kind: store.GenRebase, Operation: key, Time: m.now()}, nil)
	if errors.Is(err, store.ErrHeadMoved) {
		return res, fmt.Errorf("pull %s: %w: %w", ws, ErrBusy, err)
	}
	if err != nil {
		return res, fmt.Errorf("pull %s: %w", ws, err)
	}
	if err := m.moveBinding(ws, b, rev, func(nb *GitBinding) { nb.Base, nb.BaseTree = cur, theirsRoot.String() }); err != nil {
		return res, fmt.Errorf("pull %s: merged %s but the binding was not updated: %w", ws, short40(cur), err)
	}
	res.Head, res.Base, res.Outcome = nw.Head, nw.Base, OutcomeRebased
	if err := m.settleOutcome(ws, &res.Result); err != nil {
		return res, err
	}
	m.propagate(ctx, ws, true)
	return res, nil
}

// pulledTree is "theirs" of a pull: commit's tree read from REPO, with the
// .git of the base tree (if it has one) changed as a fetch and a checkout
// of commit would change it: the branch names commit, the index is
// commit's, and a pack holds the objects commit has and Base had not.
func (m *gitNative) pulledTree(ctx context.Context, g *gitRepo, b GitBinding, baseRoot store.ID, commit string) (store.ID, error) {
	repo, err := gitrepo.Open(ctx, b.Repo)
	if err != nil {
		return store.ID{}, err
	}
	now := time.UnixMilli(m.now())
	fileTime := now.Add(-2 * time.Second).UnixNano()
	batch := m.st.NewBlobBatch()
	var imp GitImport
	tb, _, index, _, err := m.importGitWorktree(ctx, repo, commit, fileTime, batch, &imp)
	if err != nil {
		batch.Abort()
		return store.ID{}, err
	}
	if err := batch.Commit(); err != nil {
		return store.ID{}, fmt.Errorf("store blobs: %w", err)
	}
	baseGit, err := m.entryAt(baseRoot, ".git")
	if err != nil {
		return store.ID{}, err
	}
	if baseGit != nil && baseGit.Kind == store.KindDir {
		dot, err := m.pulledGitDir(g, baseGit.ID, b, commit, index, now.UnixNano())
		if err != nil {
			return store.ID{}, err
		}
		tb.sub("", ".git", dot)
	}
	return tb.put(m.st)
}

// pulledGitDir returns the .git tree gitTree with b.Branch at commit, the
// index of commit's tree, and the objects of commit not reachable from
// b.Base in a new pack.
func (m *gitNative) pulledGitDir(g *gitRepo, gitTree store.ID, b GitBinding, commit string, index []gitrepo.IndexEntry, mtime int64) (store.ID, error) {
	edits := map[string]*store.Entry{}
	file := func(p string, data []byte) error {
		id, err := m.st.WriteBlobBytes(data)
		if err != nil {
			return fmt.Errorf("store .git/%s: %w", p, err)
		}
		edits[p] = &store.Entry{Name: p[strings.LastIndexByte(p, '/')+1:], Kind: store.KindFile, Size: int64(len(data)), Mtime: mtime, ID: id}
		return nil
	}
	if err := file(b.Branch, []byte(commit+"\n")); err != nil {
		return store.ID{}, err
	}
	idx, err := gitrepo.EncodeIndex(index, gitrepo.IndexExtensions{})
	if err != nil {
		return store.ID{}, err
	}
	if err := file("index", idx); err != nil {
		return store.ID{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(m.dir, "tmp"), "pull-")
	if err != nil {
		return store.ID{}, err
	}
	defer os.RemoveAll(tmp)
	revs := commit + "\n"
	if b.Base != "" {
		// A base REPO no longer has (a rewound branch, gc) bounds nothing.
		if have, err := g.resolve(b.Base); err == nil && have != "" {
			revs += "^" + b.Base + "\n"
		}
	}
	out, err := g.run([]byte(revs), "pack-objects", "--revs", "-q", filepath.Join(tmp, "pack"))
	if err != nil {
		return store.ID{}, err
	}
	name := "pack-" + strings.TrimSpace(string(out))
	for _, ext := range []string{".pack", ".idx"} {
		p := "objects/pack/" + name + ext
		id, size, err := m.st.WriteBlobFile(filepath.Join(tmp, name+ext))
		if err != nil {
			return store.ID{}, fmt.Errorf("store .git/%s: %w", p, err)
		}
		edits[p] = &store.Entry{Kind: store.KindFile, Size: size, Mtime: mtime, ID: id}
	}
	return m.setEntries(gitTree, edits)
}
