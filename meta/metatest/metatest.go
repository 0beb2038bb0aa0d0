// Package metatest is the conformance suite every metadata plane
// (meta.Store) must pass: atomicity, rollback, read-your-writes, ordered
// scans both ways with limits, namespace isolation, lost-update freedom
// under concurrent Updates, consistent View snapshots, and a model-based
// (rapid) run of random transactions against a map.
package metatest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
)

// Run runs the suite; open returns a fresh, empty store for each test.
func Run(t *testing.T, open func(t *testing.T) meta.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, meta.Store)
	}{
		{"GetPutDelete", testGetPutDelete},
		{"RollbackOnError", testRollback},
		{"RollbackOnPanic", testRollbackOnPanic},
		{"ReadYourWrites", testReadYourWrites},
		{"ViewIsReadOnly", testViewReadOnly},
		{"InvalidKeys", testInvalidKeys},
		{"ScanOrderAndLimit", testScanOrder},
		{"ScanPrefixes", testScanPrefixes},
		{"ScanStopsOnError", testScanError},
		{"NamespacesAreDisjoint", testNamespaces},
		{"DeletePrefix", testDeletePrefix},
		{"CanceledContext", testCanceled},
		{"ConcurrentIncrements", testConcurrentIncrements},
		{"ViewSnapshot", testViewSnapshot},
		{"Model", testModel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
	runWatch(t, "Watch", open)
}

var ctx = context.Background()

func update(t *testing.T, s meta.Store, fn func(meta.Tx) error) {
	t.Helper()
	if err := s.Update(ctx, fn); err != nil {
		t.Fatalf("update: %v", err)
	}
}

// get reads k in its own View; found false is "", false.
func get(t *testing.T, s meta.Store, k meta.Key) (string, bool) {
	t.Helper()
	var (
		out   string
		found bool
	)
	err := s.View(ctx, func(tx meta.Tx) error {
		v, ok, err := tx.Get(k)
		out, found = string(v), ok
		return err
	})
	if err != nil {
		t.Fatalf("get %q: %v", k, err)
	}
	return out, found
}

// scan lists the leaves (and values) under prefix of sp.
func scan(t *testing.T, tx meta.Tx, sp meta.Space, leafPrefix string, o meta.ScanOptions) []string {
	t.Helper()
	var out []string
	err := tx.Scan(sp.Prefix([]byte(leafPrefix)), o, func(k meta.Key, v []byte) error {
		out = append(out, string(sp.Leaf(k))+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s %q: %v", sp, leafPrefix, err)
	}
	return out
}

func scanView(t *testing.T, s meta.Store, sp meta.Space, leafPrefix string, o meta.ScanOptions) []string {
	t.Helper()
	var out []string
	if err := s.View(ctx, func(tx meta.Tx) error { out = scan(t, tx, sp, leafPrefix, o); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func same(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func testGetPutDelete(t *testing.T, s meta.Store) {
	sp := meta.NewSpace("t")
	k := sp.Key([]byte("a"))
	if _, ok := get(t, s, k); ok {
		t.Fatal("empty store has a key")
	}
	update(t, s, func(tx meta.Tx) error { return tx.Put(k, []byte("1")) })
	if v, ok := get(t, s, k); !ok || v != "1" {
		t.Fatalf("get after put: %q %v", v, ok)
	}
	update(t, s, func(tx meta.Tx) error { return tx.Put(k, []byte("2")) })
	if v, _ := get(t, s, k); v != "2" {
		t.Fatalf("get after replace: %q", v)
	}
	empty := sp.Key([]byte("empty"))
	update(t, s, func(tx meta.Tx) error { return tx.Put(empty, nil) })
	if v, ok := get(t, s, empty); !ok || v != "" {
		t.Fatalf("empty value: %q %v, want stored and empty", v, ok)
	}
	update(t, s, func(tx meta.Tx) error {
		if err := tx.Delete(k); err != nil {
			return err
		}
		return tx.Delete(sp.Key([]byte("never")))
	})
	if _, ok := get(t, s, k); ok {
		t.Fatal("deleted key still there")
	}
	// A value put may be reused by the caller once the transaction ended.
	buf := []byte("x")
	update(t, s, func(tx meta.Tx) error { return tx.Put(k, buf) })
	buf[0] = 'y'
	if v, _ := get(t, s, k); v != "x" {
		t.Fatalf("value changed with the caller's buffer: %q", v)
	}
}

func testRollback(t *testing.T, s meta.Store) {
	sp := meta.NewSpace("t")
	update(t, s, func(tx meta.Tx) error { return tx.Put(sp.Key([]byte("keep")), []byte("old")) })
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx meta.Tx) error {
		if err := tx.Put(sp.Key([]byte("keep")), []byte("new")); err != nil {
			return err
		}
		if err := tx.Put(sp.Key([]byte("added")), []byte("v")); err != nil {
			return err
		}
		if err := tx.Put(meta.NewSpace("t", "sub").Key([]byte("x")), []byte("v")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("update returned %v, want the closure's error", err)
	}
	if v, _ := get(t, s, sp.Key([]byte("keep"))); v != "old" {
		t.Fatalf("rolled-back put visible: %q", v)
	}
	if got := scanView(t, s, sp, "", meta.ScanOptions{}); !same(got, []string{"keep=old"}) {
		t.Fatalf("after rollback: %v", got)
	}
	if _, ok := get(t, s, meta.NewSpace("t", "sub").Key([]byte("x"))); ok {
		t.Fatal("rolled-back nested put visible")
	}
}

func testRollbackOnPanic(t *testing.T, s meta.Store) {
	k := meta.NewSpace("t").Key([]byte("k"))
	// A store may let the panic through (bbolt) or turn it into an error
	// (store.Store's plane reports ErrCorrupt); it must not commit.
	func() {
		defer func() { _ = recover() }()
		err := s.Update(ctx, func(tx meta.Tx) error {
			if err := tx.Put(k, []byte("v")); err != nil {
				return err
			}
			panic("closure panics")
		})
		if err == nil {
			t.Error("a panicking update returned nil")
		}
	}()
	if _, ok := get(t, s, k); ok {
		t.Fatal("put of a panicked update visible")
	}
	// The store still works.
	update(t, s, func(tx meta.Tx) error { return tx.Put(k, []byte("v")) })
}

func testReadYourWrites(t *testing.T, s meta.Store) {
	sp := meta.NewSpace("t")
	update(t, s, func(tx meta.Tx) error {
		for _, l := range []string{"a", "b", "c"} {
			if err := tx.Put(sp.Key([]byte(l)), []byte("old")); err != nil {
				return err
			}
		}
		return nil
	})
	update(t, s, func(tx meta.Tx) error {
		if err := tx.Put(sp.Key([]byte("b")), []byte("new")); err != nil {
			return err
		}
		if err := tx.Delete(sp.Key([]byte("c"))); err != nil {
			return err
		}
		if err := tx.Put(sp.Key([]byte("d")), []byte("new")); err != nil {
			return err
		}
		if v, ok, err := tx.Get(sp.Key([]byte("b"))); err != nil || !ok || string(v) != "new" {
			t.Errorf("get own put: %q %v %v", v, ok, err)
		}
		if _, ok, err := tx.Get(sp.Key([]byte("c"))); err != nil || ok {
			t.Errorf("get own delete: %v %v", ok, err)
		}
		if got := scan(t, tx, sp, "", meta.ScanOptions{}); !same(got, []string{"a=old", "b=new", "d=new"}) {
			t.Errorf("scan in tx: %v", got)
		}
		if got := scan(t, tx, sp, "", meta.ScanOptions{Reverse: true, Limit: 2}); !same(got, []string{"d=new", "b=new"}) {
			t.Errorf("reverse scan in tx: %v", got)
		}
		return nil
	})
	if got := scanView(t, s, sp, "", meta.ScanOptions{}); !same(got, []string{"a=old", "b=new", "d=new"}) {
		t.Fatalf("after commit: %v", got)
	}
}

func testViewReadOnly(t *testing.T, s meta.Store) {
	k := meta.NewSpace("t").Key([]byte("k"))
	err := s.View(ctx, func(tx meta.Tx) error {
		for name, op := range map[string]func() error{
			"put":          func() error { return tx.Put(k, []byte("v")) },
			"delete":       func() error { return tx.Delete(k) },
			"delete prefx": func() error { return tx.DeletePrefix(meta.NewSpace("t").Prefix(nil)) },
		} {
			if err := op(); !errors.Is(err, meta.ErrReadOnly) {
				t.Errorf("%s in View: %v, want ErrReadOnly", name, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, s, k); ok {
		t.Fatal("write in View stored")
	}
}

func testInvalidKeys(t *testing.T, s meta.Store) {
	bad := map[string]meta.Key{
		"no namespace":      meta.Key("leaf"),
		"empty leaf":        meta.NewSpace("t").Key(nil),
		"empty segment":     meta.NewSpace("t", "").Key([]byte("k")),
		"no segment":        meta.NewSpace().Key([]byte("k")),
		"bad escape":        meta.Key("t%41\x00k"),
		"truncated escape":  meta.Key("t%2\x00k"),
		"oversized leaf":    meta.NewSpace("t").Key(make([]byte, meta.MaxPartSize+1)),
		"oversized segment": meta.NewSpace(string(make([]byte, meta.MaxPartSize+1))).Key([]byte("k")),
	}
	for name, k := range bad {
		update(t, s, func(tx meta.Tx) error {
			if _, _, err := tx.Get(k); !errors.Is(err, meta.ErrInvalidKey) {
				t.Errorf("%s: get: %v", name, err)
			}
			if err := tx.Put(k, []byte("v")); !errors.Is(err, meta.ErrInvalidKey) {
				t.Errorf("%s: put: %v", name, err)
			}
			if err := tx.Delete(k); !errors.Is(err, meta.ErrInvalidKey) {
				t.Errorf("%s: delete: %v", name, err)
			}
			return nil
		})
	}
	err := s.View(ctx, func(tx meta.Tx) error {
		return tx.Scan(meta.Key("t"), meta.ScanOptions{}, func(meta.Key, []byte) error { return nil })
	})
	if !errors.Is(err, meta.ErrInvalidKey) {
		t.Errorf("scan without namespace: %v", err)
	}
}

func seq(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func testScanOrder(t *testing.T, s meta.Store) {
	sp := meta.NewSpace("heads", "ws")
	// Inserted out of order, with numbers whose decimal order differs.
	order := []uint64{5, 1, 300, 2, 256, 4, 3}
	update(t, s, func(tx meta.Tx) error {
		for _, n := range order {
			if err := tx.Put(sp.Key(seq(n)), []byte(fmt.Sprint(n))); err != nil {
				return err
			}
		}
		return nil
	})
	read := func(o meta.ScanOptions) []uint64 {
		var out []uint64
		err := s.View(ctx, func(tx meta.Tx) error {
			return tx.Scan(sp.Prefix(nil), o, func(k meta.Key, v []byte) error {
				n := binary.BigEndian.Uint64(sp.Leaf(k))
				if string(v) != fmt.Sprint(n) {
					t.Errorf("key %d holds %q", n, v)
				}
				out = append(out, n)
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct {
		o    meta.ScanOptions
		want []uint64
	}{
		{meta.ScanOptions{}, []uint64{1, 2, 3, 4, 5, 256, 300}},
		{meta.ScanOptions{Limit: 3}, []uint64{1, 2, 3}},
		{meta.ScanOptions{Reverse: true}, []uint64{300, 256, 5, 4, 3, 2, 1}},
		{meta.ScanOptions{Reverse: true, Limit: 2}, []uint64{300, 256}},
		{meta.ScanOptions{Reverse: true, Limit: 100}, []uint64{300, 256, 5, 4, 3, 2, 1}},
		{meta.ScanOptions{Limit: -1}, []uint64{1, 2, 3, 4, 5, 256, 300}},
	} {
		if got := read(c.o); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("scan %+v: %v, want %v", c.o, got, c.want)
		}
	}
}

func testScanPrefixes(t *testing.T, s meta.Store) {
	sp := meta.NewSpace("children")
	leaves := []string{"a\x00x", "a\x00y", "ab\x00z", "a", "b\x00q", "\xff\xff", "\xff\xff\x00", "\xff", "\x00"}
	update(t, s, func(tx meta.Tx) error {
		for _, l := range leaves {
			if err := tx.Put(sp.Key([]byte(l)), []byte("1")); err != nil {
				return err
			}
		}
		return nil
	})
	leavesOf := func(got []string) []string {
		for i := range got {
			got[i] = got[i][:len(got[i])-2]
		}
		return got
	}
	for _, c := range []struct {
		prefix string
		rev    bool
		want   []string
	}{
		{"a\x00", false, []string{"a\x00x", "a\x00y"}},
		{"a\x00", true, []string{"a\x00y", "a\x00x"}},
		{"a", false, []string{"a", "a\x00x", "a\x00y", "ab\x00z"}},
		{"\xff", true, []string{"\xff\xff\x00", "\xff\xff", "\xff"}},
		{"\xff\xff", false, []string{"\xff\xff", "\xff\xff\x00"}},
		{"c", false, nil},
		{"c", true, nil},
		{"", true, []string{"\xff\xff\x00", "\xff\xff", "\xff", "b\x00q", "ab\x00z", "a\x00y", "a\x00x", "a", "\x00"}},
	} {
		got := leavesOf(scanView(t, s, sp, c.prefix, meta.ScanOptions{Reverse: c.rev}))
		if !same(got, c.want) {
			t.Errorf("scan %q reverse=%v: %q, want %q", c.prefix, c.rev, got, c.want)
		}
	}
}

func testScanError(t *testing.T, s meta.Store) {
	sp := meta.NewSpace("t")
	update(t, s, func(tx meta.Tx) error {
		for i := range 5 {
			if err := tx.Put(sp.Key([]byte{byte('a' + i)}), nil); err != nil {
				return err
			}
		}
		return nil
	})
	stop := errors.New("stop")
	calls := 0
	err := s.View(ctx, func(tx meta.Tx) error {
		return tx.Scan(sp.Prefix(nil), meta.ScanOptions{}, func(meta.Key, []byte) error {
			calls++
			if calls == 2 {
				return stop
			}
			return nil
		})
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Fatalf("scan returned %v after %d calls, want stop after 2", err, calls)
	}
}

func testNamespaces(t *testing.T, s meta.Store) {
	// Segments with the separator, the escape character and NUL in them
	// must not collide with nested or neighbouring namespaces.
	spaces := []meta.Space{
		meta.NewSpace("ns"), meta.NewSpace("ns", "a"), meta.NewSpace("ns", "a", "b"),
		meta.NewSpace("ns/a"), meta.NewSpace("ns", "a/b"), meta.NewSpace("ns%2Fa"),
		meta.NewSpace("ns\x00a"), meta.NewSpace("ns", "b"), meta.NewSpace("nsx"),
	}
	update(t, s, func(tx meta.Tx) error {
		for i, sp := range spaces {
			// Leaves that look like nested namespaces must stay leaves.
			for _, l := range []string{"k", "z/q", "z\x00q"} {
				if err := tx.Put(sp.Key([]byte(l)), []byte(fmt.Sprint(i))); err != nil {
					return fmt.Errorf("put %s %q: %w", sp, l, err)
				}
			}
		}
		return nil
	})
	for i, sp := range spaces {
		want := []string{fmt.Sprintf("k=%d", i), fmt.Sprintf("z\x00q=%d", i), fmt.Sprintf("z/q=%d", i)}
		if got := scanView(t, s, sp, "", meta.ScanOptions{}); !same(got, want) {
			t.Errorf("space %q: %q, want %q", sp, got, want)
		}
		segs, leaf, err := meta.ParseKey(sp.Key([]byte("k")))
		if err != nil || string(leaf) != "k" || meta.NewSpace(segs...) != sp {
			t.Errorf("space %q does not parse back: %q %q %v", sp, segs, leaf, err)
		}
	}
}

func testDeletePrefix(t *testing.T, s meta.Store) {
	heads := meta.NewSpace("heads", "ws")
	other := meta.NewSpace("heads", "ws2")
	children := meta.NewSpace("children")
	update(t, s, func(tx meta.Tx) error {
		for _, k := range []meta.Key{heads.Key(seq(1)), heads.Key(seq(2)), other.Key(seq(1)),
			children.Key([]byte("p\x00a")), children.Key([]byte("p\x00b")), children.Key([]byte("pq\x00c"))} {
			if err := tx.Put(k, []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	update(t, s, func(tx meta.Tx) error {
		if err := tx.DeletePrefix(heads.Prefix(nil)); err != nil {
			return err
		}
		if got := scan(t, tx, heads, "", meta.ScanOptions{}); len(got) != 0 {
			t.Errorf("deleted space still lists %q in its transaction", got)
		}
		return tx.DeletePrefix(children.Prefix([]byte("p\x00")))
	})
	if got := scanView(t, s, heads, "", meta.ScanOptions{}); len(got) != 0 {
		t.Errorf("deleted space lists %q", got)
	}
	if got := scanView(t, s, other, "", meta.ScanOptions{}); len(got) != 1 {
		t.Errorf("neighbouring space lists %q", got)
	}
	if got := scanView(t, s, children, "", meta.ScanOptions{}); !same(got, []string{"pq\x00c=v"}) {
		t.Errorf("children after prefix delete: %q", got)
	}
	// The namespace can be written again.
	update(t, s, func(tx meta.Tx) error { return tx.Put(heads.Key(seq(1)), []byte("again")) })
	if v, _ := get(t, s, heads.Key(seq(1))); v != "again" {
		t.Fatalf("rewrite after delete: %q", v)
	}
}

func testCanceled(t *testing.T, s meta.Store) {
	c, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	if err := s.Update(c, func(meta.Tx) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("update on canceled context: %v ran=%v", err, ran)
	}
	if err := s.View(c, func(meta.Tx) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("view on canceled context: %v ran=%v", err, ran)
	}
}

// testConcurrentIncrements: read-modify-write closures from many goroutines
// lose no increment, whether the store serializes or retries them.
func testConcurrentIncrements(t *testing.T, s meta.Store) {
	const workers, each = 8, 50
	k := meta.NewSpace("counter").Key([]byte("n"))
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := s.Update(ctx, func(tx meta.Tx) error {
					v, _, err := tx.Get(k)
					if err != nil {
						return err
					}
					var n uint64
					if len(v) == 8 {
						n = binary.BigEndian.Uint64(v)
					}
					return tx.Put(k, seq(n+1))
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v, _ := get(t, s, k)
	if n := binary.BigEndian.Uint64([]byte(v)); n != workers*each {
		t.Fatalf("counter %d, want %d", n, workers*each)
	}
}

// testViewSnapshot: a writer keeps two keys and a namespace's size equal in
// every commit; readers must never see them differ.
func testViewSnapshot(t *testing.T, s meta.Store) {
	pair := meta.NewSpace("pair")
	items := meta.NewSpace("items")
	const rounds = 200
	done := make(chan struct{})
	var wg sync.WaitGroup
	var writeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 1; i <= rounds; i++ {
			writeErr = s.Update(ctx, func(tx meta.Tx) error {
				v := seq(uint64(i))
				if err := tx.Put(pair.Key([]byte("a")), v); err != nil {
					return err
				}
				if err := tx.Put(items.Key(v), nil); err != nil {
					return err
				}
				return tx.Put(pair.Key([]byte("b")), v)
			})
			if writeErr != nil {
				return
			}
		}
	}()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			wg.Wait()
			if writeErr != nil {
				t.Fatal(writeErr)
			}
			return
		default:
		}
		err := s.View(ctx, func(tx meta.Tx) error {
			a, _, err := tx.Get(pair.Key([]byte("a")))
			if err != nil {
				return err
			}
			a = bytes.Clone(a)
			n := 0
			if err := tx.Scan(items.Prefix(nil), meta.ScanOptions{}, func(meta.Key, []byte) error { n++; return nil }); err != nil {
				return err
			}
			b, _, err := tx.Get(pair.Key([]byte("b")))
			if err != nil {
				return err
			}
			var na uint64
			if len(a) == 8 {
				na = binary.BigEndian.Uint64(a)
			}
			if !bytes.Equal(a, b) || uint64(n) != na {
				return fmt.Errorf("torn snapshot: a=%x b=%x items=%d", a, b, n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
