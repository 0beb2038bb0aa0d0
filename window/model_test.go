package window_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
	"pgregory.net/rapid"
)

// windowModel drives one workspace through random interleavings of every
// operation and checks the window invariants after each step.
type windowModel struct {
	c     *window.Coordinator
	clock *window.ManualClock
	ws    string
	// checkPermit is the store gate decision for each permit, made in one
	// read transaction (nil for stores without gates).
	checkPermit func([]store.Permit) []error

	handles  []window.Lease // every handle ever returned, stale ones included
	permits  []store.Permit // every permit ever issued
	parents  uint32         // counter for fresh parent generations
	latest   window.GenerationID
	ticket   window.Ticket // ticket handed out and not yet completed
	lastRev  uint64
	lastSnap window.Snapshot
}

func modelGen(n uint32) window.GenerationID {
	var id window.GenerationID
	id[0] = 0xa5
	binary.BigEndian.PutUint32(id[1:], n)
	return id
}

func (m *windowModel) freshParent() window.GenerationID {
	m.parents++
	return modelGen(m.parents)
}

func (m *windowModel) allow(t *rapid.T, op string, err error, allowed ...error) {
	if err == nil {
		return
	}
	for _, a := range allowed {
		if errors.Is(err, a) {
			return
		}
	}
	t.Fatalf("%s: unexpected error %v", op, err)
}

func (m *windowModel) gotTicket(t *rapid.T, op string, rc window.Reconcile) {
	if !m.ticket.IsZero() && rc.Ticket != m.ticket {
		t.Fatalf("%s handed out ticket %s while %s is claimed", op, rc.Ticket, m.ticket)
	}
	m.ticket = rc.Ticket
}

func (m *windowModel) addLease(l window.Lease) {
	m.handles = append(m.handles, l)
	m.permits = append(m.permits, l.Permit)
}

func (m *windowModel) pickHandle(t *rapid.T) (window.Lease, bool) {
	if len(m.handles) == 0 {
		return window.Lease{}, false
	}
	return m.handles[rapid.IntRange(0, len(m.handles)-1).Draw(t, "handle")], true
}

