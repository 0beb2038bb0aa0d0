package workspace

import (
	"errors"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace/errs"
)

var (
	// ErrInvalidName is returned when a workspace name breaks the naming rule
	// (1–128 bytes of [A-Za-z0-9._-], not starting with '.' or '-').
	// It is the store's sentinel, so errors from either layer match.
	ErrInvalidName = store.ErrInvalidName
	// ErrUnknownWorkspace is returned when a named workspace does not exist.
	ErrUnknownWorkspace = errors.New("unknown workspace")
	// ErrExists is returned when creating a workspace whose name is taken.
	ErrExists = errors.New("workspace already exists")
	// ErrInvalidInput is returned for bad arguments: a --from that is not a
	// directory, a malformed generation, an export target that is a file.
	// It is errs.ErrInvalidInput, shared with the sub-packages.
	ErrInvalidInput = errs.ErrInvalidInput
	// ErrBusy is returned when a workspace is mounted or a lock could not be
	// had in time. It is errs.ErrBusy, shared with the sub-packages.
	ErrBusy = errs.ErrBusy
	// ErrConflict is returned (wrapped in a *ConflictError) when a rebase or
	// land cannot merge cleanly; nothing was changed.
	ErrConflict = errors.New("conflict")
	// ErrHasChildren is returned by Remove when the workspace has children
	// and recursive removal was not asked for.
	ErrHasChildren = errors.New("workspace has children")
	// ErrNotEmpty is returned by Export when the target directory is not
	// empty and --force was not given.
	ErrNotEmpty = errors.New("target directory is not empty")
	// ErrNoHistory is returned by Undo when there is no previous head.
	ErrNoHistory = errors.New("no previous head to undo to")
	// ErrNoParent is returned by Rebase and Land for a root workspace.
	ErrNoParent = errors.New("workspace has no parent")
	// ErrNoConflicts is returned by Resolve and CatEntry when a named path
	// is not a recorded conflict (or the workspace has none).
	ErrNoConflicts = errors.New("no such conflict")
	// ErrUnresolved is returned by Resolve when a file taken as it is still
	// holds conflict markers.
	ErrUnresolved = errors.New("unresolved")
	// ErrNoSuchPath is returned by CatEntry when the path is absent (on
	// the asked side) or not a file.
	ErrNoSuchPath = errors.New("no such file")
	// ErrNotAStore is returned by Open (and CheckStoreDir) for a directory
	// that holds files but is not a store: a store is never made among a
	// user's files.
	ErrNotAStore = errors.New("not an acyclicfs store")
	// ErrUnsafeTarget is returned when a path names a directory a command
	// must not replace or serve over: /, the store, a directory inside a
	// store or holding one (export --force, create --from/--in-place,
	// mount; the CLI adds the working directory and $HOME).
	ErrUnsafeTarget = errors.New("refused: unsafe target")
)
