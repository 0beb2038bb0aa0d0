// Package gitmerge merges a git directory (".git") the way git would,
// never line by line. It plugs into rebase.Merge3 as a
// rebase.SubtreeMerger: Merge3 offers it every directory both sides
// changed differently, and it takes those whose last element is ".git"
// and that look like a git directory on both sides (HEAD, objects/,
// refs/).
//
// Division of labour: Go merges the files that are sets or scalars —
// objects by union (content addressed, so a name means one content), refs
// by name with loose over packed, reflogs by a time-ordered union of
// lines, HEAD and scratch files by which side changed them. Real git
// (a private, throwaway GIT_DIR whose object store is hard links to the
// store's blobs) answers what only git can: ancestry of two commits
// (merge-base), the merge of two diverged commits (merge-tree
// --write-tree, then commit-tree for a deterministic merge commit), and
// the index of the merged HEAD (read-tree, diff-index, update-index).
// Objects git writes come back into the store as loose-object blobs.
package gitmerge
