package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/acyclicfs/acyclicfs/corestate"
	"github.com/acyclicfs/acyclicfs/store"
)

var (
	// ErrAlreadyBound is returned by GitBind for a bound workspace without
	// Force.
	ErrAlreadyBound = errors.New("workspace is already bound to a git repository")
	// ErrNotFastForward is returned by GitPublish when the workspace's
	// commit does not descend from the branch's value in REPO: the branch
	// moved since the two last agreed. Nothing was changed.
	ErrNotFastForward = errors.New("not a fast-forward")
	// ErrRefMoved is returned by GitPublish when REPO's branch moved
	// between publish's reading it and its compare-and-swap. No ref moved.
	ErrRefMoved = errors.New("branch moved during publish")
	// ErrBindingMoved is returned when the binding record changed under an
	// operation (another publish, bind or unbind won the race).
	ErrBindingMoved = errors.New("git binding changed meanwhile")
)

// publishBeforeCAS, set by tests, runs between publish's reading the
// branch and its compare-and-swap.
var publishBeforeCAS func(repo, branch string)

// OnLandPublish is GitBinding.OnLand for a workspace that publishes after
// each land into it.
const OnLandPublish = "publish"

// GitBindOptions are GitBind's options.
type GitBindOptions struct {
	Branch string // B or refs/heads/B; "" takes REPO's current branch
	OnLand string // "publish" or "" / "none"
	Force  bool   // replace an existing binding
	Env    []string
}

// fullBranch makes "B" refs/heads/B; it refuses what is not a branch name.
func (g *gitRepo) fullBranch(b string) (string, error) {
	if !strings.HasPrefix(b, "refs/heads/") {
		b = "refs/heads/" + b
	}
	if _, err := g.run(nil, "check-ref-format", b); err != nil {
		return "", fmt.Errorf("%w: %q is not a valid branch name", ErrInvalidInput, strings.TrimPrefix(b, "refs/heads/"))
	}
	return b, nil
}

// gitDirOf returns the absolute git (common) directory of repo.
func gitDirOf(repo string, env []string) (string, error) {
	g := newGitAt(repo, env)
	s, err := g.line("rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil || s == "" {
		return "", fmt.Errorf("%w: %s is not a git repository: %w", ErrInvalidInput, repo, err)
	}
	return filepath.Clean(s), nil
}

// GitBind is Manager.GitBind.
func (m *gitNative) GitBind(ws, repo string, opt GitBindOptions) (GitBinding, error) {
	w, err := m.Get(ws)
	if err != nil {
		return GitBinding{}, err
	}
	switch opt.OnLand {
	case "", "none":
		opt.OnLand = ""
	case OnLandPublish:
	default:
		return GitBinding{}, fmt.Errorf("%w: --on-land must be publish or none, not %q", ErrInvalidInput, opt.OnLand)
	}
	if fi, err := os.Stat(repo); err != nil || !fi.IsDir() {
		return GitBinding{}, fmt.Errorf("%w: %s is not a git repository (not a directory)", ErrInvalidInput, repo)
	}
	dir, err := gitDirOf(repo, opt.Env)
	if err != nil {
		return GitBinding{}, err
	}
	g := newGitRepo(dir, opt.Env)
	branch := opt.Branch
	if branch == "" {
		cur := newGitAt(repo, opt.Env) // a linked worktree's own HEAD
		if branch, err = cur.line("symbolic-ref", "-q", "HEAD"); err != nil || !strings.HasPrefix(branch, "refs/heads/") {
			return GitBinding{}, fmt.Errorf("%w: %s's HEAD is not on a branch; pass --branch", ErrInvalidInput, repo)
		}
	}
	if branch, err = g.fullBranch(branch); err != nil {
		return GitBinding{}, err
	}
	base, err := g.resolve(branch)
	if err != nil {
		return GitBinding{}, fmt.Errorf("read %s in %s: %w", branch, dir, err)
	}
	if base == "" {
		return GitBinding{}, fmt.Errorf("%w: %s has no branch %s", ErrInvalidInput, dir, strings.TrimPrefix(branch, "refs/heads/"))
	}
	_, rev, found, err := m.GitBinding(ws)
	if err != nil {
		return GitBinding{}, err
	}
	if found && !opt.Force {
		return GitBinding{}, fmt.Errorf("%w: %s (pass --force to rebind)", ErrAlreadyBound, ws)
	}
	root, err := m.rootOf(w.Head)
	if err != nil {
		return GitBinding{}, err
	}
	b := GitBinding{Repo: dir, Branch: branch, Base: base, BaseTree: root.String(), OnLand: opt.OnLand, PublishedSeq: w.Seq}
	if _, err := m.SetGitBinding(ws, rev, b); err != nil {
		return GitBinding{}, bindingErr(err)
	}
	b.Version, b.Workspace = gitBindingVersion, ws
	return b, nil
}

