package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/store"
)

// node inits a store directory against the cluster and opens it.
func node(t testing.TB, c *etcdtest.Cluster, name string, ttl int) *Node {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	var hosts []string
	for _, e := range c.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(e, "http://"))
	}
	eps, prefix, err := ParseMetaURL("etcd://" + strings.Join(hosts, ",") + "/claims-test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, Config{Version: ConfigVersion, Endpoints: eps, Prefix: prefix, Node: name, ClaimTTLSeconds: ttl}); err != nil {
		t.Fatal(err)
	}
	n, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func none() map[string]string { return nil }

func TestClaims(t *testing.T) {
	c := etcdtest.Start(t)
	ctx := context.Background()
	a, b := node(t, c, "a", 1), node(t, c, "b", 1)

	t.Run("NodeLock", func(t *testing.T) {
		start := time.Now()
		if _, err := Open(ctx, a.dir); !errors.Is(err, store.ErrLocked) {
			t.Fatalf("second Open of a node: %v, want store.ErrLocked", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("lock wait unbounded")
		}
	})

	ca, cb := a.Claims(1, none, nil, t.Logf), b.Claims(2, none, nil, t.Logf)
	defer ca.Close()
	defer cb.Close()
	if err := ca.Claim(ctx, "ws", "/mnt/a"); err != nil {
		t.Fatal(err)
	}
	var held *ClaimedError
	if err := cb.Claim(ctx, "ws", "/mnt/b"); !errors.As(err, &held) || held.Held.Node != "a" || held.Held.Mountpoint != "/mnt/a" {
		t.Fatalf("claim of a held workspace: %v, want ClaimedError naming a", err)
	}
	if !strings.Contains(held.Error(), "node a") {
		t.Errorf("error %q does not name the node", held)
	}
	if err := cb.Claim(ctx, "other", "/mnt/b"); err != nil {
		t.Fatal(err)
	}
	list, err := b.List(ctx)
	if err != nil || len(list) != 2 || list[0].Workspace != "other" || list[0].Node != "b" || list[1].Node != "a" {
		t.Fatalf("List: %+v %v", list, err)
	}
	// b's Release of a's claim drops nothing.
	if err := cb.Release(ctx, "ws"); err != nil {
		t.Fatal(err)
	}
	if err := cb.Claim(ctx, "ws", "/mnt/b"); !errors.Is(err, ErrClaimed) {
		t.Fatalf("claim after another node's release: %v, want ErrClaimed", err)
	}
	if err := ca.Release(ctx, "ws"); err != nil {
		t.Fatal(err)
	}
	if err := cb.Claim(ctx, "ws", "/mnt/b"); err != nil {
		t.Fatalf("claim after the holder's release: %v", err)
	}
	// A new daemon of node b takes over b's claims; closing a session
	// revokes its claims at once.
	cb2 := b.Claims(3, none, nil, t.Logf)
	if err := cb2.Claim(ctx, "ws", "/mnt/b2"); err != nil {
		t.Fatalf("take over own claim: %v", err)
	}
	cb2.Close()
	if err := ca.Claim(ctx, "ws", "/mnt/a"); err != nil {
		t.Fatalf("claim after the holder's session closed: %v", err)
	}
}

// TestClaimExpires: a claim whose session is no longer kept alive goes
// when its lease's TTL runs out. The client's keep-alive cannot be paused
// from here, so the lease is granted without one.
func TestClaimExpires(t *testing.T) {
	c := etcdtest.Start(t)
	ctx := context.Background()
	a, b := node(t, c, "a", 1), node(t, c, "b", 1)
	cl := a.Client()
	lease, err := cl.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	root := claimRoot("/claims-test")
	put, err := cl.Put(ctx, root+"ws", `{"workspace":"ws","node":"a","mountpoint":"/mnt/a"}`, clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	cb := b.Claims(2, none, nil, t.Logf)
	defer cb.Close()
	if err := cb.Claim(ctx, "ws", "/mnt/b"); !errors.Is(err, ErrClaimed) {
		t.Fatalf("claim while a's lease lives: %v", err)
	}
	// The lease's expiry deletes the claim: wait for that event.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	gone := false
	for wr := range cl.Watch(wctx, root+"ws", clientv3.WithRev(put.Header.Revision+1)) {
		for _, ev := range wr.Events {
			gone = gone || ev.Type == clientv3.EventTypeDelete
		}
		if gone {
			break
		}
	}
	if !gone {
		t.Fatal("a's claim outlived its lease's TTL by 30s")
	}
	if err := cb.Claim(ctx, "ws", "/mnt/b"); err != nil {
		t.Fatalf("claim after a's lease expired: %v", err)
	}
}

// TestReclaimAfterLoss: when the lease of a node's claims is lost (here
// revoked behind the node's back, as etcd does to a node stopped past its
// TTL), the node claims the workspaces it still mounts again.
func TestReclaimAfterLoss(t *testing.T) {
	c := etcdtest.Start(t)
	ctx := context.Background()
	a := node(t, c, "a", 5)
	held := func() map[string]string { return map[string]string{"ws": "/mnt/a"} }
	ca := a.Claims(1, held, nil, t.Logf)
	defer ca.Close()
	if err := ca.Claim(ctx, "ws", "/mnt/a"); err != nil {
		t.Fatal(err)
	}
	key := claimRoot("/claims-test") + "ws"
	cur, err := a.Client().Get(ctx, key)
	if err != nil || len(cur.Kvs) != 1 {
		t.Fatalf("claim key: %v %v", cur, err)
	}
	lease := cur.Kvs[0].Lease
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w := a.Client().Watch(wctx, key, clientv3.WithRev(cur.Header.Revision+1))
	if _, err := a.Client().Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	var deleted, again bool
	for wr := range w {
		for _, ev := range wr.Events {
			switch {
			case ev.Type == clientv3.EventTypeDelete:
				deleted = true
			case deleted && ev.Type == clientv3.EventTypePut:
				again = ev.Kv.Lease != lease && strings.Contains(string(ev.Kv.Value), `"node":"a"`)
			}
		}
		if again {
			break
		}
	}
	if !deleted || !again {
		t.Fatalf("claim after its lease was revoked: deleted %v, claimed again on a new lease %v", deleted, again)
	}
}

// TestClaimLostToAnotherNode: node a's claim goes with its lease (revoked
// behind its back, as etcd does to a node stopped past its TTL); node b
// claims the workspace and releases it again. a's next Claim finds b's
// claim in the key's history and fails with ErrClaimed naming b, leaves
// no claim behind, and keeps failing until a releases the workspace;
// then a claims it as usual. (Without the history check, a's Claim finds
// the key free and succeeds: the first check fails.)
func TestClaimLostToAnotherNode(t *testing.T) {
	c := etcdtest.Start(t)
	ctx := context.Background()
	a, b := node(t, c, "a", 5), node(t, c, "b", 5)
	ca, cb := a.Claims(1, none, nil, t.Logf), b.Claims(2, none, nil, t.Logf)
	defer ca.Close()
	defer cb.Close()
	if err := ca.Claim(ctx, "ws", "/mnt/a"); err != nil {
		t.Fatal(err)
	}
	key := claimRoot("/claims-test") + "ws"
	cur, err := a.Client().Get(ctx, key)
	if err != nil || len(cur.Kvs) != 1 {
		t.Fatalf("claim key: %v %v", cur, err)
	}
	if _, err := a.Client().Revoke(ctx, clientv3.LeaseID(cur.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := cb.Claim(ctx, "ws", "/mnt/b"); err != nil {
		t.Fatalf("b's claim after a's lease was revoked: %v", err)
	}
	if err := cb.Release(ctx, "ws"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err := ca.Claim(ctx, "ws", "/mnt/a")
		var held *ClaimedError
		if !errors.As(err, &held) || held.Held.Node != "b" || held.Held.Mountpoint != "/mnt/b" {
			t.Fatalf("a's claim after b claimed and released: %v, want ErrClaimed naming b at /mnt/b", err)
		}
		if r, err := a.Client().Get(ctx, key); err != nil || len(r.Kvs) != 0 {
			t.Fatalf("a's refused claim left the key: %v %v", r, err)
		}
	}
	if err := ca.Release(ctx, "ws"); err != nil {
		t.Fatal(err)
	}
	if err := ca.Claim(ctx, "ws", "/mnt/a2"); err != nil {
		t.Fatalf("a's claim after its release: %v", err)
	}
}
