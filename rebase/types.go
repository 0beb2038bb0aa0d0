package rebase

import "github.com/acyclicfs/acyclicfs/store"

// TreeReader is what a merge or diff reads. GetTree returns a tree by ID;
// ReadBlob returns a blob's content and is called only for the three sides
// of a text merge, each no larger than Limits.MaxTextBytes by its entry's
// Size.
type TreeReader interface {
	GetTree(id store.ID) (*store.Tree, error)
	ReadBlob(id store.ID) ([]byte, error)
}

// TreeWriter stores merged objects. Both methods must return the store's
// canonical ID (store.TreeID of the encoding, store.BlobID of the content);
// Merge3 checks this and fails with ErrIDMismatch otherwise.
type TreeWriter interface {
	PutTree(t *store.Tree) (store.ID, error)
	WriteBlobBytes(b []byte) (store.ID, error)
}

// Prefer resolves every conflict by taking one side whole for the
// conflicting path.
type Prefer int

// Prefer values.
const (
	PreferNone Prefer = iota
	PreferOurs
	PreferTheirs
)

// String returns "none", "ours" or "theirs".
func (p Prefer) String() string {
	switch p {
	case PreferOurs:
		return "ours"
	case PreferTheirs:
		return "theirs"
	}
	return "none"
}

// Limits bound the work of a reconcile. They port seed 000's
// OperationReconcileLimits; a zero field means its default.
type Limits struct {
	// MaxGenerations bounds the generations the caller walks to find a
	// merge base. Merge3 does not use it; it is here so one value carries
	// every reconcile bound.
	MaxGenerations int
	// MaxChanges bounds the paths that differ between the three sides that
	// Merge3 visits. Exceeding it fails with ErrLimit.
	MaxChanges int
	// MaxConflicts bounds the conflicts (resolved or not) Merge3 records.
	// Exceeding it fails with ErrLimit.
	MaxConflicts int
	// MaxTextBytes is the largest file Merge3 reads for a line-level merge.
	// A file changed on both sides and larger than this is a content
	// conflict handled like a binary file — not an error.
	MaxTextBytes int64
}

// Default limits; the first three are seed 000's values.
const (
	DefaultMaxGenerations = 4096
	DefaultMaxChanges     = 65536
	DefaultMaxConflicts   = 1024
	DefaultMaxTextBytes   = 8 << 20
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxGenerations: DefaultMaxGenerations,
		MaxChanges:     DefaultMaxChanges,
		MaxConflicts:   DefaultMaxConflicts,
		MaxTextBytes:   DefaultMaxTextBytes,
	}
}

// WithDefaults returns l with every zero or negative field replaced by its
// default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxGenerations <= 0 {
		l.MaxGenerations = d.MaxGenerations
	}
	if l.MaxChanges <= 0 {
		l.MaxChanges = d.MaxChanges
	}
	if l.MaxConflicts <= 0 {
		l.MaxConflicts = d.MaxConflicts
	}
	if l.MaxTextBytes <= 0 {
		l.MaxTextBytes = d.MaxTextBytes
	}
	return l
}

// Options control Merge3.
type Options struct {
	// Prefer, when not PreferNone, resolves every conflict by taking that
	// side's entry whole (a deleted side deletes). It takes precedence over
	// Markers.
	Prefer Prefer
	// Markers resolves conflicts in place: a text content or add/add
	// conflict becomes a blob with diff3 markers (an add/add has an empty
	// base section); a modify/delete keeps the modified side; every other
	// conflict (binary or oversized content, symlinks, type, mode) keeps
	// ours. All are listed in Result.Resolved.
	Markers bool
	// KeepConflicts makes unresolved conflicts part of the result instead
	// of voiding it: each conflicting path keeps ours' entry (absent if
	// ours deleted it) in the tree, the tree is written, and
	// Result.Conflicts lists them with all three sides. Callers record the
	// conflicts so that the stand-in is never taken for a resolution.
	KeepConflicts bool
	// Subtree, when set, is offered every directory that both sides hold
	// and changed differently, before Merge3 descends into it (see
	// SubtreeMerger).
	Subtree SubtreeMerger
	// Driver, when set, runs custom merge drivers: a regular file that
	// both sides changed and whose merge attribute is "merge=NAME" is
	// offered to Driver (see MergeDriver) before any built-in merge. Nil
	// behaves as a Driver that knows no driver: git's fallback to the
	// built-in driver of that name (text, binary, union) or else the text
	// merge.
	Driver MergeDriver
	// Limits bound the merge; zero fields take defaults.
	Limits Limits
}

