package etcdmeta_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"github.com/acyclicfs/acyclicfs/meta/metatest"
)

// TestCluster runs the tests that leave the members alone on one shared
// 3-member cluster (starting one takes seconds), each in its own prefixes.
func TestCluster(t *testing.T) {
	c := etcdtest.Start(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *etcdtest.Cluster)
	}{
		{"Conformance", testConformance},
		{"PrefixesAreDisjoint", testPrefixesAreDisjoint},
		{"Limits", testLimits},
		{"TwoClientsLoseNoUpdate", testTwoClientsLoseNoUpdate},
		{"ViewIsOneRevision", testViewIsOneRevision},
		{"WatchResumesAfterCompaction", testWatchResumesAfterCompaction},
		{"KeyComparedOutsideGuards", testKeyComparedOutsideGuards},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, c) })
	}
}

// testConformance runs the whole metadata-plane suite, each case in its
// own prefix.
func testConformance(t *testing.T, c *etcdtest.Cluster) {
	cl := c.Client()
	metatest.Run(t, func(t *testing.T) meta.Store { return etcdmeta.New(cl, "conformance/"+t.Name()) })
}

// testPrefixesAreDisjoint: stores whose prefixes extend one another ("a"
// and "a/b", "a" and "a\x00d") share no key, even where a plain
// prefix + "/" join would spell two records alike: store "a"'s b/x NUL k
// and store "a/b"'s x NUL k.
func testPrefixesAreDisjoint(t *testing.T, c *etcdtest.Cluster) {
	cl := c.Client()
	ctx := context.Background()
	stores := []struct {
		prefix string
		sp     meta.Space
	}{
		{"a", meta.NewSpace("b", "x")}, {"a/b", meta.NewSpace("x")}, {"a\x00d", meta.NewSpace("x")},
		{"a", meta.NewSpace("x")}, {"a%", meta.NewSpace("x")}, {"a%25", meta.NewSpace("x")}, {"", meta.NewSpace("x")},
	}
	for i, st := range stores {
		err := etcdmeta.New(cl, st.prefix).Update(ctx, func(tx meta.Tx) error {
			return tx.Put(st.sp.Key([]byte("k")), []byte(fmt.Sprint(i)))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range stores {
		var got []string
		err := etcdmeta.New(cl, st.prefix).View(ctx, func(tx meta.Tx) error {
			return tx.Scan(st.sp.Prefix(nil), meta.ScanOptions{}, func(k meta.Key, v []byte) error {
				got = append(got, string(st.sp.Leaf(k))+"="+string(v))
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("[k=%d]", i); fmt.Sprint(got) != want {
			t.Errorf("store %q space %s lists %q, want %s", st.prefix, st.sp, got, want)
		}
	}
}

// testLimits: a value or a transaction over etcd's request limits fails
// with ErrTooLarge and writes nothing; many reads still commit.
func testLimits(t *testing.T, c *etcdtest.Cluster) {
	cl := c.Client()
	s := etcdmeta.New(cl, "limits")
	ctx := context.Background()
	sp := meta.NewSpace("t")
	cases := map[string]func(tx meta.Tx) error{
		"one big value": func(tx meta.Tx) error {
			return tx.Put(sp.Key([]byte("big")), make([]byte, etcdmeta.MaxRequestBytes))
		},
		"values adding up": func(tx meta.Tx) error {
			for i := range 3 {
				if err := tx.Put(sp.Key([]byte{'v', byte(i)}), make([]byte, etcdmeta.MaxRequestBytes/3)); err != nil {
					return err
				}
			}
			return nil
		},
		"too many writes": func(tx meta.Tx) error {
			for i := range etcdmeta.MaxTxnOps + 1 {
				if err := tx.Put(sp.Key(binary.BigEndian.AppendUint32(nil, uint32(i))), nil); err != nil {
					return err
				}
			}
			return nil
		},
	}
	for name, fn := range cases {
		if err := s.Update(ctx, fn); !errors.Is(err, etcdmeta.ErrTooLarge) {
			t.Errorf("%s: %v, want ErrTooLarge", name, err)
		}
	}
	n := 0
	if err := s.View(ctx, func(tx meta.Tx) error {
		return tx.Scan(sp.Prefix(nil), meta.ScanOptions{}, func(meta.Key, []byte) error { n++; return nil })
	}); err != nil || n != 0 {
		t.Fatalf("after refused transactions: %d keys, %v", n, err)
	}
	// More reads than a Txn has compares: they fold into namespace guards.
	err := s.Update(ctx, func(tx meta.Tx) error {
		for i := range 2 * etcdmeta.MaxTxnOps {
			if _, _, err := tx.Get(sp.Key(binary.BigEndian.AppendUint32(nil, uint32(i)))); err != nil {
				return err
			}
		}
		return tx.Put(sp.Key([]byte("after reads")), []byte("ok"))
	})
	if err != nil {
		t.Fatalf("update with %d reads: %v", 2*etcdmeta.MaxTxnOps, err)
	}
}

// appendEntry is an Update closure that appends id to a log (next sequence
// after the newest entry, found by a reverse scan) and, with count, bumps a
// counter: a lost update shows as an overwritten entry or a counter that
// disagrees. Without the counter only the scan's guard stands between two
// appenders that found the same newest entry.
func appendEntry(id string, count bool) func(tx meta.Tx) error {
	log, counter := meta.NewSpace("log"), meta.NewSpace("counter").Key([]byte("n"))
	return func(tx meta.Tx) error {
		var last uint64
		err := tx.Scan(log.Prefix(nil), meta.ScanOptions{Reverse: true, Limit: 1}, func(k meta.Key, _ []byte) error {
			last = binary.BigEndian.Uint64(log.Leaf(k))
			return nil
		})
		if err != nil {
			return err
		}
		if err := tx.Put(log.Key(binary.BigEndian.AppendUint64(nil, last+1)), []byte(id)); err != nil || !count {
			return err
		}
		v, _, err := tx.Get(counter)
		if err != nil {
			return err
		}
		var n uint64
		if len(v) == 8 {
			n = binary.BigEndian.Uint64(v)
		}
		return tx.Put(counter, binary.BigEndian.AppendUint64(nil, n+1))
	}
}

// readLog returns the log's ids by sequence and the counter, checking that
// the sequences run 1..n without a gap.
func readLog(t *testing.T, s meta.Store) ([]string, uint64) {
	t.Helper()
	log, counter := meta.NewSpace("log"), meta.NewSpace("counter").Key([]byte("n"))
	var (
		ids []string
		n   uint64
	)
	err := s.View(context.Background(), func(tx meta.Tx) error {
		err := tx.Scan(log.Prefix(nil), meta.ScanOptions{}, func(k meta.Key, v []byte) error {
			if seq := binary.BigEndian.Uint64(log.Leaf(k)); seq != uint64(len(ids)+1) {
				return fmt.Errorf("log entry %d after %d entries", seq, len(ids))
			}
			ids = append(ids, string(v))
			return nil
		})
		if err != nil {
			return err
		}
		v, _, err := tx.Get(counter)
		if len(v) == 8 {
			n = binary.BigEndian.Uint64(v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, n
}

// testTwoClientsLoseNoUpdate: two Stores over two clients (on different
// members) append to one log concurrently; every append lands exactly
// once.
func testTwoClientsLoseNoUpdate(t *testing.T, c *etcdtest.Cluster) {
	stores := []meta.Store{etcdmeta.New(c.Client(0), "race"), etcdmeta.New(c.Client(2), "race")}
	const workers, each = 3, 15
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*workers)
	for si, s := range stores {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if err := s.Update(context.Background(), appendEntry(fmt.Sprintf("s%d-w%d-%d", si, w, i), false)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ids, _ := readLog(t, stores[0])
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	for si := range stores {
		for w := range workers {
			for i := range each {
				if id := fmt.Sprintf("s%d-w%d-%d", si, w, i); seen[id] != 1 {
					t.Errorf("%s in the log %d times", id, seen[id])
				}
			}
		}
	}
	if want := len(stores) * workers * each; len(ids) != want {
		t.Fatalf("log of %d entries, want %d", len(ids), want)
	}
}

// TestMemberRestartMidStream: while two streams of Updates run, the
// leader is stopped and restarted. Every Update that returned nil is in the
// log once; one that failed is absent, or — only when the failure says the
// outcome is unknown — at most once; the counter matches the log.
func TestMemberRestartMidStream(t *testing.T) {
	c := etcdtest.Start(t)
	s := etcdmeta.New(c.Client(), "restart")
	type result struct {
		id  string
		err error
	}
	var (
		mu      sync.Mutex
		results []result
		okCount atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	progress := make(chan struct{}, 1)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := s.Update(ctx, appendEntry(id, true))
				cancel()
				mu.Lock()
				results = append(results, result{id, err})
				mu.Unlock()
				if err == nil {
					okCount.Add(1)
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	// waitFor waits until n more Updates succeeded.
	waitFor := func(n int64, what string) {
		t.Helper()
		target := okCount.Load() + n
		deadline := time.After(30 * time.Second)
		for okCount.Load() < target {
			select {
			case <-progress:
			case <-deadline:
				stop.Store(true)
				wg.Wait()
				t.Fatalf("%s: no progress (%d of %d updates)", what, okCount.Load(), target)
			}
		}
	}
	waitFor(20, "before the stop")
	victim := c.Leader()
	if victim < 0 {
		t.Fatal("no leader")
	}
	c.Stop(victim)
	waitFor(20, "with a member down")
	c.Restart(victim)
	waitFor(20, "after the restart")
	stop.Store(true)
	wg.Wait()

	ids, n := readLog(t, s)
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	failed, unknown := 0, 0
	for _, r := range results {
		switch {
		case r.err == nil:
			if seen[r.id] != 1 {
				t.Errorf("succeeded %s in the log %d times", r.id, seen[r.id])
			}
		case errors.Is(r.err, etcdmeta.ErrOutcomeUnknown):
			unknown++
			if seen[r.id] > 1 {
				t.Errorf("%s (%v) in the log %d times", r.id, r.err, seen[r.id])
			}
		default:
			failed++
			if seen[r.id] != 0 {
				t.Errorf("failed %s (%v) in the log %d times", r.id, r.err, seen[r.id])
			}
		}
	}
	if n != uint64(len(ids)) {
		t.Errorf("counter %d, log of %d entries", n, len(ids))
	}
	t.Logf("%d updates: %d failed, %d of unknown outcome; log of %d entries; member %d restarted",
		len(results), failed, unknown, len(ids), victim)
}

// testViewIsOneRevision: a View reads at the revision of its first read,
// even across a write committed in between.
func testViewIsOneRevision(t *testing.T, c *etcdtest.Cluster) {
	cl := c.Client()
	s := etcdmeta.New(cl, "view")
	ctx := context.Background()
	k := meta.NewSpace("t").Key([]byte("k"))
	if err := s.Update(ctx, func(tx meta.Tx) error { return tx.Put(k, []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	var first, second []byte
	err := s.View(ctx, func(tx meta.Tx) error {
		v, _, err := tx.Get(k)
		first = bytes.Clone(v)
		if err != nil {
			return err
		}
		// A write committed between two reads of one View is not seen.
		if err := s.Update(ctx, func(tx meta.Tx) error { return tx.Put(k, []byte("2")) }); err != nil {
			return err
		}
		v, _, err = tx.Get(k)
		second = bytes.Clone(v)
		return err
	})
	if err != nil || string(first) != "1" || string(second) != "1" {
		t.Fatalf("view read %q then %q (%v), want 1 twice", first, second, err)
	}
}

// testWatchResumesAfterCompaction: a watch that resumes from a revision
// compacted away (a stream lost for a while) cannot replay what it missed:
// it reports one change at the current revision, then follows new commits.
func testWatchResumesAfterCompaction(t *testing.T, c *etcdtest.Cluster) {
	cl := c.Client()
	s := etcdmeta.New(cl, "compaction")
	w := s.(meta.Watcher)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := meta.NewSpace("t").Key([]byte("k"))
	put := func(v string) {
		t.Helper()
		if err := s.Update(ctx, func(tx meta.Tx) error { return tx.Put(k, []byte(v)) }); err != nil {
			t.Fatal(err)
		}
	}
	put("1")
	old, err := w.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put("2")
	put("3")
	now, err := w.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	ch := etcdmeta.WatchFrom(ctx, s, k, old)
	wait := func() meta.Event {
		t.Helper()
		select {
		case ev := <-ch:
			return ev
		case <-time.After(20 * time.Second):
			t.Fatal("no event")
		}
		return meta.Event{}
	}
	if ev := wait(); ev.Rev < now {
		t.Fatalf("after compaction: event at %d, want >= %d", ev.Rev, now)
	}
	put("4")
	after, err := w.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ev := wait(); ev.Rev < after; ev = wait() {
	}
}

// TestWatchSurvivesMemberRestart: a watch through a client of one member
// loses its stream when that member stops; commits made meanwhile through
// another member are reported once the member is back (the watch resumes
// from the last revision it saw), and later ones too.
func TestWatchSurvivesMemberRestart(t *testing.T) {
	c := etcdtest.Start(t)
	watcher := etcdmeta.New(c.Client(1), "restart-watch").(meta.Watcher)
	writer := etcdmeta.New(c.Client(0, 2), "restart-watch")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := meta.NewSpace("t").Key([]byte("k"))
	ch, err := watcher.Watch(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	put := func(v string) int64 {
		t.Helper()
		if err := writer.Update(ctx, func(tx meta.Tx) error { return tx.Put(k, []byte(v)) }); err != nil {
			t.Fatal(err)
		}
		r, err := writer.(meta.Watcher).Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	waitRev := func(r int64, what string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					t.Fatalf("%s: watch closed", what)
				}
				if ev.Rev >= r {
					return
				}
			case <-timeout:
				t.Fatalf("%s: no event at revision %d", what, r)
			}
		}
	}
	waitRev(put("before"), "before the stop")
	c.Stop(1)
	during := put("while the member is down")
	c.Restart(1)
	waitRev(during, "commit made while the watch's member was down")
	waitRev(put("after"), "after the restart")
}

// testKeyComparedOutsideGuards: a record written straight to etcd (as the
// cluster's claims are) bumps no guard. In a transaction whose reads are
// too many for one Txn, each read is covered by its namespace's guard,
// which would miss that record's deletion between read and commit; in a
// KeyCompared namespace the read is compared key by key anyway, so the
// closure runs again and sees the record gone. Without the option the
// deletion goes unseen (the commit passes on the first run).
func testKeyComparedOutsideGuards(t *testing.T, c *etcdtest.Cluster) {
	cl := c.Client()
	ctx := context.Background()
	ext := meta.NewSpace("ext")
	for _, keyCompared := range []bool{true, false} {
		prefix := fmt.Sprintf("keycompared-%v", keyCompared)
		var o etcdmeta.Options
		if keyCompared {
			o.KeyCompared = []meta.Space{ext}
		}
		plane := etcdmeta.NewWithOptions(cl, prefix, o)
		raw := prefix + "\x00d" + string(ext.Key([]byte("x")))
		if _, err := cl.Put(ctx, raw, "held"); err != nil {
			t.Fatal(err)
		}
		many := meta.NewSpace("many")
		runs, sawGone := 0, false
		err := plane.Update(ctx, func(tx meta.Tx) error {
			runs++
			for i := range etcdmeta.MaxTxnOps + 10 {
				if _, _, err := tx.Get(many.Key(fmt.Appendf(nil, "%d", i))); err != nil {
					return err
				}
			}
			_, ok, err := tx.Get(ext.Key([]byte("x")))
			if err != nil {
				return err
			}
			sawGone = !ok
			if runs == 1 {
				if _, err := cl.Delete(ctx, raw); err != nil {
					return err
				}
			}
			return tx.Put(many.Key([]byte("w")), []byte("v"))
		})
		if err != nil {
			t.Fatal(err)
		}
		if keyCompared && (runs != 2 || !sawGone) {
			t.Errorf("KeyCompared: %d runs, last saw the record gone: %v; want 2 runs, gone", runs, sawGone)
		}
		if !keyCompared && runs != 1 {
			t.Errorf("without KeyCompared: %d runs, want 1 (the guard covers the read)", runs)
		}
	}
}
