// Package windowtest is the conformance suite every window.Store runs: the
// operation-window tests of the reference design (seed 000) and the
// lease-fencing contract of seed 004, driven through a window.Coordinator.
package windowtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
)

// Env is one fresh store under test.
type Env struct {
	// Store is the implementation under test, empty.
	Store window.Store
	// Clock drives lease expiry; it must also be the store's clock.
	Clock *window.ManualClock
	// PutRaw overwrites a workspace's stored bytes without validation, to
	// inject torn, corrupt or future-version state.
	PutRaw func(t *testing.T, workspace string, raw []byte)
	// CheckPermit, if non-nil, reports whether a head append carrying p
	// would be admitted now (nil error) or fenced (error wrapping
	// store.ErrFenced). Nil for stores without lease gates.
	CheckPermit func(p store.Permit) error
}

// Start is the clock reading every test begins at.
const Start int64 = 1_000

// Gen returns a recognisable generation id for tests.
func Gen(b byte) window.GenerationID {
	var id window.GenerationID
	for i := range id {
		id[i] = b
	}
	return id
}

// Run runs the conformance suite; newEnv is called once per subtest.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	tests := []struct {
		name string
		fn   func(*testing.T, Env)
	}{
		{"PersistedActiveWindowsRequireNonEmptyIdentityKeyedLeaseSet", persistedActiveWindowsRequireLeases},
		{"OverlappingLeasesCoalesceParentAndReconcileOnce", overlappingLeasesCoalesceParentAndReconcileOnce},
		{"ParentAdvanceAfterChildCloseReconcilesWithoutAnotherTool", parentAdvanceAfterChildClose},
		{"ParentAdvanceDuringChildToolReconcilesAtFinalClose", parentAdvanceDuringChildTool},
		{"DeterministicLeaseIdentityIsIdempotentButCannotBeRebound", deterministicLeaseIdentity},
		{"RenewalReplacesTheExactLiveLeaseAndFencesStaleHandles", renewalReplacesExactLiveLease},
		{"ParentObservedDuringReconcileIsNotLost", parentObservedDuringReconcileIsNotLost},
		{"ExpiredLeaseIsFencedAndRecoveryTicketIsClaimable", expiredLeaseIsFencedAndRecoveryClaimable},
		{"ExpiredCloseIsPersistentlyFencedWhileAnotherLeaseRemains", expiredCloseFencedWhileAnotherRemains},
		{"DuplicateClosePersistsExpiryOfTheRemainingLease", duplicateClosePersistsExpiry},
		{"FencingRenewalKeepsCompetitorOut", fencingRenewalKeepsCompetitorOut},
		{"FencingStolenLeaseFailsItsOwner", fencingStolenLeaseFailsOwner},
		{"FencingExpiredLeaseCannotFinalize", fencingExpiredLeaseCannotFinalize},
		{"FencingConfiguredShortTTLIsHonoured", fencingShortTTLHonoured},
		{"ReplayByKeyReturnsRecordedOutcome", replayByKey},
		{"CorruptOrFutureStateIsIncompatibleAndNeverReset", corruptStateIsIncompatible},
		{"StoreCompareAndSwapContract", storeCASContract},
		{"WorkspacesAreIndependent", workspacesAreIndependent},
		{"BeginAfterEveryLeaseExpiredStartsRecovery", beginAfterEveryLeaseExpired},
		{"ReplayOfARenewalAfterTheRecordedExpiryPassedConflicts", replayOfRenewedExpiredLease},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			env.Clock.Set(Start)
			tc.fn(t, env)
		})
	}
}

func coord(env Env) *window.Coordinator { return window.NewCoordinator(env.Store, env.Clock) }

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

func wantFinish(t *testing.T, what string, got window.Finish, want window.FinishOutcome) window.Finish {
	t.Helper()
	if got.Outcome != want {
		t.Fatalf("%s: outcome %v (%+v), want %v", what, got.Outcome, got, want)
	}
	return got
}

func finish(t *testing.T, c *window.Coordinator, l window.Lease, what string) window.Finish {
	t.Helper()
	f, err := c.Finish(context.Background(), l)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return f
}

func inspect(t *testing.T, c *window.Coordinator, ws string) window.Snapshot {
	t.Helper()
	s, err := c.Inspect(context.Background(), ws)
	if err != nil {
		t.Fatalf("inspect %q: %v", ws, err)
	}
	return s
}

