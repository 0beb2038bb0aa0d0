package window

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acyclicfs/acyclicfs/store"
)

// maxCASAttempts bounds optimistic-concurrency retries per operation; past
// it the operation fails with ErrContended instead of spinning.
const maxCASAttempts = 32

// Lease is the handle returned to one filesystem-touching tool. It is a
// value: a renewal returns a new Lease whose Permit replaces the old one,
// and the old handle is fenced.
type Lease struct {
	// Workspace is the workspace whose window the lease belongs to.
	Workspace string
	// ID is the lease's stable identity.
	ID LeaseID
	// Owner is the adapter-defined owner.
	Owner string
	// PinnedParent is the parent generation pinned by the shared window.
	PinnedParent GenerationID
	// ExpiresAtMillis is the expiry copied from durable state.
	ExpiresAtMillis int64
	// Permit admits head publications made by exactly this still-live
	// lease epoch (see store.CheckPermitTx).
	Permit store.Permit
}

// Reconcile is reconciliation work claimed after a final close, an expiry,
// or an idle parent advance. Exactly one holder owns a ticket at a time.
type Reconcile struct {
	// Workspace is the workspace to reconcile.
	Workspace string
	// Ticket is the stable retry identity (use it as the rebase's
	// idempotency key).
	Ticket Ticket
	// PinnedParent is the parent generation visible when the window opened.
	PinnedParent GenerationID
	// PendingParent is the newest coalesced parent; zero if the parent did
	// not advance (reconcile only captures, no rebase).
	PendingParent GenerationID
}

// FinishOutcome says what closing a lease did.
type FinishOutcome int

const (
	// FinishStillActive: other live leases still pin the view.
	FinishStillActive FinishOutcome = iota + 1
	// FinishReconcile: this was the final live close; the caller owns the
	// one reconciliation attempt in Finish.Reconcile.
	FinishReconcile
	// FinishAlreadyClosed: the lease was already closed, expired or
	// superseded; nothing is owed by the caller.
	FinishAlreadyClosed
)

func (o FinishOutcome) String() string {
	switch o {
	case FinishStillActive:
		return "still-active"
	case FinishReconcile:
		return "reconcile"
	case FinishAlreadyClosed:
		return "already-closed"
	}
	return fmt.Sprintf("FinishOutcome(%d)", int(o))
}

// Finish is the result of closing a lease.
type Finish struct {
	Outcome FinishOutcome
	// Remaining is the number of live leases left (FinishStillActive).
	Remaining int
	// Reconcile is the claimed work (FinishReconcile).
	Reconcile Reconcile
}

// Coordinator runs the operation-window state machine over a Store. It holds
// no state of its own and is safe for concurrent use; processes sharing a
// Store coordinate through its compare-and-swap.
type Coordinator struct {
	store Store
	clock Clock
}

// NewCoordinator returns a coordinator over st that reads time from clock
// (SystemClock{} in production).
func NewCoordinator(st Store, clock Clock) *Coordinator {
	return &Coordinator{store: st, clock: clock}
}

// Store returns the underlying store.
func (c *Coordinator) Store() Store { return c.store }

// Clock returns the coordinator's clock.
func (c *Coordinator) Clock() Clock { return c.clock }

// NewLeaseID returns a fresh lease id ordered by the coordinator's clock.
func (c *Coordinator) NewLeaseID() LeaseID { return LeaseID(newID16(c.clock.NowMillis())) }

// NewTicket returns a fresh ticket ordered by the coordinator's clock.
func (c *Coordinator) NewTicket() Ticket { return Ticket(newID16(c.clock.NowMillis())) }

// ExpiryAfter returns the absolute expiry ttl from now, for
// BeginWithLeaseID; ttl below one millisecond yields an expiry that Begin
// rejects.
func (c *Coordinator) ExpiryAfter(ttl time.Duration) int64 {
	return c.clock.NowMillis() + ttl.Milliseconds()
}

