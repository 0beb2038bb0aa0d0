package etcdmeta_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fencing on etcd: lease gates are bound to the session lease of the
// process that wrote them, so a process whose session ends (revoked,
// expired while it was paused) has every permit fenced even though its own
// clock says the lease is live; and the head append compares the gate's
// mod revision (the permit's fencing token) in its own Txn, so a session
// that ends between the append's read and its commit fences it too.

// sessionTTL is the shortest session etcd grants (its minimum lease TTL
// with the default election timeout is about 2 s).
const sessionTTL = 2 * time.Second

// node is one client's store on the shared plane, with a store clock
// that stands still (a paused process's clock says nothing expired).
type node struct {
	plane meta.Store
	st    *store.Store
	clock *storetest.Clock
}

func newNode(t *testing.T, cl *clientv3.Client, prefix string, wrap func(meta.Store) meta.Store) *node {
	t.Helper()
	plane := etcdmeta.NewWithOptions(cl, prefix, etcdmeta.Options{SessionTTL: sessionTTL})
	n := &node{plane: plane, clock: storetest.NewClock(10_000)}
	opt := store.Options{Meta: plane, Clock: n.clock.Now}
	if wrap != nil {
		opt.Meta = wrap(plane)
	}
	n.st = storetest.MustOpenWith(t, opt)
	return n
}

// gen stores an empty-rooted generation (no blobs: the nodes' blob
// directories are their own).
func (n *node) gen(t *testing.T, i int, parents ...store.ID) store.ID {
	t.Helper()
	id, err := n.st.PutGeneration(&store.Generation{Root: store.EmptyTreeID(), Parents: parents, Workspace: "ws", Kind: store.GenCapture, Time: int64(i)})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (n *node) openGate(t *testing.T, gate string) store.Permit {
	t.Helper()
	var p store.Permit
	err := n.st.Meta().Update(context.Background(), func(tx meta.Tx) (err error) {
		p, err = store.OpenGateTx(tx, gate, 1<<50) // never expires by the clock
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (n *node) head(t *testing.T) store.Workspace {
	t.Helper()
	w, err := n.st.GetWorkspace("ws")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// waitGone waits (by a watch, not a poll) until gate's record is deleted.
func waitGone(t *testing.T, plane meta.Store, gate string) {
	t.Helper()
	k := meta.NewSpace("gates").Key([]byte(gate))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := plane.(meta.Watcher).Watch(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var found bool
		if err := plane.View(ctx, func(tx meta.Tx) (err error) { _, found, err = tx.Get(k); return err }); err != nil {
			t.Fatal(err)
		}
		if !found {
			return
		}
		if _, ok := <-ch; !ok {
			t.Fatalf("gate %s still there: %v", gate, ctx.Err())
		}
	}
}

func TestFencing(t *testing.T) {
	c := etcdtest.Start(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *etcdtest.Cluster, string)
	}{
		{"RevokedSessionFencesWhateverTheClock", testRevokedSessionFences},
		{"PausedPastTTLCannotPublish", testPausedPastTTL},
		{"SessionEndsBetweenReadAndCommit", testSessionEndsMidAppend},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, c, "fence/"+tc.name) })
	}
}

// testRevokedSessionFences: A holds a permit its clock says is live; its
// session is revoked; A's append is fenced and writes nothing.
func testRevokedSessionFences(t *testing.T, c *etcdtest.Cluster, prefix string) {
	a := newNode(t, c.Client(0), prefix, nil)
	g0 := a.gen(t, 0)
	storetest.MustCreate(t, a.st, "ws", "", g0, store.ID{})
	g1 := a.gen(t, 1, g0)
	p := a.openGate(t, "lease-a")
	lease := a.plane.(*etcdmeta.Store).SessionLease()
	if lease == 0 {
		t.Fatal("the gate was written without a session lease")
	}
	if _, err := c.Client(2).Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	_, err := a.st.CompareAndAppend("ws", g0, store.HeadEntry{Gen: g1, Kind: store.GenCapture}, &p)
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append after the session was revoked: %v, want ErrFenced", err)
	}
	if w := a.head(t); w.Head != g0 || w.Seq != 1 {
		t.Fatalf("fenced append wrote: %+v", w)
	}
}