// permitAdmitted asserts the store's gate decision when the store has gates.
func permitAdmitted(t *testing.T, env Env, p store.Permit, want bool, what string) {
	t.Helper()
	if env.CheckPermit == nil {
		return
	}
	err := env.CheckPermit(p)
	switch {
	case want && err != nil:
		t.Fatalf("%s: permit %v fenced: %v", what, p, err)
	case !want && err == nil:
		t.Fatalf("%s: permit %v admitted, want fenced", what, p)
	case !want && !errors.Is(err, store.ErrFenced):
		t.Fatalf("%s: permit %v: %v, want store.ErrFenced", what, p, err)
	}
}

func persistedActiveWindowsRequireLeases(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	raw := fmt.Sprintf(`{"version":%d,"revision":1,"workspace":"agent","phase":{"kind":"active","pinned_parent":"%s"}}`,
		window.StateVersion, Gen(1))
	env.PutRaw(t, "agent", []byte(raw))
	_, err := c.Inspect(ctx, "agent")
	wantErr(t, "inspect active window without leases", err, window.ErrIncompatibleState)

	// The store refuses to write such a state too.
	bad := window.Snapshot{Version: window.StateVersion, Revision: 1, Workspace: "fresh",
		Phase: window.Phase{Kind: window.PhaseActive, PinnedParent: Gen(1), Leases: map[window.LeaseID]window.LeaseRecord{}}}
	_, err = env.Store.CompareAndSwap(ctx, "fresh", 0, bad)
	wantErr(t, "store active window without leases", err, window.ErrIncompatibleState)

	// A lease keyed by another identity is equally invalid.
	id, other := window.NewLeaseID(), window.NewLeaseID()
	bad.Phase.Leases[id] = window.LeaseRecord{ID: other, Owner: "tool", ExpiresAtMillis: Start + 10,
		Permit: store.Permit{Gate: "window/fresh/" + other.String() + "/1", Epoch: 1}}
	_, err = env.Store.CompareAndSwap(ctx, "fresh", 0, bad)
	wantErr(t, "store lease under a foreign key", err, window.ErrIncompatibleState)
}

func overlappingLeasesCoalesceParentAndReconcileOnce(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	first := must[window.Lease](t, "first lease")(c.Begin(ctx, "agent", Gen(1), "tool-1", 90*time.Millisecond))
	env.Clock.Advance(time.Millisecond)
	second := must[window.Lease](t, "second lease")(c.Begin(ctx, "agent", Gen(1), "tool-2", 89*time.Millisecond))
	if first.PinnedParent != Gen(1) || second.PinnedParent != Gen(1) {
		t.Fatalf("pins: %s %s", first.PinnedParent, second.PinnedParent)
	}
	if !must[bool](t, "observe")(c.ObserveParent(ctx, "agent", Gen(2))) {
		t.Fatal("observe on an active window reported false")
	}
	env.Clock.Set(Start + 10)
	f := wantFinish(t, "first close", finish(t, c, first, "first close"), window.FinishStillActive)
	if f.Remaining != 1 {
		t.Fatalf("remaining %d, want 1", f.Remaining)
	}
	permitAdmitted(t, env, first.Permit, false, "closed lease")
	permitAdmitted(t, env, second.Permit, true, "peer of a closed lease")
	env.Clock.Advance(time.Millisecond)
	rc := wantFinish(t, "final close", finish(t, c, second, "final close"), window.FinishReconcile).Reconcile
	if rc.PinnedParent != Gen(1) || rc.PendingParent != Gen(2) || rc.Workspace != "agent" || rc.Ticket.IsZero() {
		t.Fatalf("reconcile %+v", rc)
	}
	permitAdmitted(t, env, second.Permit, false, "last closed lease")
	// Exactly once: the final close cannot be repeated into a second claim.
	wantFinish(t, "repeat close", finish(t, c, second, "repeat close"), window.FinishAlreadyClosed)
	env.Clock.Advance(time.Millisecond)
	_, err := c.Begin(ctx, "agent", Gen(2), "tool-3", 78*time.Millisecond)
	wantErr(t, "begin while reconciling", err, window.ErrReconciling)
	if _, next, err := c.CompleteReconcile(ctx, "agent", rc.Ticket); err != nil || next {
		t.Fatalf("complete: next=%v err=%v", next, err)
	}
	env.Clock.Advance(time.Millisecond)
	third := must[window.Lease](t, "next window")(c.Begin(ctx, "agent", Gen(2), "tool-3", 77*time.Millisecond))
	if third.PinnedParent != Gen(2) {
		t.Fatalf("next window pinned %s, want %s", third.PinnedParent, Gen(2))
	}
}