// Begin opens an overlapping lease that expires ttl from now. The first
// lease of a window pins parent; later leases share that pin.
func (c *Coordinator) Begin(ctx context.Context, workspace string, parent GenerationID, owner string, ttl time.Duration) (Lease, error) {
	return c.BeginWithLeaseID(ctx, workspace, parent, owner, c.ExpiryAfter(ttl), c.NewLeaseID())
}

// BeginWithLeaseID opens a lease with a caller-chosen deterministic
// identity and absolute expiry. Retrying with the same id, owner and expiry
// returns the recorded lease (replay by key); the same id with another owner
// or expiry is ErrLeaseIdentityConflict. If every lease of the window has
// expired, the window is moved to reconciliation (its ticket derived from
// id) and the call fails with ErrReconciling.
func (c *Coordinator) BeginWithLeaseID(ctx context.Context, workspace string, parent GenerationID, owner string, expiresAtMillis int64, id LeaseID) (Lease, error) {
	now := c.clock.NowMillis()
	if expiresAtMillis <= now {
		return Lease{}, fmt.Errorf("begin lease on %q: expiry %d not after now %d: %w", workspace, expiresAtMillis, now, ErrInvalidExpiry)
	}
	if strings.TrimSpace(owner) == "" || !utf8.ValidString(owner) || id.IsZero() {
		return Lease{}, fmt.Errorf("begin lease on %q: empty owner or lease id: %w", workspace, ErrLeaseIdentityConflict)
	}
	var out Lease
	var expired bool
	err := c.mutate(ctx, workspace, "begin lease", func(s *Snapshot) (bool, error) {
		expired = false
		prior, hadPrior := s.Phase.Leases[id]
		if _, ok := expireToReconcile(s, now, Ticket(id)); ok {
			expired = true
			return true, nil
		}
		if hadPrior && (prior.Owner != owner || prior.ExpiresAtMillis != expiresAtMillis) {
			// Recorded with another owner or expiry — even if that record
			// has just expired (a renewal can shorten a lease): reopening
			// the id would give the recorded lease a second gate.
			return false, fmt.Errorf("lease %s is bound to owner %q until %d: %w", id, prior.Owner, prior.ExpiresAtMillis, ErrLeaseIdentityConflict)
		}
		rec := LeaseRecord{ID: id, Owner: owner, ExpiresAtMillis: expiresAtMillis,
			Permit: store.Permit{Gate: gateName(workspace, id, s.Revision+1), Epoch: 1}}
		switch s.Phase.Kind {
		case PhaseIdle:
			s.Phase = Phase{Kind: PhaseActive, PinnedParent: parent, Leases: map[LeaseID]LeaseRecord{id: rec}}
		case PhaseActive:
			if existing, ok := s.Phase.Leases[id]; ok {
				if existing.Owner == owner && existing.ExpiresAtMillis == expiresAtMillis {
					out = leaseOf(workspace, s.Phase.PinnedParent, existing)
					return false, nil
				}
				return false, fmt.Errorf("lease %s is bound to owner %q until %d: %w", id, existing.Owner, existing.ExpiresAtMillis, ErrLeaseIdentityConflict)
			}
			s.Phase.Leases[id] = rec
		case PhaseReconciling:
			return false, ErrReconciling
		}
		out = leaseOf(workspace, s.Phase.PinnedParent, rec)
		return true, nil
	})
	if err != nil {
		return Lease{}, err
	}
	if expired {
		return Lease{}, fmt.Errorf("begin lease on %q: every lease expired: %w", workspace, ErrReconciling)
	}
	return out, nil
}

func leaseOf(workspace string, pinned GenerationID, r LeaseRecord) Lease {
	return Lease{Workspace: workspace, ID: r.ID, Owner: r.Owner, PinnedParent: pinned,
		ExpiresAtMillis: r.ExpiresAtMillis, Permit: r.Permit}
}

