package window

import "errors"

var (
	// ErrIncompatibleState is returned when stored window state is torn,
	// corrupt, of an unknown (future) version, or does not belong to the
	// workspace it was read for. Such state is never reset to idle: a
	// recovery decision belongs to a person or a newer binary.
	ErrIncompatibleState = errors.New("operation-window state is incompatible")
	// ErrReconciling is returned when a new lease is requested while a
	// reconciliation ticket fences the workspace.
	ErrReconciling = errors.New("workspace operation window is reconciling")
	// ErrInvalidExpiry is returned when a lease lifetime is empty, already
	// expired, or a renewal would shorten the lease.
	ErrInvalidExpiry = errors.New("operation lease must expire after the current time")
	// ErrLeaseIdentityConflict is returned when a deterministic lease id is
	// already bound to another owner or expiry, or when the owner or id is
	// empty.
	ErrLeaseIdentityConflict = errors.New("operation lease identity is already bound to another owner or expiry")
	// ErrLeaseLost is returned when a lease handle was closed, expired,
	// recovered by another process, or superseded by a renewal. Its permit is
	// fenced: the holder must stop publishing.
	ErrLeaseLost = errors.New("operation lease is no longer active")
	// ErrContended is returned when optimistic concurrency kept failing for
	// the bounded number of attempts.
	ErrContended = errors.New("operation-window state remained contended")
	// ErrStaleTicket is returned when reconciliation is completed with a
	// ticket that is not the workspace's current one.
	ErrStaleTicket = errors.New("operation-window reconciliation ticket is stale")
	// ErrInvalidWorkspace is returned when a workspace name is empty or not
	// valid UTF-8.
	ErrInvalidWorkspace = errors.New("invalid workspace name")
	// ErrInvalidParent is returned when a parent generation observed or
	// advanced to is the zero ID (which means "none").
	ErrInvalidParent = errors.New("invalid parent generation")
)