func parentAdvanceAfterChildClose(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	lease := must[window.Lease](t, "lease")(c.Begin(ctx, "child", Gen(1), "tool", 100*time.Millisecond))
	rc := wantFinish(t, "child close", finish(t, c, lease, "child close"), window.FinishReconcile).Reconcile
	if !rc.PendingParent.IsZero() {
		t.Fatalf("close without parent advance has pending %s", rc.PendingParent)
	}
	must[bool](t, "complete")(func() (bool, error) { _, n, err := c.CompleteReconcile(ctx, "child", rc.Ticket); return n, err }())

	// The parent's tool finishes after the child's last tool: the child
	// reconciles now, without opening another tool.
	adv, ok, err := c.ParentAdvanced(ctx, "child", Gen(2))
	if err != nil || !ok {
		t.Fatalf("parent advance on idle child: ok=%v err=%v", ok, err)
	}
	if adv.PinnedParent != Gen(2) || adv.PendingParent != Gen(2) {
		t.Fatalf("idle advance reconcile %+v", adv)
	}
	if s := inspect(t, c, "child"); s.Phase.Kind != window.PhaseReconciling || s.Phase.Ticket != adv.Ticket {
		t.Fatalf("after idle advance: %+v", s.Phase)
	}
	_, err = c.Begin(ctx, "child", Gen(2), "tool", time.Second)
	wantErr(t, "begin during idle-advance reconcile", err, window.ErrReconciling)
	if _, next, err := c.CompleteReconcile(ctx, "child", adv.Ticket); err != nil || next {
		t.Fatalf("complete: next=%v err=%v", next, err)
	}
	if s := inspect(t, c, "child"); s.Phase.Kind != window.PhaseIdle {
		t.Fatalf("after reconcile: %+v, want idle", s.Phase)
	}
}

func parentAdvanceDuringChildTool(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	lease := must[window.Lease](t, "lease")(c.Begin(ctx, "child", Gen(1), "tool", 100*time.Millisecond))
	if _, ok, err := c.ParentAdvanced(ctx, "child", Gen(2)); err != nil || ok {
		t.Fatalf("advance during tool must coalesce: ok=%v err=%v", ok, err)
	}
	if s := inspect(t, c, "child"); s.Phase.PendingParent != Gen(2) || s.Phase.PinnedParent != Gen(1) {
		t.Fatalf("coalesced phase %+v", s.Phase)
	}
	rc := wantFinish(t, "final close", finish(t, c, lease, "final close"), window.FinishReconcile).Reconcile
	if rc.PinnedParent != Gen(1) || rc.PendingParent != Gen(2) {
		t.Fatalf("final close reconcile %+v", rc)
	}
}

func deterministicLeaseIdentity(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	var id window.LeaseID
	for i := range id {
		id[i] = 42
	}
	first := must[window.Lease](t, "first")(c.BeginWithLeaseID(ctx, "lease-identity", Gen(1), "owner", Start+10, id))
	env.Clock.Advance(time.Millisecond)
	retry := must[window.Lease](t, "exact retry")(c.BeginWithLeaseID(ctx, "lease-identity", Gen(1), "owner", Start+10, id))
	if retry != first {
		t.Fatalf("retry %+v != first %+v", retry, first)
	}
	_, err := c.BeginWithLeaseID(ctx, "lease-identity", Gen(1), "other", Start+10, id)
	wantErr(t, "rebind to another owner", err, window.ErrLeaseIdentityConflict)
	_, err = c.BeginWithLeaseID(ctx, "lease-identity", Gen(1), "owner", Start+11, id)
	wantErr(t, "rebind to another expiry", err, window.ErrLeaseIdentityConflict)
	_, err = c.BeginWithLeaseID(ctx, "lease-identity", Gen(1), " ", Start+11, window.NewLeaseID())
	wantErr(t, "empty owner", err, window.ErrLeaseIdentityConflict)
	_, err = c.BeginWithLeaseID(ctx, "lease-identity", Gen(1), "owner", Start+11, window.LeaseID{})
	wantErr(t, "zero id", err, window.ErrLeaseIdentityConflict)
	_, err = c.BeginWithLeaseID(ctx, "lease-identity", Gen(1), "owner", Start+1, window.NewLeaseID())
	wantErr(t, "expiry at now", err, window.ErrInvalidExpiry)
	permitAdmitted(t, env, first.Permit, true, "idempotent lease")

	// Reused in a later window, the same id gets a fresh gate: the old
	// window's permit stays fenced.
	rc := wantFinish(t, "close", finish(t, c, first, "close"), window.FinishReconcile).Reconcile
	if _, _, err := c.CompleteReconcile(ctx, "lease-identity", rc.Ticket); err != nil {
		t.Fatal(err)
	}
	again := must[window.Lease](t, "reuse")(c.BeginWithLeaseID(ctx, "lease-identity", Gen(1), "owner", Start+10, id))
	if again.Permit == first.Permit {
		t.Fatalf("reused lease id got the old permit %v", again.Permit)
	}
	permitAdmitted(t, env, first.Permit, false, "previous window's permit")
	permitAdmitted(t, env, again.Permit, true, "reused id's new permit")
}

