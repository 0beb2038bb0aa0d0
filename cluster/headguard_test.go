package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

// TestHeadGuardFencesAPauseBeforeTheTxn: node a checks its claim (the
// read before the append), then pauses exactly between that check and the
// etcd Txn of the head append, past its TTL: its claims lease goes (here:
// revoked) and node b claims the workspace. The append, which read a's
// claim inside its transaction, fails its compare; the rerun finds the
// claim gone and the append is ErrFenced, the head unchanged. Appends
// before the pause, and to a workspace a does not claim, pass.
func TestHeadGuardFencesAPauseBeforeTheTxn(t *testing.T) {
	c := etcdtest.Start(t)
	ctx := context.Background()
	a, b := node(t, c, "a", 1), node(t, c, "b", 1)
	ca := a.Claims(1, none, nil, t.Logf)
	defer ca.Close()
	if err := ca.Claim(ctx, "ws", "/mnt/a"); err != nil {
		t.Fatal(err)
	}

	var pause atomic.Bool
	paused := 0
	guard := func(tx meta.Tx, ws string) error {
		err := a.HeadGuard(tx, ws)
		if pause.CompareAndSwap(true, false) {
			paused++
			// The pause: a's lease goes with its claim, b mounts ws.
			if _, rerr := a.Client().Revoke(ctx, ca.sess.Lease()); rerr != nil {
				t.Errorf("revoke a's claims lease: %v", rerr)
			}
			cb := b.Claims(2, none, nil, t.Logf)
			t.Cleanup(func() { cb.Close() })
			if cerr := cb.Claim(ctx, "ws", "/mnt/b"); cerr != nil {
				t.Errorf("b's claim after a's lease went: %v", cerr)
			}
		}
		return err
	}
	s := storetest.MustOpenDir(t, t.TempDir(), store.Options{NoSync: true, Meta: a.Meta(), HeadGuard: guard})
	defer s.Close()
	g1 := storetest.PutGen(t, s, "ws", store.GenCreate, map[string]string{"f": "1"})
	g2 := storetest.PutGen(t, s, "ws", store.GenCommit, map[string]string{"f": "2"}, g1)
	g3 := storetest.PutGen(t, s, "ws", store.GenCommit, map[string]string{"f": "3"}, g2)
	storetest.MustCreate(t, s, "ws", "", g1, store.ID{})
	storetest.MustCreate(t, s, "other", "", g1, store.ID{})
	if _, err := s.CompareAndAppend("ws", g1, store.HeadEntry{Gen: g2, Kind: store.GenCommit}, nil); err != nil {
		t.Fatalf("append while a's claim stands: %v", err)
	}

	// The read before the append: a still holds ws.
	if err := ca.Claim(ctx, "ws", "/mnt/a"); err != nil {
		t.Fatal(err)
	}
	pause.Store(true)
	_, _, err := s.PublishGeneration(&store.Generation{Root: mustRoot(t, s, g3), Parents: []store.ID{g2}, Workspace: "ws", Kind: store.GenCommit},
		"ws", g2, store.HeadEntry{Kind: store.GenCommit}, nil)
	if paused != 1 {
		t.Fatalf("the guard paused %d times, want 1", paused)
	}
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append after a paused past its claim between check and Txn: %v, want ErrFenced", err)
	}
	if w, err := s.GetWorkspace("ws"); err != nil || w.Head != g2 {
		t.Fatalf("head after the fenced append: %v %v, want %s", w.Head, err, g2.Short())
	}
	// An append to a workspace a does not claim is not the guard's.
	if _, err := s.CompareAndAppend("other", g1, store.HeadEntry{Gen: g2, Kind: store.GenCommit}, nil); err != nil {
		t.Fatalf("append to an unclaimed workspace: %v", err)
	}
}

func mustRoot(t *testing.T, s *store.Store, g store.ID) store.ID {
	t.Helper()
	gen, err := s.GetGeneration(g)
	if err != nil {
		t.Fatal(err)
	}
	return gen.Root
}
