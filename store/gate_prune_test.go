package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

func TestPruneGatesKeepsLiveGatesOnly(t *testing.T) {
	clock := storetest.NewClock(1000)
	s := storetest.MustOpenWith(t, store.Options{Clock: clock.Now, NoSync: true})
	var live, closed, expired store.Permit
	ctx := context.Background()
	err := s.Meta().Update(ctx, func(tx meta.Tx) error {
		var err error
		if live, err = store.OpenGateTx(tx, "live", 5000); err != nil {
			return err
		}
		if closed, err = store.OpenGateTx(tx, "closed", 5000); err != nil {
			return err
		}
		if err := store.FenceGateTx(tx, "closed"); err != nil {
			return err
		}
		expired, err = store.OpenGateTx(tx, "expired", 1500)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(2000)
	n, err := s.PruneGates()
	if err != nil || n != 2 {
		t.Fatalf("PruneGates = %d, %v; want 2 pruned", n, err)
	}
	_ = s.Meta().View(ctx, func(tx meta.Tx) error {
		if err := store.CheckPermitTx(tx, live, clock.Now()); err != nil {
			t.Errorf("live gate fenced after prune: %v", err)
		}
		for _, p := range []store.Permit{closed, expired} {
			if err := store.CheckPermitTx(tx, p, clock.Now()); !errors.Is(err, store.ErrFenced) {
				t.Errorf("pruned gate %s: %v, want ErrFenced", p.Gate, err)
			}
		}
		return nil
	})
}