func renewalReplacesExactLiveLease(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	lease := must[window.Lease](t, "lease")(c.Begin(ctx, "lease-renewal", Gen(1), "owner", 9*time.Millisecond))
	env.Clock.Advance(time.Millisecond)
	renewed := must[window.Lease](t, "renew")(c.Renew(ctx, lease, 19*time.Millisecond))
	if renewed.ExpiresAtMillis != Start+20 || renewed.PinnedParent != lease.PinnedParent || renewed.ID != lease.ID {
		t.Fatalf("renewed %+v from %+v", renewed, lease)
	}
	if renewed.Permit == lease.Permit {
		t.Fatal("renewal kept the old permit")
	}
	permitAdmitted(t, env, lease.Permit, false, "permit replaced by renewal")
	permitAdmitted(t, env, renewed.Permit, true, "renewed permit")
	env.Clock.Advance(time.Millisecond)
	_, err := c.Renew(ctx, lease, 28*time.Millisecond)
	wantErr(t, "renew stale handle", err, window.ErrLeaseLost)
	wantErr(t, "check stale handle", c.Check(ctx, lease), window.ErrLeaseLost)
	_, err = c.Renew(ctx, renewed, time.Millisecond)
	wantErr(t, "shorten lease", err, window.ErrInvalidExpiry)
	env.Clock.Advance(time.Millisecond)
	wantFinish(t, "close stale handle", finish(t, c, lease, "close stale handle"), window.FinishAlreadyClosed)
	if s := inspect(t, c, "lease-renewal"); len(s.Phase.Leases) != 1 {
		t.Fatalf("stale close removed the renewed lease: %+v", s.Phase)
	}
	wantFinish(t, "close renewed", finish(t, c, renewed, "close renewed"), window.FinishReconcile)
}

func parentObservedDuringReconcileIsNotLost(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	lease := must[window.Lease](t, "lease")(c.Begin(ctx, "agent", Gen(1), "tool", 90*time.Millisecond))
	env.Clock.Advance(10 * time.Millisecond)
	rc := wantFinish(t, "finish", finish(t, c, lease, "finish"), window.FinishReconcile).Reconcile
	if !must[bool](t, "observe during reconcile")(c.ObserveParent(ctx, "agent", Gen(2))) {
		t.Fatal("observe on a reconciling window reported false")
	}
	next, ok, err := c.CompleteReconcile(ctx, "agent", rc.Ticket)
	if err != nil || !ok {
		t.Fatalf("complete first reconcile: ok=%v err=%v", ok, err)
	}
	s := inspect(t, c, "agent")
	if s.Phase.Kind != window.PhaseReconciling || s.Phase.PendingParent != Gen(2) || s.Phase.Ticket != next.Ticket {
		t.Fatalf("after complete: %+v, next %+v", s.Phase, next)
	}
	if next.PendingParent != Gen(2) || next.Ticket == rc.Ticket {
		t.Fatalf("next reconcile %+v", next)
	}
	_, _, err = c.CompleteReconcile(ctx, "agent", rc.Ticket)
	wantErr(t, "complete old ticket", err, window.ErrStaleTicket)
	claimed, ok, err := c.ClaimReconcile(ctx, "agent")
	if err != nil || !ok || claimed != next {
		t.Fatalf("claim interrupted next ticket: %+v ok=%v err=%v", claimed, ok, err)
	}
}

func expiredLeaseIsFencedAndRecoveryClaimable(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	lease := must[window.Lease](t, "lease")(c.Begin(ctx, "expired", Gen(1), "tool", 10*time.Millisecond))
	permitAdmitted(t, env, lease.Permit, true, "live lease")
	env.Clock.Advance(10 * time.Millisecond)
	permitAdmitted(t, env, lease.Permit, false, "lease at its expiry")
	wantFinish(t, "expired close", finish(t, c, lease, "expired close"), window.FinishAlreadyClosed)
	claimed, ok, err := c.ClaimReconcile(ctx, "expired")
	if err != nil || !ok {
		t.Fatalf("recovery ticket: ok=%v err=%v", ok, err)
	}
	if claimed.PinnedParent != Gen(1) {
		t.Fatalf("recovery pinned %s", claimed.PinnedParent)
	}
	again, _, _ := c.ClaimReconcile(ctx, "expired")
	if again.Ticket != claimed.Ticket {
		t.Fatalf("second claim got ticket %s, want the durable %s", again.Ticket, claimed.Ticket)
	}
	env.Clock.Advance(time.Millisecond)
	_, err = c.Begin(ctx, "expired", Gen(1), "late", 9*time.Millisecond)
	wantErr(t, "late begin", err, window.ErrReconciling)
	permitAdmitted(t, env, lease.Permit, false, "recovered lease")
}