// ObserveParent coalesces a newly published parent generation into an
// active window (PendingParent) or a reconciling one (SubsequentParent)
// without changing the mount. It reports false, changing nothing, when the
// window is idle: use ParentAdvanced to reconcile an idle child.
func (c *Coordinator) ObserveParent(ctx context.Context, workspace string, parent GenerationID) (bool, error) {
	if parent.IsZero() {
		return false, fmt.Errorf("observe parent of %q: %w", workspace, ErrInvalidParent)
	}
	var observed bool
	err := c.mutate(ctx, workspace, "observe parent", func(s *Snapshot) (bool, error) {
		observed = s.Phase.Kind != PhaseIdle
		return coalesceParent(&s.Phase, parent), nil
	})
	return observed, err
}

// coalesceParent records parent in an active or reconciling phase and
// reports whether anything changed.
func coalesceParent(p *Phase, parent GenerationID) bool {
	switch p.Kind {
	case PhaseActive:
		if p.PendingParent == parent {
			return false
		}
		p.PendingParent = parent
		return true
	case PhaseReconciling:
		if p.SubsequentParent == parent {
			return false
		}
		p.SubsequentParent = parent
		return true
	}
	return false
}

// ParentAdvanced is ParentAdvancedWithTicket with a fresh ticket.
func (c *Coordinator) ParentAdvanced(ctx context.Context, workspace string, parent GenerationID) (Reconcile, bool, error) {
	return c.ParentAdvancedWithTicket(ctx, workspace, parent, c.NewTicket())
}

// ParentAdvancedWithTicket handles a parent that moved to parent. An idle
// window claims reconciliation now and returns it (ok = true): the claim is
// durable and fences new windows until CompleteReconcile, so a child whose
// last tool already closed catches up without opening another tool. An
// active window coalesces parent into PendingParent (reconciled at the final
// close); a reconciling one remembers it as SubsequentParent.
func (c *Coordinator) ParentAdvancedWithTicket(ctx context.Context, workspace string, parent GenerationID, ticket Ticket) (Reconcile, bool, error) {
	if parent.IsZero() {
		return Reconcile{}, false, fmt.Errorf("parent advanced on %q: %w", workspace, ErrInvalidParent)
	}
	if ticket.IsZero() {
		return Reconcile{}, false, fmt.Errorf("parent advanced on %q: zero ticket: %w", workspace, ErrStaleTicket)
	}
	var out Reconcile
	var claimed bool
	err := c.mutate(ctx, workspace, "parent advanced", func(s *Snapshot) (bool, error) {
		claimed = false
		if s.Phase.Kind == PhaseIdle {
			s.Phase = Phase{Kind: PhaseReconciling, Ticket: ticket, PinnedParent: parent, PendingParent: parent}
			out = Reconcile{Workspace: workspace, Ticket: ticket, PinnedParent: parent, PendingParent: parent}
			claimed = true
			return true, nil
		}
		return coalesceParent(&s.Phase, parent), nil
	})
	if err != nil || !claimed {
		return Reconcile{}, false, err
	}
	return out, true, nil
}