// bindingErr names a lost compare-and-swap on the binding record.
func bindingErr(err error) error {
	if errors.Is(err, corestate.ErrConflict) {
		return fmt.Errorf("%w: %w", ErrBindingMoved, err)
	}
	return err
}

// GitUnbind removes ws's binding.
func (m *gitNative) GitUnbind(ws string) error {
	if _, err := m.Get(ws); err != nil {
		return err
	}
	_, rev, found, err := m.GitBinding(ws)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w: %s", ErrNotBound, ws)
	}
	return bindingErr(m.DeleteGitBinding(ws, rev))
}

// GitState is a binding and where REPO's branch is now.
type GitState struct {
	GitBinding
	// Current is the branch's commit in REPO now ("" if it is gone).
	Current string `json:"current"`
	// Moved is true when the branch is no longer at Base.
	Moved bool `json:"moved"`
}

// GitShow returns ws's binding and whether REPO's branch moved since Base.
func (m *gitNative) GitShow(ws string, env []string) (GitState, error) {
	if _, err := m.Get(ws); err != nil {
		return GitState{}, err
	}
	b, _, found, err := m.GitBinding(ws)
	if err != nil {
		return GitState{}, err
	}
	if !found {
		return GitState{}, fmt.Errorf("%w: %s", ErrNotBound, ws)
	}
	st := GitState{GitBinding: b}
	if b.Branch != "" {
		cur, err := newGitRepo(b.Repo, env).resolve(b.Branch)
		if err != nil {
			return st, fmt.Errorf("read %s in %s: %w", b.Branch, b.Repo, err)
		}
		st.Current, st.Moved = cur, cur != b.Base
	}
	return st, nil
}

// PublishOptions are GitPublish's options.
type PublishOptions struct {
	Branch  string // publish to this branch instead of the bound one
	Message string // the subject of the commit of uncommitted changes
	Env     []string
}

// PublishResult is what GitPublish did.
type PublishResult struct {
	Workspace string `json:"workspace"`
	Repo      string `json:"repo"`
	Branch    string `json:"branch"`
	Old       string `json:"old"` // the branch before ("" if it did not exist)
	New       string `json:"new"` // the branch after
	// Transferred is the workspace's own commit on the branch that was
	// published ("" if it has none, or it was already in REPO's branch).
	Transferred string `json:"transferred,omitempty"`
	// Committed is the commit made of the uncommitted changes ("" if none).
	Committed string `json:"committed,omitempty"`
	// Copied counts the objects copied from the workspace's .git/objects.
	Copied int `json:"copied_objects"`
	// Already is true when there was nothing to publish.
	Already bool `json:"already_published"`
}

