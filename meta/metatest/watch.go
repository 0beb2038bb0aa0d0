package metatest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/meta"
)

// watchCases are run for a plane that implements meta.Watcher.
var watchCases = []struct {
	name string
	fn   func(*testing.T, meta.Store, meta.Watcher)
}{
	{"WatchReportsOnlyItsPrefix", testWatchOnlyPrefix},
	{"WatchNeverMissesTheLastChange", testWatchLastChange},
	{"WatchSeesDeletes", testWatchDeletes},
	{"WatchEndsWithContext", testWatchEnds},
}

// runWatch runs the watch cases on s if it is a Watcher.
func runWatch(t *testing.T, name string, open func(t *testing.T) meta.Store) {
	t.Run(name, func(t *testing.T) {
		if s := open(t); !isWatcher(s) {
			t.Skipf("%T does not implement meta.Watcher", s)
		}
		for _, tc := range watchCases {
			t.Run(tc.name, func(t *testing.T) {
				s := open(t)
				tc.fn(t, s, s.(meta.Watcher))
			})
		}
	})
}

func isWatcher(s meta.Store) bool {
	_, ok := s.(meta.Watcher)
	return ok
}

// eventTimeout bounds the wait for an event that must come.
const eventTimeout = 20 * time.Second

// next returns the next event of ch, failing the test if none comes.
func next(t *testing.T, ch <-chan meta.Event) meta.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-time.After(eventTimeout):
		t.Fatalf("no event in %v", eventTimeout)
	}
	return meta.Event{}
}

func watch(t *testing.T, w meta.Watcher, prefix meta.Key) <-chan meta.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := w.Watch(ctx, prefix)
	if err != nil {
		t.Fatalf("watch %q: %v", prefix, err)
	}
	return ch
}

func revision(t *testing.T, w meta.Watcher) int64 {
	t.Helper()
	r, err := w.Revision(context.Background())
	if err != nil {
		t.Fatalf("revision: %v", err)
	}
	return r
}

// testWatchOnlyPrefix: a commit elsewhere (another namespace, a namespace
// whose name extends the watched one's) and a rolled-back Update give the
// watch no event; the next commit under its prefix does, at a newer
// revision.
func testWatchOnlyPrefix(t *testing.T, s meta.Store, w meta.Watcher) {
	a, other, longer := meta.NewSpace("wa"), meta.NewSpace("wb"), meta.NewSpace("wa", "x")
	cha := watch(t, w, a.Prefix(nil))
	chb := watch(t, w, other.Prefix(nil))
	update(t, s, func(tx meta.Tx) error { return tx.Put(other.Key([]byte("k")), []byte("1")) })
	update(t, s, func(tx meta.Tx) error { return tx.Put(longer.Key([]byte("k")), []byte("1")) })
	eb := next(t, chb)
	r0 := revision(t, w)
	if eb.Rev <= 0 || eb.Rev > r0 {
		t.Fatalf("event at revision %d, plane at %d", eb.Rev, r0)
	}
	err := s.Update(context.Background(), func(tx meta.Tx) error {
		if err := tx.Put(a.Key([]byte("k")), []byte("rolled back")); err != nil {
			return err
		}
		return errBoom
	})
	if err != errBoom {
		t.Fatalf("update: %v, want %v", err, errBoom)
	}
	update(t, s, func(tx meta.Tx) error { return tx.Put(a.Key([]byte("k")), []byte("2")) })
	if ev := next(t, cha); ev.Rev <= r0 {
		t.Fatalf("watch of %s: first event at revision %d, not after %d: a commit elsewhere or a rollback was reported", a, ev.Rev, r0)
	}
}

var errBoom = fmt.Errorf("boom")

// testWatchLastChange: many commits in a row may be coalesced, but events
// come in revision order and one reaches the plane's revision after the
// last commit.
func testWatchLastChange(t *testing.T, s meta.Store, w meta.Watcher) {
	a := meta.NewSpace("wa")
	ch := watch(t, w, a.Key([]byte("counter")))
	const n = 50
	for i := range n {
		update(t, s, func(tx meta.Tx) error { return tx.Put(a.Key([]byte("counter")), []byte(fmt.Sprint(i))) })
	}
	last := revision(t, w)
	var prev int64
	events := 0
	for prev < last {
		ev := next(t, ch)
		events++
		if ev.Rev <= prev {
			t.Fatalf("event at revision %d after %d", ev.Rev, prev)
		}
		prev = ev.Rev
	}
	if prev != last {
		t.Fatalf("last event at revision %d, plane at %d", prev, last)
	}
	t.Logf("%d commits, %d events", n, events)
}

// testWatchDeletes: a Delete of the watched key and a DeletePrefix that
// covers it are reported.
func testWatchDeletes(t *testing.T, s meta.Store, w meta.Watcher) {
	a := meta.NewSpace("wa")
	k := a.Key([]byte("key"))
	update(t, s, func(tx meta.Tx) error { return tx.Put(k, []byte("1")) })
	ch := watch(t, w, k)
	r := revision(t, w)
	update(t, s, func(tx meta.Tx) error { return tx.Delete(k) })
	if ev := next(t, ch); ev.Rev <= r {
		t.Fatalf("delete: event at revision %d, not after %d", ev.Rev, r)
	}
	update(t, s, func(tx meta.Tx) error { return tx.Put(k, []byte("2")) })
	for next(t, ch).Rev < revision(t, w) {
	}
	r = revision(t, w)
	update(t, s, func(tx meta.Tx) error { return tx.DeletePrefix(a.Prefix([]byte("ke"))) })
	if ev := next(t, ch); ev.Rev <= r {
		t.Fatalf("delete prefix: event at revision %d, not after %d", ev.Rev, r)
	}
}

// testWatchEnds: the channel closes when the context ends.
func testWatchEnds(t *testing.T, _ meta.Store, w meta.Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := w.Watch(ctx, meta.NewSpace("wa").Prefix(nil))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	timeout := time.After(eventTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("channel open %v after the context ended", eventTimeout)
		}
	}
}