func expiredCloseFencedWhileAnotherRemains(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	expired := must[window.Lease](t, "expired lease")(c.Begin(ctx, "overlap-expiry", Gen(1), "expired", 10*time.Millisecond))
	env.Clock.Advance(time.Millisecond)
	active := must[window.Lease](t, "active lease")(c.Begin(ctx, "overlap-expiry", Gen(1), "active", 29*time.Millisecond))
	env.Clock.Set(Start + 10)
	wantFinish(t, "expired close", finish(t, c, expired, "expired close"), window.FinishAlreadyClosed)
	s := inspect(t, c, "overlap-expiry")
	if _, ok := s.Phase.Leases[active.ID]; s.Phase.Kind != window.PhaseActive || len(s.Phase.Leases) != 1 || !ok {
		t.Fatalf("after expired close: %+v", s.Phase)
	}
	permitAdmitted(t, env, expired.Permit, false, "expired closed lease")
	permitAdmitted(t, env, active.Permit, true, "remaining lease")
	env.Clock.Set(Start + 12)
	wantFinish(t, "active close", finish(t, c, active, "active close"), window.FinishReconcile)
}

func duplicateClosePersistsExpiry(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	first := must[window.Lease](t, "first")(c.Begin(ctx, "duplicate-expiry", Gen(1), "first", 10*time.Millisecond))
	second := must[window.Lease](t, "second")(c.Begin(ctx, "duplicate-expiry", Gen(1), "second", 40*time.Millisecond))
	env.Clock.Set(Start + 5)
	f := wantFinish(t, "first close", finish(t, c, first, "first close"), window.FinishStillActive)
	if f.Remaining != 1 {
		t.Fatalf("remaining %d", f.Remaining)
	}
	env.Clock.Set(Start + 50)
	wantFinish(t, "duplicate close", finish(t, c, first, "duplicate close"), window.FinishAlreadyClosed)
	if s := inspect(t, c, "duplicate-expiry"); s.Phase.Kind != window.PhaseReconciling {
		t.Fatalf("duplicate close did not persist expiry: %+v", s.Phase)
	}
	permitAdmitted(t, env, second.Permit, false, "expired remaining lease")
}

// Seed 004: a renewed in-progress lease keeps a competing claimant out,
// then the recorded outcome replays.
func fencingRenewalKeepsCompetitorOut(t *testing.T, env Env) {
	ctx := context.Background()
	owner, competitor := coord(env), coord(env)
	const ttl = 300 * time.Millisecond
	lease := must[window.Lease](t, "lease")(owner.Begin(ctx, "effect", Gen(1), "owner", ttl))
	for range 6 { // several TTLs lapse; renewals keep the lease alive
		env.Clock.Advance(ttl / 3)
		lease = must[window.Lease](t, "renew")(owner.Renew(ctx, lease, ttl))
		if _, ok, err := competitor.ClaimReconcile(ctx, "effect"); err != nil || ok {
			t.Fatalf("competitor claimed a renewed lease: ok=%v err=%v", ok, err)
		}
		if err := owner.Check(ctx, lease); err != nil {
			t.Fatalf("renewed lease not live: %v", err)
		}
		permitAdmitted(t, env, lease.Permit, true, "renewed lease")
	}
	if env.Clock.NowMillis() < Start+2*int64(ttl/time.Millisecond) {
		t.Fatal("test did not outlive the TTL")
	}
	ticket := window.NewTicket()
	f := must[window.Finish](t, "finish")(owner.FinishWithTicket(ctx, lease, ticket))
	wantFinish(t, "finish", f, window.FinishReconcile)
	replayed := must[window.Finish](t, "replay")(competitor.FinishWithTicket(ctx, lease, ticket))
	if replayed != f {
		t.Fatalf("replay %+v, recorded %+v", replayed, f)
	}
}