// testPausedPastTTL: A stops renewing its session (SIGSTOP) past the TTL;
// its gate vanishes by itself; B claims and publishes; A, awake with a
// clock that saw nothing, cannot publish, and B's publication stands.
func testPausedPastTTL(t *testing.T, c *etcdtest.Cluster, prefix string) {
	a := newNode(t, c.Client(0), prefix, nil)
	b := newNode(t, c.Client(2), prefix, nil)
	g0 := a.gen(t, 0)
	storetest.MustCreate(t, a.st, "ws", "", g0, store.ID{})
	ga, gb := a.gen(t, 1, g0), b.gen(t, 2, g0)
	pa := a.openGate(t, "lease-a")
	start := time.Now()
	etcdmeta.PauseSession(a.plane)
	waitGone(t, b.plane, "lease-a")
	t.Logf("gate gone %v after the pause (TTL %v)", time.Since(start).Round(time.Millisecond), sessionTTL)
	pb := b.openGate(t, "reconcile-b")
	if _, err := b.st.CompareAndAppend("ws", g0, store.HeadEntry{Gen: gb, Kind: store.GenCapture, Operation: "b"}, &pb); err != nil {
		t.Fatalf("B's append: %v", err)
	}
	_, err := a.st.CompareAndAppend("ws", g0, store.HeadEntry{Gen: ga, Kind: store.GenCapture, Operation: "a"}, &pa)
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("A's append after its session expired: %v, want ErrFenced", err)
	}
	if w := a.head(t); w.Head != gb || w.Seq != 2 {
		t.Fatalf("head %s seq %d, want B's %s at 2", w.Head.Short(), w.Seq, gb.Short())
	}
}

// midway runs a hook once, after an Update's closure ran and before the
// plane commits it: between the head append's reads and its Txn.
type midway struct {
	meta.Store
	mu   sync.Mutex
	hook func()
}

func (m *midway) arm(f func()) { m.mu.Lock(); m.hook = f; m.mu.Unlock() }

func (m *midway) Update(ctx context.Context, fn func(meta.Tx) error) error {
	return m.Store.Update(ctx, func(tx meta.Tx) error {
		err := fn(tx)
		m.mu.Lock()
		h := m.hook
		m.hook = nil
		m.mu.Unlock()
		if h != nil {
			h()
		}
		return err
	})
}

// testSessionEndsMidAppend: A's append read a live gate; the session ends
// before the Txn; the Txn's compare on the gate's mod revision fails, and
// the append, run again, is fenced. Nothing is written.
func testSessionEndsMidAppend(t *testing.T, c *etcdtest.Cluster, prefix string) {
	var mw *midway
	a := newNode(t, c.Client(0), prefix, func(p meta.Store) meta.Store { mw = &midway{Store: p}; return mw })
	g0 := a.gen(t, 0)
	storetest.MustCreate(t, a.st, "ws", "", g0, store.ID{})
	g1 := a.gen(t, 1, g0)
	p := a.openGate(t, "lease-a")
	lease := a.plane.(*etcdmeta.Store).SessionLease()
	revoked := false
	mw.arm(func() {
		_, err := c.Client(2).Revoke(context.Background(), lease)
		revoked = err == nil
	})
	_, err := a.st.CompareAndAppend("ws", g0, store.HeadEntry{Gen: g1, Kind: store.GenCapture}, &p)
	if !revoked {
		t.Fatal("the session was not revoked mid-append")
	}
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append whose session ended before its commit: %v, want ErrFenced", err)
	}
	if w := a.head(t); w.Head != g0 || w.Seq != 1 {
		t.Fatalf("fenced append wrote: %+v", w)
	}
}
