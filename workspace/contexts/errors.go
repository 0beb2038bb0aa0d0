package contexts

import (
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/workspace/errs"
)

// Context sentinels. Each wraps the workspace sentinel whose exit code it
// should have (ErrInvalidInput → 2, ErrBusy → 4), so the CLI's one switch
// maps them without a case of their own; errors.Is matches either.
var (
	// ErrUnknownContext is returned when a named context does not exist.
	ErrUnknown = fmt.Errorf("unknown context (%w)", errs.ErrInvalidInput)
	// ErrContextExists is returned when creating or forking into a context
	// name that is taken (discarded contexts keep their names).
	ErrExists = fmt.Errorf("context already exists (%w)", errs.ErrInvalidInput)
	// ErrContextFrozen is returned when fork or land touches a frozen
	// context: freezing stops every further change through contexts.
	ErrFrozen = fmt.Errorf("context is frozen (%w)", errs.ErrBusy)
	// ErrContextDiscarded is returned when an operation other than show or
	// list names a discarded context.
	ErrDiscarded = fmt.Errorf("context is discarded (%w)", errs.ErrInvalidInput)
	// ErrContextClaimed is returned when a landing into a parent context is
	// refused because another operation holds the parent's claim.
	ErrClaimed = fmt.Errorf("context is being landed into by another operation (%w)", errs.ErrBusy)
	// ErrTraversalLimit is returned by a bounded discard whose subtree (or
	// one context's child list) is larger than the bound. It is decided
	// from child counts before any oversized child list is read; nothing
	// was changed.
	ErrTraversalLimit = fmt.Errorf("context subtree exceeds the traversal bound (%w)", errs.ErrInvalidInput)
	// ErrIncompatibleState is returned when the context records and their
	// children index disagree, or the index was never built, so a bounded
	// operation cannot proceed safely. A discard never rebuilds the index;
	// `context list` does.
	ErrIncompatibleState = errors.New("context state is incompatible")
	// ErrContextNoParent is returned by context land for a context without a
	// parent context: there is nothing to land into.
	ErrNoParent = fmt.Errorf("context has no parent context (%w)", errs.ErrInvalidInput)
)
