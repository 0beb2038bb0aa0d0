package workspace

import (
	"errors"
	"fmt"
)

// Context sentinels. Each wraps the workspace sentinel whose exit code it
// should have (ErrInvalidInput → 2, ErrBusy → 4), so the CLI's one switch
// maps them without a case of their own; errors.Is matches either.
var (
	// ErrUnknownContext is returned when a named context does not exist.
	ErrUnknownContext = fmt.Errorf("unknown context (%w)", ErrInvalidInput)
	// ErrContextExists is returned when creating or forking into a context
	// name that is taken (discarded contexts keep their names).
	ErrContextExists = fmt.Errorf("context already exists (%w)", ErrInvalidInput)
	// ErrContextFrozen is returned when fork or land touches a frozen
	// context: freezing stops every further change through contexts.
	ErrContextFrozen = fmt.Errorf("context is frozen (%w)", ErrBusy)
	// ErrContextDiscarded is returned when an operation other than show or
	// list names a discarded context.
	ErrContextDiscarded = fmt.Errorf("context is discarded (%w)", ErrInvalidInput)
	// ErrContextClaimed is returned when a landing into a parent context is
	// refused because another operation holds the parent's claim.
	ErrContextClaimed = fmt.Errorf("context is being landed into by another operation (%w)", ErrBusy)
	// ErrTraversalLimit is returned by a bounded discard whose subtree (or
	// one context's child list) is larger than the bound. It is decided
	// from child counts before any oversized child list is read; nothing
	// was changed.
	ErrTraversalLimit = fmt.Errorf("context subtree exceeds the traversal bound (%w)", ErrInvalidInput)
	// ErrIncompatibleState is returned when the context records and their
	// children index disagree, or the index was never built, so a bounded
	// operation cannot proceed safely. A discard never rebuilds the index;
	// `context list` does.
	ErrIncompatibleState = errors.New("context state is incompatible")
	// ErrContextNoParent is returned by context land for a context without a
	// parent context: there is nothing to land into.
	ErrContextNoParent = fmt.Errorf("context has no parent context (%w)", ErrInvalidInput)
)