// GitPublish is Manager.GitPublish.
func (m *gitNative) GitPublish(ctx context.Context, ws string, opt PublishOptions) (PublishResult, error) {
	w, err := m.Get(ws)
	if err != nil {
		return PublishResult{}, err
	}
	b, rev, found, err := m.GitBinding(ws)
	if err != nil {
		return PublishResult{}, err
	}
	if !found {
		return PublishResult{}, fmt.Errorf("%w: %s", ErrNotBound, ws)
	}
	g := newGitRepo(b.Repo, opt.Env)
	branch := b.Branch
	if opt.Branch != "" {
		if branch, err = g.fullBranch(opt.Branch); err != nil {
			return PublishResult{}, err
		}
	}
	if branch == "" {
		return PublishResult{}, fmt.Errorf("%w: %s is bound to no branch; pass --branch", ErrInvalidInput, ws)
	}
	res := PublishResult{Workspace: ws, Repo: b.Repo, Branch: branch}
	// Agreement holds only for the bound branch.
	agreed, published := b.Base, b.Published
	if branch != b.Branch {
		agreed, published = "", ""
	}
	root, err := m.rootOf(w.Head)
	if err != nil {
		return res, err
	}
	format, err := g.line("rev-parse", "--show-object-format")
	if err != nil {
		return res, fmt.Errorf("publish %s: %w", ws, err)
	}
	old, err := g.resolve(branch)
	if err != nil {
		return res, fmt.Errorf("publish %s: read %s: %w", ws, branch, err)
	}
	res.Old = old

	// The workspace's own commit on the branch, its objects in REPO.
	gitE, err := m.entryAt(root, ".git")
	if err != nil {
		return res, err
	}
	local := ""
	if gitE != nil && gitE.Kind == store.KindDir {
		if local, err = m.wsRef(gitE.ID, branch); err != nil {
			return res, err
		}
		if local == "" { // no such branch inside: what HEAD names
			if local, err = m.wsHead(gitE.ID); err != nil {
				return res, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("publish %s: %w", ws, err)
	}
	if local != "" && local != old && !g.connected(local, old) {
		if res.Copied, err = m.copyObjects(gitE.ID, filepath.Join(b.Repo, "objects")); err != nil {
			return res, fmt.Errorf("publish %s: copy objects: %w", ws, err)
		}
		if !g.connected(local, old) {
			return res, fmt.Errorf("%w: the workspace's commit %s is missing objects in %s and its .git/objects (an alternate REPO does not reach?)", ErrInvalidInput, short40(local), b.Repo)
		}
	}

	// Which commit(s) the new state sits on.
	var parents []string
	tracked := "" // the commit whose tree says what is tracked
	switch {
	case old == "":
		if local != "" {
			parents, tracked = []string{local}, local
		}
	case local == "":
		if old != agreed {
			return res, fmt.Errorf("%w: %s moved since the workspace last agreed with it (%s, now %s); run 'acyclicfs git pull %s'", ErrNotFastForward, branch, short40(agreed), short40(old), ws)
		}
		parents, tracked = []string{old}, old
	default:
		ff, err := g.isAncestor(old, local)
		if err != nil {
			return res, fmt.Errorf("publish %s: %w", ws, err)
		}
		behind := false
		if !ff {
			if behind, err = g.isAncestor(local, old); err != nil {
				return res, fmt.Errorf("publish %s: %w", ws, err)
			}
		}
		switch {
		case ff:
			parents, tracked = []string{local}, local
			if local != old {
				res.Transferred = local
			}
		case old == published && published != "" && behind:
			// Our own last publish is the tip; the workspace's branch is
			// behind it (the commit of uncommitted changes).
			parents, tracked = []string{old}, old
		case old == published && published != "":
			// The workspace committed on top of what it had before our
			// last publish: the new state merges both; its tree is the
			// workspace's.
			parents, tracked = []string{old, local}, local
			res.Transferred = local
		default:
			return res, fmt.Errorf("%w: %s in %s is at %s, which the workspace's commit %s does not descend from; run 'acyclicfs git pull %s'", ErrNotFastForward, branch, b.Repo, short40(old), short40(local), ws)
		}
	}

	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("publish %s: %w", ws, err)
	}
	tb, err := m.newPubTrees(g, format)
	if err != nil {
		return res, fmt.Errorf("publish %s: %w", ws, err)
	}
	defer tb.close()
	newOID, err := m.publishCommit(tb, ws, w, b, root, gitE, parents, tracked, old, opt, &res)
	if err != nil {
		return res, err
	}
	if newOID == old {
		res.New, res.Already = old, true
		return res, nil
	}
	res.New = newOID
	oldArg := old
	if oldArg == "" {
		oldArg = strings.Repeat("0", len(newOID))
	}
	if publishBeforeCAS != nil {
		publishBeforeCAS(b.Repo, branch)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("publish %s: %w; %s was not moved", ws, err, branch)
	}
	if _, err := g.run(nil, "update-ref", "-m", "acyclicfs publish "+ws, branch, newOID, oldArg); err != nil {
		if now, rerr := g.resolve(branch); rerr == nil && now != old {
			return res, fmt.Errorf("%w: %s is at %s now, not %s; nothing was changed", ErrRefMoved, branch, short40(now), short40(old))
		}
		return res, fmt.Errorf("publish %s: %w", ws, err)
	}
	if branch == b.Branch {
		err := m.moveBinding(ws, b, rev, func(nb *GitBinding) {
			nb.Base, nb.Published, nb.BaseTree, nb.PublishedSeq = newOID, newOID, root.String(), w.Seq
		})
		if err != nil {
			return res, fmt.Errorf("publish %s: %s moved to %s but the binding was not updated: %w", ws, branch, short40(newOID), err)
		}
	}
	return res, nil
}

// moveBinding applies set to ws's binding b (at rev) after REPO's branch
// moved: the move happened, so the record must follow it. Another command
// that changed the record meanwhile (a concurrent publish or pull) makes
// it reload and apply set again, while the record still names the same
// repository and branch; one that rebound or unbound the workspace wins
// and the record is left as it set it.
func (m *gitNative) moveBinding(ws string, b GitBinding, rev uint64, set func(*GitBinding)) error {
	for range 8 {
		nb := b
		set(&nb)
		_, err := m.SetGitBinding(ws, rev, nb)
		if !errors.Is(err, corestate.ErrConflict) {
			return err
		}
		cur, crev, found, err := m.GitBinding(ws)
		if err != nil {
			return err
		}
		if !found || cur.Repo != b.Repo || cur.Branch != b.Branch {
			return nil
		}
		b, rev = cur, crev
	}
	return fmt.Errorf("%w: it kept changing", ErrBindingMoved)
}

// publishCommit builds the workspace's tree in REPO and returns the commit
// to publish: the first parent itself when the tree is its tree and there
// is one parent, else a new commit.
func (m *gitNative) publishCommit(tb *pubTrees, ws string, w store.Workspace, b GitBinding, root store.ID, gitE *store.Entry, parents []string, tracked, old string, opt PublishOptions, res *PublishResult) (string, error) {
	for attempt := 0; ; attempt++ {
		sets, fp, err := m.topIgnore(gitE)
		if err != nil {
			return "", err
		}
		trackedTree := ""
		if tracked != "" {
			if trackedTree, err = tb.cat.name(tracked + "^{tree}"); err != nil {
				return "", fmt.Errorf("publish %s: %w", ws, err)
			}
		}
		tree, err := tb.dir(root, "", sets, fp, trackedTree, false)
		if err != nil {
			return "", fmt.Errorf("publish %s: %w", ws, err)
		}
		if tree == "" {
			if tree, err = tb.emptyTree(); err != nil {
				return "", fmt.Errorf("publish %s: %w", ws, err)
			}
		}
		if err := tb.flush(); err != nil {
			return "", fmt.Errorf("publish %s: %w", ws, err)
		}
		if len(parents) == 1 {
			pt, err := tb.cat.name(parents[0] + "^{tree}")
			if err != nil {
				return "", fmt.Errorf("publish %s: %w", ws, err)
			}
			if pt == tree {
				return parents[0], nil
			}
		}
		msg, err := m.publishMessage(ws, w, b, opt.Message)
		if err != nil {
			return "", err
		}
		args := []string{"commit-tree", tree}
		for _, p := range parents {
			args = append(args, "-p", p)
		}
		outb, err := tb.g.run([]byte(msg), append(args, "-F", "-")...)
		out := strings.TrimSpace(string(outb))
		if err == nil && !isHexName(out) {
			err = fmt.Errorf("git commit-tree printed %q", out)
		}
		if err != nil {
			return "", fmt.Errorf("publish %s: commit the uncommitted changes: %w", ws, err)
		}
		// Trees taken from the cache may name objects REPO lost (gc) or
		// never had (another repository): check, and rebuild once
		// without the cache.
		if tb.g.connected(out, old) {
			res.Committed = out
			return out, nil
		}
		if attempt > 0 {
			return "", fmt.Errorf("publish %s: the new commit %s is missing objects in %s", ws, short40(out), tb.g.dir)
		}
		tb.forget()
	}
}

// publishMessage is the commit message of the uncommitted changes: subject,
// then the workspace's log since the last publish (acyclicfs log's lines).
func (m *gitNative) publishMessage(ws string, w store.Workspace, b GitBinding, subject string) (string, error) {
	if subject == "" {
		subject = "acyclicfs: publish workspace " + ws
	}
	log, err := m.st.HeadLog(ws, 0)
	if err != nil {
		return "", fmt.Errorf("publish %s: read the log: %w", ws, err)
	}
	var sb strings.Builder
	sb.WriteString(strings.TrimRight(subject, "\n") + "\n\nacyclicfs log of " + ws + " since the last publish:\n\n")
	n := 0
	for _, e := range log {
		if e.Seq <= b.PublishedSeq {
			continue
		}
		n++
		fmt.Fprintf(&sb, "%s\t%s\t%s\t%s\n", e.Gen, e.Kind, time.UnixMilli(e.Time).UTC().Format(time.RFC3339), e.Operation)
	}
	if n == 0 {
		sb.WriteString("(no entries)\n")
	}
	_ = w
	return sb.String(), nil
}

// wsRef returns the workspace's value of ref (loose, else packed-refs)
// read from its .git tree; "" when it has none.
func (m *gitNative) wsRef(gitTree store.ID, ref string) (string, error) {
	e, err := m.entryAt(gitTree, ref)
	if err != nil {
		return "", err
	}
	if e != nil && e.Kind.IsRegular() {
		data, err := m.st.ReadBlob(e.ID)
		if err != nil {
			return "", fmt.Errorf("read .git/%s: %w", ref, err)
		}
		v := strings.TrimSpace(string(data))
		if isHexName(v) {
			return v, nil
		}
		return "", fmt.Errorf("%w: .git/%s holds %q, not a commit", ErrInvalidInput, ref, v)
	}
	pe, err := m.entryAt(gitTree, "packed-refs")
	if err != nil || pe == nil || !pe.Kind.IsRegular() {
		return "", err
	}
	data, err := m.st.ReadBlob(pe.ID)
	if err != nil {
		return "", fmt.Errorf("read .git/packed-refs: %w", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if sha, name, ok := strings.Cut(strings.TrimSpace(l), " "); ok && name == ref && isHexName(sha) {
			return sha, nil
		}
	}
	return "", nil
}

// wsHead returns the commit the workspace's HEAD names (through its
// branch, or detached); "" when it names none.
func (m *gitNative) wsHead(gitTree store.ID) (string, error) {
	e, err := m.entryAt(gitTree, "HEAD")
	if err != nil || e == nil || !e.Kind.IsRegular() {
		return "", err
	}
	data, err := m.st.ReadBlob(e.ID)
	if err != nil {
		return "", fmt.Errorf("read .git/HEAD: %w", err)
	}
	v := strings.TrimSpace(string(data))
	if ref, ok := strings.CutPrefix(v, "ref:"); ok {
		ref = strings.TrimSpace(ref)
		if !strings.HasPrefix(ref, "refs/") || strings.Contains(ref, "..") {
			return "", nil
		}
		return m.wsRef(gitTree, ref)
	}
	if isHexName(v) {
		return v, nil
	}
	return "", nil
}

func isHexName(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func short40(s string) string {
	if s == "" {
		return "(none)"
	}
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// copyObjects copies the objects of the workspace's .git/objects (the
// tree gitTree) that REPO's objects directory lacks: loose objects by
// name, packs by name (.pack before .idx: git looks for a pack by its
// index). Each file is written to a temporary name and renamed, as git
// writes objects, so a reader never sees half an object. It returns how
// many files it copied.
func (m *gitNative) copyObjects(gitTree store.ID, dst string) (int, error) {
	oe, err := m.entryAt(gitTree, "objects")
	if err != nil || oe == nil || oe.Kind != store.KindDir {
		return 0, err
	}
	ot, err := m.st.GetTree(oe.ID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range ot.Entries {
		if d.Kind != store.KindDir || (len(d.Name) != 2 && d.Name != "pack") {
			continue
		}
		t, err := m.st.GetTree(d.ID)
		if err != nil {
			return n, err
		}
		names := make([]store.Entry, 0, len(t.Entries))
		for _, e := range t.Entries {
			if !e.Kind.IsRegular() {
				continue
			}
			if d.Name == "pack" {
				if !strings.HasPrefix(e.Name, "pack-") || (!strings.HasSuffix(e.Name, ".pack") && !strings.HasSuffix(e.Name, ".idx")) {
					continue
				}
			} else if !isHexName(d.Name + e.Name) {
				continue
			}
			names = append(names, e)
		}
		if d.Name == "pack" { // every .pack before any .idx
			packs := names[:0:0]
			for _, e := range names {
				if strings.HasSuffix(e.Name, ".pack") {
					packs = append(packs, e)
				}
			}
			for _, e := range names {
				if strings.HasSuffix(e.Name, ".idx") {
					packs = append(packs, e)
				}
			}
			names = packs
		}
		for _, e := range names {
			p := filepath.Join(dst, d.Name, e.Name)
			if _, err := os.Lstat(p); err == nil {
				continue
			}
			if err := m.copyObject(e, p); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

func (m *gitNative) copyObject(e store.Entry, p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), "tmp_obj_acyclicfs_")
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	err = m.copyBlobTo(e.ID, tmp, 0o444, !m.opt.NoSync)
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// copyBlobTo writes blob id's content to the file p (created or
// truncated) with mode, streamed, synced when sync.
func (m *gitNative) copyBlobTo(id store.ID, p string, mode os.FileMode, sync bool) error {
	r, err := m.st.OpenBlob(id)
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy blob %s to %s: %w", id.Short(), p, err)
	}
	return nil
}

// topIgnore returns the lowest-precedence ignore rules: the workspace's
// .git/info/exclude.
func (m *gitNative) topIgnore(gitE *store.Entry) ([]ignoreSet, [32]byte, error) {
	var fp [32]byte
	if gitE == nil || gitE.Kind != store.KindDir {
		return nil, fp, nil
	}
	e, err := m.entryAt(gitE.ID, "info/exclude")
	if err != nil || e == nil || !e.Kind.IsRegular() {
		return nil, fp, err
	}
	data, err := m.st.ReadBlob(e.ID)
	if err != nil {
		return nil, fp, fmt.Errorf("read .git/info/exclude: %w", err)
	}
	copy(fp[:], e.ID[:])
	return []ignoreSet{{base: "", rules: parseIgnore(data)}}, fp, nil
}
