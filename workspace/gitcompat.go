package workspace

import (
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/corestate"
)

// familyGitCompat holds one GitBinding per bound workspace, keyed by the
// workspace's name. The name carries the record's version, as the
// reference design's git-compat-v9 namespace does: records of an older
// layout (family "git-compat") are neither read nor touched.
const familyGitCompat = "git-compat-v9"

// gitBindingVersion is the layout of GitBinding.
const gitBindingVersion = 1

// GitBinding is a workspace's git-compatibility record (docs/git.md): the
// repository and branch the workspace is bound to and how far the two
// agree. It changes only by compare-and-swap on its revision, so two
// commands racing to move it cannot both win.
type GitBinding struct {
	Version   int    `json:"version"`
	Workspace string `json:"workspace"`
	// Repo is the absolute path of the repository's git directory (its
	// common directory for a linked worktree).
	Repo string `json:"repo"`
	// Branch is the full ref the workspace is bound to (refs/heads/B);
	// empty for a workspace started from a tag or a commit.
	Branch string `json:"branch,omitempty"`
	// Base is the commit of Repo the workspace last took in (create
	// --from-git, pull) or gave out (publish): what the branch held when
	// the two last agreed.
	Base string `json:"base"`
	// BaseTree is the workspace tree (hex store ID, .git/ included) that
	// Base was imported as, or that was published as Base.
	BaseTree string `json:"base_tree,omitempty"`
	// Published is the last commit publish moved Branch to ("" if never).
	Published string `json:"published,omitempty"`
	// OnLand is "publish" when a land into the workspace publishes it.
	OnLand string `json:"on_land,omitempty"`
	// PublishedSeq is the workspace's head-log sequence number that bind
	// or the last publish saw: the commit of uncommitted changes lists the
	// log entries after it. Absent (0) in records written before it
	// existed: such a record lists the whole log.
	PublishedSeq uint64 `json:"published_seq,omitempty"`
}

// ErrNotBound is returned for a git command on a workspace with no
// GitBinding.
var ErrNotBound = errors.New("workspace is not bound to a git repository")

func (m *gitNative) gitCompat() corestate.Family[GitBinding] {
	f, _ := corestate.NewFamily[GitBinding](m.cs, familyGitCompat) // constant, valid name
	return f
}

// GitBinding returns ws's git-compatibility record and its revision;
// found is false (rev 0) when ws is not bound.
func (m *gitNative) GitBinding(ws string) (b GitBinding, rev uint64, found bool, err error) {
	b, rev, found, err = m.gitCompat().LoadBounded(ws, 1<<20)
	if err != nil {
		return b, 0, false, fmt.Errorf("git binding of %s: %w", ws, err)
	}
	if found && (b.Version != gitBindingVersion || b.Workspace != ws) {
		return b, 0, false, fmt.Errorf("git binding of %s: %w: version %d, workspace %q", ws, corestate.ErrCorrupt, b.Version, b.Workspace)
	}
	return b, rev, found, nil
}

// SetGitBinding stores b as ws's record if the record is at expectRev (0:
// absent) and returns the new revision. A record moved meanwhile is
// corestate.ErrConflict and changes nothing.
func (m *gitNative) SetGitBinding(ws string, expectRev uint64, b GitBinding) (uint64, error) {
	b.Version, b.Workspace = gitBindingVersion, ws
	rev, err := m.gitCompat().CompareAndSwap(ws, expectRev, b)
	if err != nil {
		return 0, fmt.Errorf("git binding of %s: %w", ws, err)
	}
	return rev, nil
}

// DeleteGitBinding removes ws's record if it is at expectRev; a stale
// revision is corestate.ErrConflict and deletes nothing.
func (m *gitNative) DeleteGitBinding(ws string, expectRev uint64) error {
	if err := m.gitCompat().CompareAndDelete(ws, expectRev); err != nil {
		return fmt.Errorf("git binding of %s: %w", ws, err)
	}
	return nil
}
