package workspace

import "context"

// gitNative is the git-native part of a Manager (git*.go): workspaces
// created from a git repository, their bindings to a REPO and branch
// (the git-compatibility records), publish and pull. It works over the
// core's operations (the embedded Manager) and owns its own state: the
// cache of git object names of store objects that publishing keeps. The
// core reaches it only through the exported methods below.
type gitNative struct {
	*Manager
	oids oidCache // git object names of store objects (publish)
}

// GitBinding returns ws's git-compatibility record and its revision;
// found is false (rev 0) when ws is not bound.
func (m *Manager) GitBinding(ws string) (b GitBinding, rev uint64, found bool, err error) {
	return m.gn.GitBinding(ws)
}

// SetGitBinding stores b as ws's record if the record is at expectRev (0:
// absent) and returns the new revision (corestate.ErrConflict otherwise).
func (m *Manager) SetGitBinding(ws string, expectRev uint64, b GitBinding) (uint64, error) {
	return m.gn.SetGitBinding(ws, expectRev, b)
}

// DeleteGitBinding removes ws's record if it is at expectRev
// (corestate.ErrConflict otherwise).
func (m *Manager) DeleteGitBinding(ws string, expectRev uint64) error {
	return m.gn.DeleteGitBinding(ws, expectRev)
}

// CreateFromGit makes a new root workspace whose tree is rev's tree in the
// repository at repoPath, read from its objects (no checkout), with a
// working .git: objects shared with the repository through
// objects/info/alternates, HEAD on rev's branch (or detached at the
// commit), the repository's branches and tags as packed refs, and an
// index whose stat data is what a mount of the workspace reports, so that
// git status inside is clean without reading any file. The index carries
// a clean fsmonitor token of the tree, so that with fsmonitor git stats
// nothing at all. The workspace is bound to the repository and branch
// (GitBinding). The repository is only read.
//
// The files are git object references (resolved later, in the daemon's
// background: ResolveGitRefs); with opt.Resolve every one is stored
// before the workspace is created, so that an import stopped meanwhile
// (Ctrl-C) creates nothing.
func (m *Manager) CreateFromGit(ctx context.Context, name, repoPath, rev string, opt ...GitImportOptions) (GitImport, error) {
	var o GitImportOptions
	if len(opt) > 0 {
		o = opt[0]
	}
	return m.gn.CreateFromGit(ctx, name, repoPath, rev, o)
}

// GitImportOptions tune CreateFromGit.
type GitImportOptions struct {
	// Resolve stores every file's content before the workspace is made
	// (`create --from-git --resolve`); Resolved then counts them.
	Resolve bool
}

// GitBind binds ws to REPO's branch: Base is the branch's current commit,
// and the workspace's head is taken to be that commit's tree (BaseTree).
func (m *Manager) GitBind(ws, repo string, opt GitBindOptions) (GitBinding, error) {
	return m.gn.GitBind(ws, repo, opt)
}

// GitUnbind removes ws's binding.
func (m *Manager) GitUnbind(ws string) error { return m.gn.GitUnbind(ws) }

// GitShow returns ws's binding and whether REPO's branch moved since Base.
func (m *Manager) GitShow(ws string, env []string) (GitState, error) { return m.gn.GitShow(ws, env) }

// GitPublish makes ws's head a value of REPO's branch (docs/git.md
// "Publishing"): the workspace's commits on the branch are transferred
// (fast-forward only), its uncommitted changes become one commit on top,
// and the branch moves by compare-and-swap. REPO's working tree, index and
// other refs are not touched; neither is the workspace.
//
// A cancelled ctx stops it between its steps (object copy, commit
// writing, the branch's compare-and-swap): the branch and the binding are
// then as they were; objects already written into REPO are unreferenced
// (git gc drops them).
func (m *Manager) GitPublish(ctx context.Context, ws string, opt PublishOptions) (PublishResult, error) {
	return m.gn.GitPublish(ctx, ws, opt)
}

// GitPull takes in what REPO's bound branch received since Base, as a
// parent advance (docs/git.md "Pulling"): the branch's commit is imported
// (its tree from REPO's objects, as create --from-git does) with the
// workspace's .git as it was at Base but the branch pointing at the commit
// (its objects in a pack, its index), and merged three-way — git-aware —
// with the workspace's head against BaseTree. Conflicts are recorded in
// the new head as a rebase records them. Base and BaseTree move by
// compare-and-swap on the binding.
func (m *Manager) GitPull(ctx context.Context, ws string, env []string) (PullResult, error) {
	return m.gn.GitPull(ctx, ws, env)
}
