// Package rebase is acyclicfs's pure 3-way tree merge, tree diff and text
// diff/merge.
//
// # Overview
//
// Merge3 merges two root trees against their common ancestor, path by
// path: a side that left a path unchanged yields to the other; the same
// change on both sides is taken once; two edits of a regular text file are
// merged line by line (MergeText, diff3 with a Myers diff); directories
// recurse; everything else is a Conflict of kind content, modify/delete,
// add/add, type or mode. The exec bit merges independently of content.
// Entries are compared by kind and ID only: an mtime change is not a
// change. Options.Prefer resolves every conflict by taking one side whole
// for that path; Options.Markers writes diff3 conflict markers into text
// files and resolves the rest conservatively (see Options). With conflicts
// left unresolved nothing is written and Result.Tree is zero, so a
// conflicted rebase changes nothing.
//
// .gitattributes "merge" attributes are honoured as git does (gitattr.go
// parses and matches them, attrs.go finds them in ours' tree): "-merge"
// and "binary" make a content conflict, "merge=union" merges without
// conflicts (MergeUnion), "merge=NAME" is handed to Options.Driver, which
// package rebase/mergedriver implements by running git-configured
// drivers; rebase itself runs no processes.
//
// Diff lists the file-level changes between two trees, and UnifiedDiff
// renders a git-style patch of two texts.
//
// Merge and diff never read a subtree whose ID is the same on the sides
// being compared, so their cost is proportional to the changed paths (and
// the size of the directories on those paths), not to the tree. Limits
// bound the changed paths, conflicts and text size (seed 000's
// OperationReconcileLimits); exceeding the first two fails with ErrLimit
// before anything is written.
//
// The package imports only the standard library and store's ID, tree and
// error types; reading and writing objects goes through the small
// TreeReader and TreeWriter interfaces that its callers implement.
// Package rebasetest provides an in-memory implementation for tests.
//
// # Concurrency
//
// All functions are safe for concurrent use: they keep no shared state.
// Merge3 calls its reader and writer from the calling goroutine only, and
// writes only after the whole merge has been computed (new blobs before the
// trees that name them, children before parents), so a failed or conflicted
// merge leaves at most an unreferenced prefix of objects behind if the
// writer fails midway.
//
// # Caveats
//
//   - Adjacent edits (neighbouring lines changed on each side, with no
//     unchanged line between) conflict, as in git.
//   - A clean merge of a text file keeps merged content in memory until it
//     is written; memory is bounded by Limits.MaxTextBytes per file.
//   - The line diff caps its work on pathological inputs (huge files with
//     almost nothing in common) and then reports a region as replaced
//     wholesale: correct, but possibly more conflicting than a minimal
//     diff.
//   - Conflict marker lines end in "\n" even in CRLF files.
//   - Of the attributes only "merge" is read; merge.default,
//     conflict-marker-size, $GIT_DIR/info/attributes and
//     core.attributesFile are not.
//   - A directory emptied by a merge is kept as an empty directory, unless
//     one side deleted it, in which case it is removed.
package rebase
