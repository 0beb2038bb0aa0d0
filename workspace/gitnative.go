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
// repository at repoPath, bound to it (see gitNative.CreateFromGit).
func (m *Manager) CreateFromGit(ctx context.Context, name, repoPath, rev string) (GitImport, error) {
	return m.gn.CreateFromGit(ctx, name, repoPath, rev)
}

// GitBind binds ws to REPO's branch (see gitNative.GitBind).
func (m *Manager) GitBind(ws, repo string, opt GitBindOptions) (GitBinding, error) {
	return m.gn.GitBind(ws, repo, opt)
}

// GitUnbind removes ws's binding.
func (m *Manager) GitUnbind(ws string) error { return m.gn.GitUnbind(ws) }

// GitShow returns ws's binding and whether REPO's branch moved since Base.
func (m *Manager) GitShow(ws string, env []string) (GitState, error) { return m.gn.GitShow(ws, env) }

// GitPublish makes ws's head a value of its repository's branch (see
// gitNative.GitPublish).
func (m *Manager) GitPublish(ctx context.Context, ws string, opt PublishOptions) (PublishResult, error) {
	return m.gn.GitPublish(ctx, ws, opt)
}

// GitPull takes in what REPO's bound branch received since Base, as a
// parent advance (see gitNative.GitPull).
func (m *Manager) GitPull(ctx context.Context, ws string, env []string) (PullResult, error) {
	return m.gn.GitPull(ctx, ws, env)
}
