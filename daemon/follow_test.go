package daemon

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Two nodes over one metadata plane: node B serves child c (a fake view,
// as in finalclose_test.go), node A — another Manager on another store
// directory, sharing only the plane — commits into the parent p. B's
// mount learns of it through the plane's watch alone (A has no hook into
// B), and follows: at once when idle, at the final close when a tool is
// at work, rebasing exactly once whatever duplicate reports come.

// TestFollowParentAcrossNodes runs on a shared in-memory plane and on
// etcd (a 3-member cluster in the test process).
func TestFollowParentAcrossNodes(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testFollowParentAcrossNodes(t, meta.NewMemory()) })
	t.Run("etcd", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts an etcd cluster")
		}
		cl := etcdtest.Start(t).Client()
		testFollowParentAcrossNodes(t, etcdmeta.New(cl, "follow"))
	})
}

// headTimer is node A's view of the plane: it notes when an Update that
// wrote p's head log returned (the commit the watch must carry to B).
type headTimer struct {
	meta.Store
	prefix meta.Key
	mu     sync.Mutex
	at     time.Time
}

func (h *headTimer) Update(ctx context.Context, fn func(meta.Tx) error) error {
	var hit bool
	err := h.Store.Update(ctx, func(tx meta.Tx) error {
		hit = false
		return fn(spyTx{tx, h.prefix, &hit})
	})
	if err == nil && hit {
		h.mu.Lock()
		h.at = time.Now()
		h.mu.Unlock()
	}
	return err
}

func (h *headTimer) committed() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at
}

type spyTx struct {
	meta.Tx
	prefix meta.Key
	hit    *bool
}

func (s spyTx) Put(k meta.Key, v []byte) error {
	*s.hit = *s.hit || bytes.HasPrefix(k, s.prefix)
	return s.Tx.Put(k, v)
}

func testFollowParentAcrossNodes(t *testing.T, plane meta.Store) {
	w, ok := plane.(meta.Watcher)
	if !ok {
		t.Fatalf("%T cannot watch", plane)
	}
	f := newFixture(t, workspace.Options{NoSync: true, Meta: plane}) // node B
	switched := make(chan time.Time, 16)
	f.v.onSwitch = func(store.ID) { switched <- time.Now() }
	f.s.followParent()

	timer := &headTimer{Store: plane, prefix: meta.NewSpace("heads", "p").Prefix(nil)}
	mA, err := workspace.Open(filepath.Join(t.TempDir(), "store"), workspace.Options{NoSync: true, Meta: timer})
	if err != nil {
		t.Fatal(err)
	}
	defer mA.Close()
	commitOnA := func(name string) store.ID {
		t.Helper()
		src := filepath.Join(t.TempDir(), "src")
		write(t, src, "a.txt", "a\n")
		write(t, src, name, name+"\n")
		gen, _, err := mA.Commit(context.Background(), "p", src)
		if err != nil {
			t.Fatal(err)
		}
		return gen
	}
	rebases := func() int { return f.kinds()[store.GenRebase] }

	// Idle: the watch alone carries A's commit to B's mount, which
	// rebases c and switches its view.
	commitOnA("from-a.txt")
	var at time.Time
	select {
	case at = <-switched:
	case <-time.After(30 * time.Second):
		t.Fatal("B's mount of c did not follow A's commit into p")
	}
	delay := at.Sub(timer.committed())
	t.Logf("commit on A to the view switch request on B: %v", delay)
	if !f.hasFile("from-a.txt") {
		t.Fatal("c was not rebased onto A's commit")
	}
	if n := rebases(); n != 1 {
		t.Fatalf("%d rebases after one idle follow, want 1", n)
	}

	// Active: a tool is at work in c; A's next commit is coalesced into
	// the window (seen through the window's own record), a duplicate
	// report of the same head changes nothing, and the final close
	// rebases once.
	f.session("sid:1")
	wch, err := w.Watch(context.Background(), meta.NewSpace(window.Namespace).Key([]byte("c")))
	if err != nil {
		t.Fatal(err)
	}
	gen := commitOnA("second.txt")
	for {
		snap, err := f.m.Windows().Inspect(context.Background(), "c")
		if err != nil {
			t.Fatal(err)
		}
		if snap.Phase.PendingParent == gen {
			break
		}
		select {
		case <-wch:
		case <-time.After(30 * time.Second):
			t.Fatalf("A's commit not coalesced into c's window: %+v", snap.Phase)
		}
	}
	f.d.parentAdvanced("c", gen) // the in-process hook echoing the watch
	if n := rebases(); n != 1 {
		t.Fatalf("%d rebases while the tool works, want still 1", n)
	}
	if _, err := f.s.EndLease("sid:1"); err != nil {
		t.Fatal(err)
	}
	if !f.hasFile("second.txt") {
		t.Fatal("the final close did not rebase c onto A's second commit")
	}
	if n := rebases(); n != 2 {
		t.Fatalf("%d rebases after the final close, want 2", n)
	}
	f.d.parentAdvanced("c", gen) // a late duplicate: nothing to do
	f.s.parentMaybeMoved("p")    // the watch re-reading the same head
	if n := rebases(); n != 2 {
		t.Fatalf("%d rebases after duplicate reports, want 2", n)
	}
	if f.phase() != window.PhaseIdle {
		t.Fatalf("window %s after the final close, want idle", f.phase())
	}
}