// Seed 004: a stolen lease fails its owner with lease-lost.
func fencingStolenLeaseFailsOwner(t *testing.T, env Env) {
	ctx := context.Background()
	owner, thief := coord(env), coord(env)
	lease := must[window.Lease](t, "lease")(owner.Begin(ctx, "effect", Gen(1), "owner", 300*time.Millisecond))
	// Another worker holding the same handle renews it: the owner's copy is superseded.
	env.Clock.Advance(time.Millisecond)
	stolen := must[window.Lease](t, "steal")(thief.Renew(ctx, lease, 300*time.Millisecond))
	_, err := owner.Renew(ctx, lease, 300*time.Millisecond)
	wantErr(t, "owner renew after steal", err, window.ErrLeaseLost)
	wantErr(t, "owner check after steal", owner.Check(ctx, lease), window.ErrLeaseLost)
	permitAdmitted(t, env, lease.Permit, false, "stolen lease")
	permitAdmitted(t, env, stolen.Permit, true, "thief's lease")
	wantFinish(t, "owner finalize after steal", finish(t, owner, lease, "owner finish"), window.FinishAlreadyClosed)

	// Stealing by recovery: the lease expires and another process claims it.
	env.Clock.Advance(300 * time.Millisecond)
	if _, ok, err := thief.ClaimReconcile(ctx, "effect"); err != nil || !ok {
		t.Fatalf("recovery claim: ok=%v err=%v", ok, err)
	}
	_, err = owner.Renew(ctx, stolen, 300*time.Millisecond)
	wantErr(t, "renew recovered lease", err, window.ErrLeaseLost)
	permitAdmitted(t, env, stolen.Permit, false, "recovered lease")
}

// Seed 004: a lease that expires before finalize is rejected.
func fencingExpiredLeaseCannotFinalize(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	lease := must[window.Lease](t, "lease")(c.Begin(ctx, "effect", Gen(1), "owner", 30*time.Second))
	peer := must[window.Lease](t, "peer")(c.Begin(ctx, "effect", Gen(1), "peer", time.Hour))
	env.Clock.Advance(30 * time.Second)
	wantErr(t, "check expired", c.Check(ctx, lease), window.ErrLeaseLost)
	permitAdmitted(t, env, lease.Permit, false, "expired lease")
	_, err := c.Renew(ctx, lease, 30*time.Second)
	wantErr(t, "renew expired", err, window.ErrLeaseLost)
	wantFinish(t, "finalize expired", finish(t, c, lease, "finalize expired"), window.FinishAlreadyClosed)
	permitAdmitted(t, env, peer.Permit, true, "peer of an expired lease")
}

// Seed 004: a configured short TTL is honoured, not a hardcoded default.
func fencingShortTTLHonoured(t *testing.T, env Env) {
	ctx := context.Background()
	vanished, successor := coord(env), coord(env)
	const ttl = 40 * time.Millisecond
	lease := must[window.Lease](t, "lease")(vanished.Begin(ctx, "effect", Gen(1), "vanished", ttl))
	if lease.ExpiresAtMillis != Start+40 {
		t.Fatalf("expiry %d, want %d", lease.ExpiresAtMillis, Start+40)
	}
	env.Clock.Advance(ttl - time.Millisecond)
	if _, ok, err := successor.ClaimReconcile(ctx, "effect"); err != nil || ok {
		t.Fatalf("claimed before the TTL: ok=%v err=%v", ok, err)
	}
	permitAdmitted(t, env, lease.Permit, true, "lease before its TTL")
	env.Clock.Advance(time.Millisecond)
	permitAdmitted(t, env, lease.Permit, false, "lease at its TTL")
	if _, ok, err := successor.ClaimReconcile(ctx, "effect"); err != nil || !ok {
		t.Fatalf("successor could not reclaim after the TTL: ok=%v err=%v", ok, err)
	}
}