// Renew extends one still-live exact lease to ttl from now without changing
// the pinned view. The returned lease carries a new permit; the old handle
// and its permit are fenced. A closed, expired or superseded handle is
// ErrLeaseLost; a renewal that would shorten the lease is ErrInvalidExpiry.
func (c *Coordinator) Renew(ctx context.Context, lease Lease, ttl time.Duration) (Lease, error) {
	now := c.clock.NowMillis()
	expiry := now + ttl.Milliseconds()
	if ttl.Milliseconds() <= 0 || expiry < lease.ExpiresAtMillis {
		return Lease{}, fmt.Errorf("renew lease %s: expiry %d (now %d, was %d): %w", lease.ID, expiry, now, lease.ExpiresAtMillis, ErrInvalidExpiry)
	}
	var out Lease
	err := c.mutate(ctx, lease.Workspace, "renew lease", func(s *Snapshot) (bool, error) {
		if s.Phase.Kind != PhaseActive {
			return false, fmt.Errorf("lease %s: window is %s: %w", lease.ID, s.Phase.Kind, ErrLeaseLost)
		}
		rec, ok := s.Phase.Leases[lease.ID]
		switch {
		case !ok:
			return false, fmt.Errorf("lease %s closed: %w", lease.ID, ErrLeaseLost)
		case rec.ExpiresAtMillis != lease.ExpiresAtMillis || rec.Permit != lease.Permit:
			return false, fmt.Errorf("lease %s superseded by a renewal: %w", lease.ID, ErrLeaseLost)
		case rec.ExpiresAtMillis <= now:
			return false, fmt.Errorf("lease %s expired at %d (now %d): %w", lease.ID, rec.ExpiresAtMillis, now, ErrLeaseLost)
		case rec.ExpiresAtMillis == expiry:
			out = lease
			return false, nil
		}
		rec.ExpiresAtMillis = expiry
		rec.Permit.Epoch++
		s.Phase.Leases[lease.ID] = rec
		out = leaseOf(lease.Workspace, s.Phase.PinnedParent, rec)
		return true, nil
	})
	if err != nil {
		return Lease{}, err
	}
	return out, nil
}

// Check returns nil if lease is still the live, unexpired epoch of its
// lease, and an error wrapping ErrLeaseLost otherwise. It is the
// coordinator-level form of "may this lease still finalize"; the
// authoritative fence for publication is the store's gate.
func (c *Coordinator) Check(ctx context.Context, lease Lease) error {
	s, err := c.load(ctx, lease.Workspace, "check lease")
	if err != nil {
		return err
	}
	now := c.clock.NowMillis()
	rec, ok := s.Phase.Leases[lease.ID]
	if s.Phase.Kind != PhaseActive || !ok || rec.ExpiresAtMillis != lease.ExpiresAtMillis ||
		rec.Permit != lease.Permit || rec.ExpiresAtMillis <= now {
		return fmt.Errorf("check lease %s on %q: %w", lease.ID, lease.Workspace, ErrLeaseLost)
	}
	return nil
}

// Finish is FinishWithTicket with a fresh ticket.
func (c *Coordinator) Finish(ctx context.Context, lease Lease) (Finish, error) {
	return c.FinishWithTicket(ctx, lease, c.NewTicket())
}

// FinishWithTicket closes lease and, if it was the last live lease, moves
// the window to reconciliation under ticket and returns it: exactly one
// close claims reconciliation. Expired leases are dropped on the way. A
// close of an expired, closed or superseded handle never claims (it returns
// FinishAlreadyClosed), though it may persist the expiry of others; if it
// was the last, the ticket it left is claimable with ClaimReconcile.
// Retrying with the ticket of a recorded claim returns that claim again.
func (c *Coordinator) FinishWithTicket(ctx context.Context, lease Lease, ticket Ticket) (Finish, error) {
	if ticket.IsZero() {
		return Finish{}, fmt.Errorf("finish lease %s: zero ticket: %w", lease.ID, ErrStaleTicket)
	}
	now := c.clock.NowMillis()
	var out Finish
	err := c.mutate(ctx, lease.Workspace, "finish lease", func(s *Snapshot) (bool, error) {
		if s.Phase.Kind == PhaseReconciling && s.Phase.Ticket == ticket {
			out = Finish{Outcome: FinishReconcile, Reconcile: reconcileOf(s)}
			return false, nil
		}
		before := s.Phase.clone()
		res, ok := closeLease(s, lease, now, ticket)
		if !ok {
			res = Finish{Outcome: FinishAlreadyClosed}
		}
		out = res
		return !(!ok && before.equal(s.Phase)), nil
	})
	if err != nil {
		return Finish{}, err
	}
	return out, nil
}

func reconcileOf(s *Snapshot) Reconcile {
	return Reconcile{Workspace: s.Workspace, Ticket: s.Phase.Ticket,
		PinnedParent: s.Phase.PinnedParent, PendingParent: s.Phase.PendingParent}
}

