package window

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Holder keeps one lease alive by renewing it at a third of its TTL, so
// that two renewals may be missed before the lease expires. Obtain one
// with HoldLease.
type Holder struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the renewer goroutine has returned

	mu    sync.Mutex // protects lease and lost
	lease Lease      // newest renewed lease; its permit is the live one
	lost  error      // terminal renewal failure (wraps ErrLeaseLost or ErrIncompatibleState)

	// afterRenew, if set (tests only), is called after every renewal attempt.
	afterRenew func(Lease, error)
}

// HoldLease starts a goroutine that renews lease every ttl/3 for ttl from
// the coordinator's clock. The holder's Context is cancelled, with a cause
// wrapping ErrLeaseLost, as soon as a renewal finds the lease closed,
// expired, recovered by someone else or superseded — the tool must stop
// publishing then. Transient failures (contention, store I/O) are retried on
// the next tick; if they last past the expiry, the next renewal reports the
// loss. Stop ends the goroutine. A ttl under 3 ms is raised to 3 ms.
func HoldLease(ctx context.Context, c *Coordinator, lease Lease, ttl time.Duration) *Holder {
	ttl = max(ttl, 3*time.Millisecond)
	ticker := time.NewTicker(ttl / 3)
	return holdLease(ctx, c, lease, ttl, ticker.C, ticker.Stop, nil)
}

// holdLease is HoldLease with an injectable tick source, so tests drive
// renewals deterministically.
func holdLease(ctx context.Context, c *Coordinator, lease Lease, ttl time.Duration, tick <-chan time.Time, stopTick func(), afterRenew func(Lease, error)) *Holder {
	hctx, cancel := context.WithCancelCause(ctx)
	h := &Holder{ctx: hctx, cancel: cancel, done: make(chan struct{}), lease: lease, afterRenew: afterRenew}
	go h.run(c, ttl, tick, stopTick)
	return h
}

func (h *Holder) run(c *Coordinator, ttl time.Duration, tick <-chan time.Time, stopTick func()) {
	defer close(h.done)
	if stopTick != nil {
		defer stopTick()
	}
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-tick:
		}
		cur := h.Lease()
		next, err := c.Renew(h.ctx, cur, ttl)
		if err != nil && !errors.Is(err, ErrLeaseLost) {
			// Renew rejects a request before looking at the lease (e.g.
			// ttl shorter than what is left after a clock step back);
			// make sure a transient failure is not hiding a loss.
			if cerr := c.Check(h.ctx, cur); errors.Is(cerr, ErrLeaseLost) {
				err = cerr
			}
		}
		switch {
		case err == nil:
			h.mu.Lock()
			h.lease = next
			h.mu.Unlock()
		case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrIncompatibleState):
			err = fmt.Errorf("hold lease %s: %w", cur.ID, err)
			h.mu.Lock()
			h.lost = err
			h.mu.Unlock()
			h.cancel(err)
		}
		if h.afterRenew != nil {
			h.afterRenew(next, err)
		}
		if h.ctx.Err() != nil {
			return
		}
	}
}

// Context is cancelled when the lease is lost (context.Cause wraps
// ErrLeaseLost), when Stop is called, or when the parent context ends.
func (h *Holder) Context() context.Context { return h.ctx }

// Lease returns the newest lease; publish with its Permit.
func (h *Holder) Lease() Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// Done is closed once the renewer goroutine has exited.
func (h *Holder) Done() <-chan struct{} { return h.done }

// Stop stops renewing, waits for the renewer goroutine to exit, and returns
// the newest lease (to Finish it) and the loss error, if the lease was lost.
// It is safe to call more than once.
func (h *Holder) Stop() (Lease, error) {
	h.cancel(context.Canceled)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease, h.lost
}