func replayByKey(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	id := window.NewLeaseID()
	exp := Start + 100
	lease := must[window.Lease](t, "begin")(c.BeginWithLeaseID(ctx, "replay", Gen(1), "tool", exp, id))
	again := must[window.Lease](t, "begin replay")(c.BeginWithLeaseID(ctx, "replay", Gen(1), "tool", exp, id))
	if again != lease {
		t.Fatalf("begin replay %+v, recorded %+v", again, lease)
	}
	ticket := window.NewTicket()
	f := must[window.Finish](t, "finish")(c.FinishWithTicket(ctx, lease, ticket))
	wantFinish(t, "finish", f, window.FinishReconcile)
	if f.Reconcile.Ticket != ticket {
		t.Fatalf("ticket %s, want the supplied %s", f.Reconcile.Ticket, ticket)
	}
	replayed := must[window.Finish](t, "finish replay")(c.FinishWithTicket(ctx, lease, ticket))
	if replayed != f {
		t.Fatalf("finish replay %+v, recorded %+v", replayed, f)
	}
	// A different ticket is a different close: the lease is gone.
	wantFinish(t, "other close", must[window.Finish](t, "other")(c.FinishWithTicket(ctx, lease, window.NewTicket())), window.FinishAlreadyClosed)
	claimed, ok, err := c.ClaimReconcileWithTicket(ctx, "replay", window.NewTicket())
	if err != nil || !ok || claimed != f.Reconcile {
		t.Fatalf("claim returns the recorded ticket: %+v ok=%v err=%v", claimed, ok, err)
	}
	rev := inspect(t, c, "replay").Revision
	if _, _, err := c.CompleteReconcile(ctx, "replay", ticket); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.CompleteReconcile(ctx, "replay", ticket)
	wantErr(t, "complete replay", err, window.ErrStaleTicket)
	if got := inspect(t, c, "replay").Revision; got != rev+1 {
		t.Fatalf("revision %d after one completion from %d", got, rev)
	}
}

func corruptStateIsIncompatible(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	lease := must[window.Lease](t, "lease")(c.Begin(ctx, "agent", Gen(1), "tool", time.Second))
	cases := map[string]string{
		"torn":                       `{"version":1,"revision":3,"workspace":"agent","pha`,
		"future version":             `{"version":2,"revision":3,"workspace":"agent","phase":{"kind":"quantum"}}`,
		"no version":                 `{"revision":3,"workspace":"agent","phase":{"kind":"idle"}}`,
		"revision zero":              `{"version":1,"revision":0,"workspace":"agent","phase":{"kind":"idle"}}`,
		"foreign":                    `{"version":1,"revision":3,"workspace":"other","phase":{"kind":"idle"}}`,
		"unknown kind":               `{"version":1,"revision":3,"workspace":"agent","phase":{"kind":"paused"}}`,
		"reconciling without ticket": `{"version":1,"revision":3,"workspace":"agent","phase":{"kind":"reconciling"}}`,
		"trailing data":              `{"version":1,"revision":3,"workspace":"agent","phase":{"kind":"idle"}}{}`,
		"empty":                      ``,
	}
	for name, raw := range cases {
		env.PutRaw(t, "agent", []byte(raw))
		_, err := c.Inspect(ctx, "agent")
		wantErr(t, name+": inspect", err, window.ErrIncompatibleState)
		_, err = c.Begin(ctx, "agent", Gen(1), "tool", time.Second)
		wantErr(t, name+": begin", err, window.ErrIncompatibleState)
		_, _, err = c.ClaimReconcile(ctx, "agent")
		wantErr(t, name+": claim", err, window.ErrIncompatibleState)
		_, err = c.Finish(ctx, lease)
		wantErr(t, name+": finish", err, window.ErrIncompatibleState)
		// Never reset: the state is still reported, not silently idle.
		_, err = c.Inspect(ctx, "agent")
		wantErr(t, name+": inspect again", err, window.ErrIncompatibleState)
	}
}