// ClaimReconcile is ClaimReconcileWithTicket with a fresh ticket.
func (c *Coordinator) ClaimReconcile(ctx context.Context, workspace string) (Reconcile, bool, error) {
	return c.ClaimReconcileWithTicket(ctx, workspace, c.NewTicket())
}

// ClaimReconcileWithTicket finds recovery work: the durable ticket of an
// interrupted reconciliation (a crashed owner), or an active window whose
// leases have all expired, which it moves to reconciliation under ticket.
// ok is false when there is nothing to do.
func (c *Coordinator) ClaimReconcileWithTicket(ctx context.Context, workspace string, ticket Ticket) (Reconcile, bool, error) {
	if ticket.IsZero() {
		return Reconcile{}, false, fmt.Errorf("claim reconcile on %q: zero ticket: %w", workspace, ErrStaleTicket)
	}
	now := c.clock.NowMillis()
	var out Reconcile
	var found bool
	err := c.mutate(ctx, workspace, "claim reconcile", func(s *Snapshot) (bool, error) {
		found = false
		switch s.Phase.Kind {
		case PhaseIdle:
			return false, nil
		case PhaseReconciling:
			out, found = reconcileOf(s), true
			return false, nil
		}
		out, found = expireToReconcile(s, now, ticket)
		return found, nil
	})
	if err != nil || !found {
		return Reconcile{}, false, err
	}
	return out, true, nil
}

// CompleteReconcile is CompleteReconcileWithNextTicket with a fresh next
// ticket.
func (c *Coordinator) CompleteReconcile(ctx context.Context, workspace string, ticket Ticket) (Reconcile, bool, error) {
	return c.CompleteReconcileWithNextTicket(ctx, workspace, ticket, c.NewTicket())
}

// CompleteReconcileWithNextTicket completes the exact current ticket. If a
// parent was observed while it ran, reconciliation continues under
// nextTicket with that parent pending, and the new work is returned
// (ok = true) — the parent is not lost. Otherwise the window goes idle. Any
// other ticket is ErrStaleTicket.
func (c *Coordinator) CompleteReconcileWithNextTicket(ctx context.Context, workspace string, ticket, nextTicket Ticket) (Reconcile, bool, error) {
	if nextTicket.IsZero() || nextTicket == ticket {
		return Reconcile{}, false, fmt.Errorf("complete reconcile on %q: next ticket must be fresh: %w", workspace, ErrStaleTicket)
	}
	var out Reconcile
	var next bool
	err := c.mutate(ctx, workspace, "complete reconcile", func(s *Snapshot) (bool, error) {
		next = false
		if s.Phase.Kind != PhaseReconciling || s.Phase.Ticket != ticket {
			return false, fmt.Errorf("ticket %s: %w", ticket, ErrStaleTicket)
		}
		if sub := s.Phase.SubsequentParent; !sub.IsZero() {
			s.Phase = Phase{Kind: PhaseReconciling, Ticket: nextTicket, PinnedParent: s.Phase.PinnedParent, PendingParent: sub}
			out, next = reconcileOf(s), true
		} else {
			s.Phase = Phase{Kind: PhaseIdle}
		}
		return true, nil
	})
	if err != nil || !next {
		return Reconcile{}, false, err
	}
	return out, true, nil
}

// Inspect returns the validated durable state, for diagnostics and recovery.
func (c *Coordinator) Inspect(ctx context.Context, workspace string) (Snapshot, error) {
	return c.load(ctx, workspace, "inspect")
}

