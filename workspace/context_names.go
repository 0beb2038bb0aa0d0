package workspace

import (
	"github.com/acyclicfs/acyclicfs/corestate"
	"github.com/acyclicfs/acyclicfs/workspace/contexts"
)

// The context records live in package contexts; these names keep
// workspace's API as it was.
type (
	// ContextStore is contexts.Store.
	ContextStore = contexts.Store
	// Context is contexts.Context.
	Context = contexts.Context
	// ContextRoot is contexts.Root.
	ContextRoot = contexts.Root
	// ContextState is contexts.State.
	ContextState = contexts.State
)

// Context states (contexts.Active, Frozen, Discarded).
const (
	ContextActive    = contexts.Active
	ContextFrozen    = contexts.Frozen
	ContextDiscarded = contexts.Discarded
)

// Context sentinels: the values of package contexts (errors.Is matches
// either name).
var (
	ErrUnknownContext    = contexts.ErrUnknown
	ErrContextExists     = contexts.ErrExists
	ErrContextFrozen     = contexts.ErrFrozen
	ErrContextDiscarded  = contexts.ErrDiscarded
	ErrContextClaimed    = contexts.ErrClaimed
	ErrTraversalLimit    = contexts.ErrTraversalLimit
	ErrIncompatibleState = contexts.ErrIncompatibleState
	ErrContextNoParent   = contexts.ErrNoParent
)

// NewContextStore is contexts.NewStore.
func NewContextStore(cs *corestate.Store) (*ContextStore, error) { return contexts.NewStore(cs) }

// ContextID is contexts.ID.
func ContextID(name string) string { return contexts.ID(name) }