func (m *windowModel) actions() map[string]func(*rapid.T) {
	ctx := context.Background()
	owners := []string{"o0", "o1", "o2", "o3"}
	return map[string]func(*rapid.T){
		"begin": func(t *rapid.T) {
			owner := rapid.SampledFrom(owners).Draw(t, "owner")
			ttl := time.Duration(rapid.IntRange(1, 60).Draw(t, "ttl")) * time.Millisecond
			l, err := m.c.Begin(ctx, m.ws, m.freshParent(), owner, ttl)
			m.allow(t, "begin", err, window.ErrReconciling)
			if err == nil {
				m.addLease(l)
			}
		},
		"beginReplay": func(t *rapid.T) {
			h, ok := m.pickHandle(t)
			if !ok {
				return
			}
			l, err := m.c.BeginWithLeaseID(ctx, m.ws, h.PinnedParent, h.Owner, h.ExpiresAtMillis, h.ID)
			m.allow(t, "begin replay", err, window.ErrReconciling, window.ErrInvalidExpiry, window.ErrLeaseIdentityConflict)
			if err == nil {
				if l.ID != h.ID || l.ExpiresAtMillis != h.ExpiresAtMillis {
					t.Fatalf("replay %+v of %+v", l, h)
				}
				m.addLease(l)
			}
		},
		"renew": func(t *rapid.T) {
			h, ok := m.pickHandle(t)
			if !ok {
				return
			}
			ttl := time.Duration(rapid.IntRange(1, 60).Draw(t, "ttl")) * time.Millisecond
			l, err := m.c.Renew(ctx, h, ttl)
			m.allow(t, "renew", err, window.ErrLeaseLost, window.ErrInvalidExpiry)
			if err == nil {
				m.addLease(l)
			}
		},
		"finish": func(t *rapid.T) {
			h, ok := m.pickHandle(t)
			if !ok {
				return
			}
			rec, found := m.lastSnap.Phase.Leases[h.ID]
			live := m.lastSnap.Phase.Kind == window.PhaseActive && found &&
				rec.Permit == h.Permit && rec.ExpiresAtMillis == h.ExpiresAtMillis &&
				rec.ExpiresAtMillis > m.clock.NowMillis()
			f, err := m.c.Finish(ctx, h)
			m.allow(t, "finish", err)
			if live == (f.Outcome == window.FinishAlreadyClosed) {
				t.Fatalf("finish of a handle live=%v returned %v", live, f.Outcome)
			}
			if f.Outcome == window.FinishReconcile {
				m.gotTicket(t, "finish", f.Reconcile)
			}
		},
		"observe": func(t *rapid.T) {
			p := m.freshParent()
			ok, err := m.c.ObserveParent(ctx, m.ws, p)
			m.allow(t, "observe", err)
			if ok {
				m.latest = p
			}
		},
		"parentAdvanced": func(t *rapid.T) {
			p := m.freshParent()
			rc, claimed, err := m.c.ParentAdvanced(ctx, m.ws, p)
			m.allow(t, "parent advanced", err)
			if claimed {
				m.gotTicket(t, "parent advanced", rc)
			}
			m.latest = p
		},
		"claim": func(t *rapid.T) {
			rc, ok, err := m.c.ClaimReconcile(ctx, m.ws)
			m.allow(t, "claim", err)
			if ok {
				m.gotTicket(t, "claim", rc)
			}
		},
		"complete": func(t *rapid.T) {
			ticket := m.ticket
			stale := ticket.IsZero() || rapid.IntRange(0, 4).Draw(t, "stale") == 0
			if stale {
				ticket = window.NewTicket()
			}
			next, ok, err := m.c.CompleteReconcile(ctx, m.ws, ticket)
			if stale {
				if !errors.Is(err, window.ErrStaleTicket) {
					t.Fatalf("complete with a stale ticket: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("complete the claimed ticket: %v", err)
			}
			if ok {
				m.ticket = next.Ticket
			} else {
				// Only the completed ticket's own pending parent is handed
				// off; a parent observed after the claim must survive.
				if !m.latest.IsZero() && m.lastSnap.Phase.PendingParent != m.latest {
					t.Fatalf("completion dropped parent %s (phase %+v)", m.latest.Short(), m.lastSnap.Phase)
				}
				m.ticket = window.Ticket{}
				m.latest = window.GenerationID{} // handed to a completed reconcile
			}
		},
		"clock": func(t *rapid.T) {
			m.clock.Advance(time.Duration(rapid.IntRange(0, 30).Draw(t, "step")) * time.Millisecond)
		},
		"": func(t *rapid.T) { m.checkInvariants(t) },
	}
}

func (m *windowModel) checkInvariants(t *rapid.T) {
	s, err := m.c.Inspect(context.Background(), m.ws)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if s.Revision < m.lastRev {
		t.Fatalf("revision went back from %d to %d", m.lastRev, s.Revision)
	}
	if s.Revision == m.lastRev && m.lastRev != 0 {
		a, _ := window.EncodeSnapshot(s)
		b, _ := window.EncodeSnapshot(m.lastSnap)
		if string(a) != string(b) {
			t.Fatalf("state changed without a new revision: %s -> %s", b, a)
		}
	}
	m.lastRev, m.lastSnap = s.Revision, s.Clone()

	if !m.ticket.IsZero() && (s.Phase.Kind != window.PhaseReconciling || s.Phase.Ticket != m.ticket) {
		t.Fatalf("claimed ticket %s not current: %+v", m.ticket, s.Phase)
	}
	if !m.latest.IsZero() {
		p := s.Phase
		kept := (p.Kind == window.PhaseActive && p.PendingParent == m.latest) ||
			(p.Kind == window.PhaseReconciling && (p.PendingParent == m.latest || p.SubsequentParent == m.latest))
		if !kept {
			t.Fatalf("observed parent %s lost: %+v", m.latest.Short(), p)
		}
	}
	if m.checkPermit == nil {
		return
	}
	now := m.clock.NowMillis()
	live := map[store.Permit]bool{}
	if s.Phase.Kind == window.PhaseActive {
		for _, l := range s.Phase.Leases {
			live[l.Permit] = l.ExpiresAtMillis > now
		}
	}
	errs := m.checkPermit(m.permits)
	for i, p := range m.permits {
		err := errs[i]
		if live[p] && err != nil {
			t.Fatalf("live permit %v fenced: %v", p, err)
		}
		if !live[p] && err == nil {
			t.Fatalf("fenced or expired permit %v admitted (state %+v, now %d)", p, s.Phase, now)
		}
	}
}

func TestWindowModelMemory(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clock := window.NewManualClock(1000)
		m := &windowModel{c: window.NewCoordinator(window.NewMemoryStore(), clock), clock: clock, ws: "model"}
		t.Repeat(m.actions())
	})
}

func TestWindowModelBolt(t *testing.T) {
	db := openBolt(t, filepath.Join(t.TempDir(), "meta.db"), true)
	clock := window.NewManualClock(1000)
	st := window.NewMetaStore(db, clock)
	var run atomic.Int64
	rapid.Check(t, func(t *rapid.T) {
		// One file for all runs; a fresh workspace (and so fresh gates) each.
		clock.Set(1000)
		m := &windowModel{c: window.NewCoordinator(st, clock), clock: clock,
			ws: fmt.Sprintf("model-%d", run.Add(1)), checkPermit: checkPermits(db, clock)}
		t.Repeat(m.actions())
	})
}

func checkPermits(plane meta.Store, clock window.Clock) func([]store.Permit) []error {
	return func(ps []store.Permit) []error {
		errs := make([]error, len(ps))
		_ = plane.View(context.Background(), func(tx meta.Tx) error {
			for i, p := range ps {
				errs[i] = store.CheckPermitTx(tx, p, clock.NowMillis())
			}
			return nil
		})
		return errs
	}
}
