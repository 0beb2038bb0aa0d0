package window

import (
	"context"
	"errors"
	"testing"
	"time"
)

type renewal struct {
	lease Lease
	err   error
}

// waitLimit bounds every wait of these tests: a renewer that stops
// answering fails the test naming what it waited for, instead of hanging
// until go test's timeout.
const waitLimit = 30 * time.Second

// send hands the renewer one tick.
func send(t *testing.T, tick chan<- time.Time) {
	t.Helper()
	select {
	case tick <- time.Time{}:
	case <-time.After(waitLimit):
		t.Fatalf("the renewer took no tick within %v", waitLimit)
	}
}

// next waits for the renewer's report of one renewal.
func next(t *testing.T, renewed <-chan renewal) renewal {
	t.Helper()
	select {
	case r := <-renewed:
		return r
	case <-time.After(waitLimit):
		t.Fatalf("no renewal reported within %v", waitLimit)
		return renewal{}
	}
}

// closed waits for ch to close.
func closed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("%s: not within %v", what, waitLimit)
	}
}

func startHold(t *testing.T, c *Coordinator, lease Lease, ttl time.Duration) (*Holder, chan<- time.Time, <-chan renewal) {
	t.Helper()
	tick := make(chan time.Time)
	renewed := make(chan renewal, 16)
	h := holdLease(context.Background(), c, lease, ttl, tick, nil, func(l Lease, err error) { renewed <- renewal{l, err} })
	t.Cleanup(func() { _, _ = h.Stop() })
	return h, tick, renewed
}

func TestHoldLeaseRenewsPastTheOriginalExpiry(t *testing.T) {
	ctx := context.Background()
	clock := NewManualClock(1000)
	c := NewCoordinator(NewMemoryStore(), clock)
	lease, err := c.Begin(ctx, "ws", GenerationID{1}, "tool", 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	h, tick, renewed := startHold(t, c, lease, 30*time.Millisecond)
	for range 5 {
		clock.Advance(10 * time.Millisecond)
		send(t, tick)
		if r := next(t, renewed); r.err != nil {
			t.Fatalf("renewal: %v", r.err)
		}
	}
	if clock.NowMillis() <= lease.ExpiresAtMillis {
		t.Fatal("clock did not pass the original expiry")
	}
	cur := h.Lease()
	if err := c.Check(ctx, cur); err != nil {
		t.Fatalf("held lease not live: %v", err)
	}
	if !errors.Is(c.Check(ctx, lease), ErrLeaseLost) {
		t.Fatal("original handle still live after renewals")
	}
	if _, ok, err := c.ClaimReconcile(ctx, "ws"); err != nil || ok {
		t.Fatalf("competitor claimed a held lease: ok=%v err=%v", ok, err)
	}
	got, err := h.Stop()
	if err != nil || got != cur {
		t.Fatalf("stop: %+v %v", got, err)
	}
	if f, err := c.Finish(ctx, got); err != nil || f.Outcome != FinishReconcile {
		t.Fatalf("finish held lease: %+v %v", f, err)
	}
}

func TestHoldLeaseCancelsContextWhenStolen(t *testing.T) {
	ctx := context.Background()
	clock := NewManualClock(1000)
	c := NewCoordinator(NewMemoryStore(), clock)
	lease, err := c.Begin(ctx, "ws", GenerationID{1}, "tool", 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	h, tick, renewed := startHold(t, c, lease, 30*time.Millisecond)
	clock.Advance(time.Millisecond)
	if _, err := c.Renew(ctx, lease, 60*time.Millisecond); err != nil { // the thief
		t.Fatal(err)
	}
	send(t, tick)
	if r := next(t, renewed); !errors.Is(r.err, ErrLeaseLost) {
		t.Fatalf("renewal of a stolen lease: %v", r.err)
	}
	closed(t, h.Context().Done(), "the holder's context cancelled")
	if cause := context.Cause(h.Context()); !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("cause %v, want lease lost", cause)
	}
	closed(t, h.Done(), "the renewer goroutine ended")
	if _, err := h.Stop(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stop after loss: %v", err)
	}
}

func TestHoldLeaseCancelsContextWhenExpiredAndRecovered(t *testing.T) {
	ctx := context.Background()
	clock := NewManualClock(1000)
	c := NewCoordinator(NewMemoryStore(), clock)
	lease, err := c.Begin(ctx, "ws", GenerationID{1}, "tool", 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	h, tick, renewed := startHold(t, c, lease, 30*time.Millisecond)
	clock.Advance(30 * time.Millisecond) // the renewer was starved past expiry
	if _, ok, err := c.ClaimReconcile(ctx, "ws"); err != nil || !ok {
		t.Fatalf("recovery: ok=%v err=%v", ok, err)
	}
	send(t, tick)
	if r := next(t, renewed); !errors.Is(r.err, ErrLeaseLost) {
		t.Fatalf("renewal of a recovered lease: %v", r.err)
	}
	closed(t, h.Context().Done(), "the holder's context cancelled")
}

func TestHoldLeaseStopEndsTheGoroutine(t *testing.T) {
	ctx := context.Background()
	c := NewCoordinator(NewMemoryStore(), SystemClock{})
	lease, err := c.Begin(ctx, "ws", GenerationID{1}, "tool", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := HoldLease(ctx, c, lease, time.Minute)
	if _, err := h.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("renewer still running after Stop")
	}
	if h.Context().Err() == nil {
		t.Fatal("context alive after Stop")
	}
	if _, err := h.Stop(); err != nil { // idempotent
		t.Fatalf("second stop: %v", err)
	}
}

// With the real ticker: a held lease whose handle is superseded is noticed
// by the next ttl/3 renewal.
func TestHoldLeaseRealTickerNoticesLoss(t *testing.T) {
	ctx := context.Background()
	c := NewCoordinator(NewMemoryStore(), SystemClock{})
	const ttl = 30 * time.Millisecond
	lease, err := c.Begin(ctx, "ws", GenerationID{1}, "tool", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := HoldLease(ctx, c, lease, ttl)
	defer h.Stop()
	if _, err := c.Finish(ctx, lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Context().Done():
	case <-time.After(waitLimit):
		t.Fatal("lease loss not noticed")
	}
	if !errors.Is(context.Cause(h.Context()), ErrLeaseLost) {
		t.Fatalf("cause %v", context.Cause(h.Context()))
	}
}
