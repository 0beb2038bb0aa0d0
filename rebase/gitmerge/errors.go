package gitmerge

import "errors"

// Sentinel errors. Every error MergeSubtree returns wraps one of these or
// an error of the store it was given.
var (
	// ErrGit: a git command failed in a way the merge cannot treat as a
	// conflict (it could not start, or printed something unparseable).
	ErrGit = errors.New("gitmerge: git failed")
	// ErrGitTimeout: git did not finish within Merger.Timeout; it was
	// killed and the merge fails, having changed nothing.
	ErrGitTimeout = errors.New("gitmerge: git timed out")
	// ErrGitVersion: the git binary is older than 2.38 (no
	// merge-tree --write-tree).
	ErrGitVersion = errors.New("gitmerge: git too old (need 2.38 or later)")
	// ErrStoreID: the store returned an object under an ID other than the
	// one the merge expected.
	ErrStoreID = errors.New("gitmerge: store returned an unexpected ID")
)