// MergeDriver merges the content of one regular file with the custom merge
// driver name (from a .gitattributes "merge=name"), as git's
// merge.NAME.driver does. path is the file's path from the merge root;
// base is nil when both sides added the file. The three contents are no
// larger than Limits.MaxTextBytes and may be binary.
//
// ok false means no driver of that name is configured: Merge3 then does
// what git does, the built-in merge of that name or the text merge. With ok
// true, clean says whether the merge succeeded; merged is the result or,
// when not clean, the stand-in content the driver left (what
// Options.Markers writes in place of diff3 markers). A non-nil err fails
// the whole merge, so a driver that runs but fails should report a
// conflict (clean false), not an error.
//
// Package rebase/mergedriver runs git-configured drivers; Merge3 runs no
// processes itself.
type MergeDriver func(name, path string, base, ours, theirs []byte) (merged []byte, clean, ok bool, err error)

// SubtreeMerger merges a whole directory by rules of its own (a git
// repository's git directory: refs by ancestry, objects by union). path is
// the directory's path from the root; base is nil where the directory is
// new on both sides, ours and theirs are directories. With ok false Merge3
// merges the directory itself, path by path. With ok true, merged is the
// entry to use (nil removes the path; its Name is set by Merge3) and
// conflicts are what the rules could not settle, with full paths; the
// merger has written every object merged names through its own writer
// (Merge3 writes nothing for it). Its conflicts count against
// Limits.MaxConflicts and follow Options like any other: without
// KeepConflicts they void the merge.
type SubtreeMerger interface {
	MergeSubtree(path string, base, ours, theirs *store.Entry) (merged *store.Entry, conflicts []Conflict, ok bool, err error)
}

// ConflictKind classifies a conflict.
type ConflictKind string

// Conflict kinds.
const (
	// ConflictContent: both sides modified the file (or symlink) in
	// overlapping regions, or it is binary or too large to merge.
	ConflictContent ConflictKind = "content"
	// ConflictModifyDelete: one side deleted the path, the other changed it.
	ConflictModifyDelete ConflictKind = "modify/delete"
	// ConflictAddAdd: both sides added the path with different content.
	ConflictAddAdd ConflictKind = "add/add"
	// ConflictType: the sides disagree on file vs directory vs symlink.
	ConflictType ConflictKind = "type"
	// ConflictMode: both sides gave a regular file different permission
	// bits — added with the same content and different modes, or both
	// changed base's mode, differently (as git's merge conflicts on a
	// file's mode). Its content still merges; the stand-in has ours' mode.
	// A directory or special file whose mode both sides changed keeps
	// ours' without a conflict.
	ConflictMode ConflictKind = "mode"
)

// Conflict is one path the merge could not resolve by itself. Base, Ours
// and Theirs are the entries at Path on each side, nil where absent.
type Conflict struct {
	Path   string
	Kind   ConflictKind
	Base   *store.Entry
	Ours   *store.Entry
	Theirs *store.Entry
}

// Result is the outcome of Merge3.
type Result struct {
	// Tree is the merged root tree, written with all its new subtrees and
	// blobs. Unless Options.KeepConflicts, it is the zero ID — and nothing
	// has been written — when Conflicts is non-nil. It can also be zero when the merge result is
	// one of the inputs and that input was the zero (empty) root.
	Tree store.ID
	// Conflicts are the unresolved conflicts, sorted by path; nil when the
	// merge succeeded. With Options.KeepConflicts the Tree is written all
	// the same, holding ours at each of these paths.
	Conflicts []Conflict
	// Resolved are conflicts resolved by Options.Prefer or Options.Markers,
	// sorted by path.
	Resolved []Conflict
	// Changed counts the paths (files and directories below the root)
	// visited whose entries were not identical on all three sides.
	Changed int
}

// ChangeKind classifies a change in Diff.
type ChangeKind byte

// Change kinds.
const (
	Added    ChangeKind = 'A'
	Modified ChangeKind = 'M' // content or exec bit
	Deleted  ChangeKind = 'D'
	TypeChg  ChangeKind = 'T' // file <-> directory <-> symlink
)

// String returns the one-letter form.
func (k ChangeKind) String() string { return string(rune(k)) }

// Change is one path that differs between two trees. Old is nil for an
// addition, New for a deletion.
type Change struct {
	Path string
	Kind ChangeKind
	Old  *store.Entry
	New  *store.Entry
}
