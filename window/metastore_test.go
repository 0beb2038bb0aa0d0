package window_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/window/windowtest"
)

func newBolt(t *testing.T) (*window.Coordinator, *window.MetaStore, meta.Store, *window.ManualClock) {
	t.Helper()
	clock := window.NewManualClock(10)
	plane := openBolt(t, filepath.Join(t.TempDir(), "meta.db"), false)
	st := window.NewMetaStore(plane, clock)
	return window.NewCoordinator(st, clock), st, plane, clock
}

// checkPermit is what the workspace layer's head append does, inside its
// own transaction at the store clock.
func checkPermit(t *testing.T, plane meta.Store, p store.Permit, now int64) error {
	t.Helper()
	return plane.View(context.Background(), func(tx meta.Tx) error { return store.CheckPermitTx(tx, p, now) })
}

func TestBoltLeaseGateFencesOneWriterWithoutFencingItsPeer(t *testing.T) {
	ctx := context.Background()
	c, _, plane, clock := newBolt(t)
	first, err := c.Begin(ctx, "ws", windowtest.Gen(1), "first", 90*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Begin(ctx, "ws", windowtest.Gen(1), "second", 90*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Millisecond)
	if f, err := c.Finish(ctx, first); err != nil || f.Outcome != window.FinishStillActive {
		t.Fatalf("close first: %+v %v", f, err)
	}
	now := clock.NowMillis()
	if err := checkPermit(t, plane, first.Permit, now); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("closed lease's permit: %v, want fenced", err)
	}
	if err := checkPermit(t, plane, second.Permit, now); err != nil {
		t.Fatalf("peer's permit: %v", err)
	}
	// A live permit belongs to its own workspace only.
	if !window.PermitMatchesWorkspace(second.Permit, "ws") || window.PermitMatchesWorkspace(second.Permit, "other") {
		t.Fatalf("permit %q workspace binding wrong", second.Permit.Gate)
	}
	other, err := c.Begin(ctx, "ws/x", windowtest.Gen(1), "third", 90*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if window.PermitMatchesWorkspace(other.Permit, "ws") {
		t.Fatalf("permit %q of ws/x matches ws", other.Permit.Gate)
	}
}

func TestBoltDeadlineFencesWithoutASeparateExpirySweep(t *testing.T) {
	ctx := context.Background()
	c, st, plane, clock := newBolt(t)
	lease, err := c.Begin(ctx, "ws", windowtest.Gen(1), "tool", 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CheckPermit(lease.Permit); err != nil {
		t.Fatalf("live permit: %v", err)
	}
	clock.Set(20)
	if err := checkPermit(t, plane, lease.Permit, clock.NowMillis()); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("permit at its deadline: %v, want fenced", err)
	}
	// No sweep ran: the window still lists the lease.
	s, err := c.Inspect(ctx, "ws")
	if err != nil || s.Phase.Kind != window.PhaseActive || len(s.Phase.Leases) != 1 {
		t.Fatalf("window after deadline: %+v %v", s.Phase, err)
	}
}

func TestBoltSurvivesCloseAndReopenMidWindow(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	clock := window.NewManualClock(10)
	db, err := meta.OpenBolt(path, meta.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := window.NewCoordinator(window.NewMetaStore(db, clock), clock)
	first, err := c.Begin(ctx, "ws", windowtest.Gen(1), "first", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Begin(ctx, "ws", windowtest.Gen(1), "second", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ObserveParent(ctx, "ws", windowtest.Gen(2)); err != nil {
		t.Fatal(err)
	}
	before, err := c.Inspect(ctx, "ws")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openBolt(t, path, false)
	st := window.NewMetaStore(db, clock)
	c = window.NewCoordinator(st, clock)
	after, err := c.Inspect(ctx, "ws")
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision != before.Revision || after.Phase.Leases[first.ID] != before.Phase.Leases[first.ID] ||
		after.Phase.PendingParent != windowtest.Gen(2) || len(after.Phase.Leases) != 2 {
		t.Fatalf("reopened state %+v, want %+v", after, before)
	}
	for _, l := range []window.Lease{first, second} {
		if err := st.CheckPermit(l.Permit); err != nil {
			t.Fatalf("permit after reopen: %v", err)
		}
	}
	if f, err := c.Finish(ctx, first); err != nil || f.Outcome != window.FinishStillActive {
		t.Fatalf("finish first after reopen: %+v %v", f, err)
	}
	f, err := c.Finish(ctx, second)
	if err != nil || f.Outcome != window.FinishReconcile || f.Reconcile.PendingParent != windowtest.Gen(2) {
		t.Fatalf("final close after reopen: %+v %v", f, err)
	}
	if err := st.CheckPermit(second.Permit); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("closed permit after reopen: %v", err)
	}
}

func TestBoltTornOrFutureSnapshotIsIncompatible(t *testing.T) {
	ctx := context.Background()
	c, st, plane, _ := newBolt(t)
	lease, err := c.Begin(ctx, "ws", windowtest.Gen(1), "tool", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	put := planePutRaw(plane)
	for name, raw := range map[string]string{
		"torn":   `{"version":1,"revision":1,"works`,
		"future": `{"version":7,"revision":9,"workspace":"ws","phase":{"kind":"hyperactive"}}`,
	} {
		put(t, "ws", []byte(raw))
		if _, err := c.Inspect(ctx, "ws"); !errors.Is(err, window.ErrIncompatibleState) {
			t.Fatalf("%s: inspect %v", name, err)
		}
		if _, err := c.Finish(ctx, lease); !errors.Is(err, window.ErrIncompatibleState) {
			t.Fatalf("%s: finish %v", name, err)
		}
		next := window.IdleSnapshot("ws")
		next.Revision = 2
		if _, err := st.CompareAndSwap(ctx, "ws", 1, next); !errors.Is(err, window.ErrIncompatibleState) {
			t.Fatalf("%s: CAS over corrupt state: %v", name, err)
		}
		var got []byte
		_ = plane.View(ctx, func(tx meta.Tx) error {
			v, _, err := tx.Get(meta.NewSpace(window.Namespace).Key([]byte("ws")))
			got = append(got, v...)
			return err
		})
		if string(got) != raw {
			t.Fatalf("%s: corrupt state was overwritten with %q", name, got)
		}
		// The gate was not fenced by a failed transition.
		if err := st.CheckPermit(lease.Permit); err != nil {
			t.Fatalf("%s: permit %v", name, err)
		}
	}
}

func TestBoltGateDisagreementRollsBack(t *testing.T) {
	ctx := context.Background()
	c, _, plane, _ := newBolt(t)
	// Someone else already opened the gate the next lease would get: the
	// window transition must not adopt it.
	id := window.NewLeaseID()
	gate := "window/ws/" + id.String() + "/1"
	if err := plane.Update(ctx, func(tx meta.Tx) error { _, err := store.OpenGateTx(tx, gate, 1<<40); return err }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BeginWithLeaseID(ctx, "ws", windowtest.Gen(1), "tool", 1000, id); !errors.Is(err, window.ErrIncompatibleState) {
		t.Fatalf("begin over a foreign gate: %v", err)
	}
	s, err := c.Inspect(ctx, "ws")
	if err != nil || s.Revision != 0 {
		t.Fatalf("window changed after rollback: %+v %v", s, err)
	}
}