func storeCASContract(t *testing.T, env Env) {
	ctx := context.Background()
	s, err := env.Store.Load(ctx, "fresh")
	if err != nil || s.Revision != 0 || s.Phase.Kind != window.PhaseIdle || s.Workspace != "fresh" {
		t.Fatalf("absent state: %+v err=%v", s, err)
	}
	next := window.IdleSnapshot("fresh")
	next.Revision = 1
	if ok, err := env.Store.CompareAndSwap(ctx, "fresh", 1, func() window.Snapshot { n := next; n.Revision = 2; return n }()); err != nil || ok {
		t.Fatalf("CAS on a wrong revision: ok=%v err=%v", ok, err)
	}
	if ok, err := env.Store.CompareAndSwap(ctx, "fresh", 0, next); err != nil || !ok {
		t.Fatalf("create: ok=%v err=%v", ok, err)
	}
	if ok, err := env.Store.CompareAndSwap(ctx, "fresh", 0, next); err != nil || ok {
		t.Fatalf("create twice: ok=%v err=%v", ok, err)
	}
	skip := next
	skip.Revision = 5
	_, err = env.Store.CompareAndSwap(ctx, "fresh", 1, skip)
	wantErr(t, "revision skip", err, window.ErrIncompatibleState)
	_, err = env.Store.CompareAndSwap(ctx, "other", 1, func() window.Snapshot { n := next; n.Revision = 2; return n }())
	wantErr(t, "foreign workspace", err, window.ErrIncompatibleState)
	got, err := env.Store.Load(ctx, "fresh")
	if err != nil || got.Revision != 1 {
		t.Fatalf("load after create: %+v err=%v", got, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := window.NewCoordinator(env.Store, env.Clock).Begin(canceled, "fresh", Gen(1), "tool", time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("begin with cancelled context: %v", err)
	}
}

func workspacesAreIndependent(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	a := must[window.Lease](t, "a")(c.Begin(ctx, "a", Gen(1), "tool", time.Second))
	b := must[window.Lease](t, "b")(c.Begin(ctx, "a/b", Gen(2), "tool", time.Second))
	wantFinish(t, "close a", finish(t, c, a, "close a"), window.FinishReconcile)
	permitAdmitted(t, env, b.Permit, true, "lease of another workspace")
	if s := inspect(t, c, "a/b"); s.Phase.Kind != window.PhaseActive || s.Phase.PinnedParent != Gen(2) {
		t.Fatalf("other workspace changed: %+v", s.Phase)
	}
	_, err := c.Inspect(ctx, "")
	wantErr(t, "empty workspace", err, window.ErrInvalidWorkspace)
	_, err = c.ObserveParent(ctx, "a/b", window.GenerationID{})
	wantErr(t, "zero parent", err, window.ErrInvalidParent)
}

func beginAfterEveryLeaseExpired(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	old := must[window.Lease](t, "lease")(c.Begin(ctx, "agent", Gen(1), "crashed", 10*time.Millisecond))
	if _, err := c.ObserveParent(ctx, "agent", Gen(2)); err != nil {
		t.Fatal(err)
	}
	env.Clock.Advance(10 * time.Millisecond)
	_, err := c.Begin(ctx, "agent", Gen(2), "new", time.Second)
	wantErr(t, "begin over an all-expired window", err, window.ErrReconciling)
	s := inspect(t, c, "agent")
	if s.Phase.Kind != window.PhaseReconciling || s.Phase.PinnedParent != Gen(1) || s.Phase.PendingParent != Gen(2) {
		t.Fatalf("all-expired window: %+v", s.Phase)
	}
	permitAdmitted(t, env, old.Permit, false, "expired lease swept by begin")
	rc, ok, err := c.ClaimReconcile(ctx, "agent")
	if err != nil || !ok || rc.Ticket != s.Phase.Ticket || rc.PendingParent != Gen(2) {
		t.Fatalf("recovery claim: %+v ok=%v err=%v", rc, ok, err)
	}
}

// replayOfRenewedExpiredLease: one lease id has two handles, its first
// expiry and a renewal's later one. In a later window the first handle is
// replayed; once that expiry passes (a peer keeps the window active) the
// renewal's handle is replayed. The id is recorded with another expiry:
// ErrLeaseIdentityConflict, not a second gate for the same lease (the bolt
// store refused that as incompatible state). Found by the rapid model.
func replayOfRenewedExpiredLease(t *testing.T, env Env) {
	ctx := context.Background()
	c := coord(env)
	first := must[window.Lease](t, "begin")(c.Begin(ctx, "renewed", Gen(1), "tool", 20*time.Millisecond))
	renewed := must[window.Lease](t, "renew")(c.Renew(ctx, first, 40*time.Millisecond))
	rc := wantFinish(t, "close", finish(t, c, renewed, "close"), window.FinishReconcile).Reconcile
	if _, _, err := c.CompleteReconcile(ctx, "renewed", rc.Ticket); err != nil {
		t.Fatal(err)
	}
	must[window.Lease](t, "replay of the first handle")(c.BeginWithLeaseID(ctx, "renewed", first.PinnedParent, first.Owner, first.ExpiresAtMillis, first.ID))
	peer := must[window.Lease](t, "peer")(c.Begin(ctx, "renewed", Gen(1), "peer", time.Minute))
	env.Clock.Advance(25 * time.Millisecond)
	_, err := c.BeginWithLeaseID(ctx, "renewed", renewed.PinnedParent, renewed.Owner, renewed.ExpiresAtMillis, renewed.ID)
	wantErr(t, "replay of the renewal after the recorded expiry passed", err, window.ErrLeaseIdentityConflict)
	// The window is not wedged: the peer closes it and it reconciles.
	rc = wantFinish(t, "peer close", finish(t, c, peer, "peer close"), window.FinishReconcile).Reconcile
	if _, _, err := c.CompleteReconcile(ctx, "renewed", rc.Ticket); err != nil {
		t.Fatal(err)
	}
}