// load reads and validates one workspace's snapshot.
func (c *Coordinator) load(ctx context.Context, workspace, op string) (Snapshot, error) {
	if !validWorkspace(workspace) {
		return Snapshot{}, fmt.Errorf("%s: %q: %w", op, workspace, ErrInvalidWorkspace)
	}
	s, err := c.store.Load(ctx, workspace)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%s on %q: load: %w", op, workspace, err)
	}
	switch {
	case s.Workspace != workspace:
		err = fmt.Errorf("%w: state of %q returned for %q", ErrIncompatibleState, s.Workspace, workspace)
	case s.Revision == 0 && s.Phase.Kind != PhaseIdle:
		err = fmt.Errorf("%w: non-idle state with revision 0", ErrIncompatibleState)
	default:
		err = s.Validate()
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("%s on %q: %w", op, workspace, err)
	}
	return s, nil
}

// mutate is the bounded optimistic-concurrency loop shared by every
// operation. fn edits a freshly loaded snapshot and reports whether to write
// it; returning false (or an error) ends the operation without writing.
func (c *Coordinator) mutate(ctx context.Context, workspace, op string, fn func(*Snapshot) (bool, error)) error {
	for range maxCASAttempts {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s on %q: %w", op, workspace, err)
		}
		s, err := c.load(ctx, workspace, op)
		if err != nil {
			return err
		}
		expect := s.Revision
		write, err := fn(&s)
		if err != nil {
			return fmt.Errorf("%s on %q: %w", op, workspace, err)
		}
		if !write {
			return nil
		}
		s.Revision = expect + 1
		if err := checkReplacement(workspace, expect, s); err != nil {
			return fmt.Errorf("%s on %q: %w", op, workspace, err)
		}
		swapped, err := c.store.CompareAndSwap(ctx, workspace, expect, s)
		if err != nil {
			return fmt.Errorf("%s on %q: store: %w", op, workspace, err)
		}
		if swapped {
			return nil
		}
	}
	return fmt.Errorf("%s on %q after %d attempts: %w", op, workspace, maxCASAttempts, ErrContended)
}

// expireToReconcile drops expired leases of an active window and, if none
// remain, moves it to reconciliation under ticket. Like the seed, the drop
// is applied to s even when live leases remain, so a following write
// persists it.
func expireToReconcile(s *Snapshot, now int64, ticket Ticket) (Reconcile, bool) {
	p := &s.Phase
	if p.Kind != PhaseActive {
		return Reconcile{}, false
	}
	for id, l := range p.Leases {
		if l.ExpiresAtMillis <= now {
			delete(p.Leases, id)
		}
	}
	if len(p.Leases) != 0 {
		return Reconcile{}, false
	}
	*p = Phase{Kind: PhaseReconciling, Ticket: ticket, PinnedParent: p.PinnedParent, PendingParent: p.PendingParent}
	return reconcileOf(s), true
}

// closeLease is the seed's close_lease: it removes the exact lease handle,
// drops expired peers, and on the last close moves to reconciliation. ok
// is false when the caller gets no result of its own (handle stale, closed
// or expired); s may still have changed and must then be written.
func closeLease(s *Snapshot, lease Lease, now int64, ticket Ticket) (Finish, bool) {
	p := &s.Phase
	if p.Kind != PhaseActive {
		return Finish{}, false
	}
	rec, found := p.Leases[lease.ID]
	matches := found && rec.ExpiresAtMillis == lease.ExpiresAtMillis && rec.Permit == lease.Permit
	if found && !matches {
		// A superseded handle must not close its renewed successor.
		return Finish{}, false
	}
	live := matches && rec.ExpiresAtMillis > now
	delete(p.Leases, lease.ID)
	for id, l := range p.Leases {
		if l.ExpiresAtMillis <= now {
			delete(p.Leases, id)
		}
	}
	if len(p.Leases) != 0 {
		if !live {
			return Finish{}, false
		}
		return Finish{Outcome: FinishStillActive, Remaining: len(p.Leases)}, true
	}
	*p = Phase{Kind: PhaseReconciling, Ticket: ticket, PinnedParent: p.PinnedParent, PendingParent: p.PendingParent}
	if !live {
		return Finish{}, false
	}
	return Finish{Outcome: FinishReconcile, Reconcile: reconcileOf(s)}, true
}
