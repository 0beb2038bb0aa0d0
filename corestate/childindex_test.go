package corestate

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

type context struct {
	Parent string `json:"parent,omitempty"`
	State  string `json:"state"`
}

// register creates a context record and links it under its parent in one
// transaction, as the seed's WorkspaceContextStore compare_and_swap does.
func register(t *testing.T, s *Store, ix ChildIndex, id string, c context) {
	t.Helper()
	writes, err := ix.Move(id, "", c.Parent)
	if err != nil {
		t.Fatal(err)
	}
	writes = append(writes, Write{Family: "contexts", Key: id, Value: c})
	if err := s.Commit("register-"+id, writes); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
}

func newIndex(t *testing.T, s *Store) ChildIndex {
	t.Helper()
	ix, err := NewChildIndex(s, "contexts")
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestChildIndexTracksMoves(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		ix := newIndex(t, s)
		register(t, s, ix, "p", context{State: "active"})
		register(t, s, ix, "q", context{State: "active"})
		register(t, s, ix, "c2", context{Parent: "p", State: "active"})
		register(t, s, ix, "c1", context{Parent: "p", State: "active"})
		if got, err := ix.Children("p", 10); err != nil || !reflect.DeepEqual(got, []string{"c1", "c2"}) {
			t.Fatalf("Children(p) = %q, %v", got, err)
		}
		if ws, err := ix.Move("c1", "p", "p"); err != nil || len(ws) != 0 {
			t.Fatalf("same-parent move = %v, %v", ws, err)
		}
		for _, c := range []string{"c1", "c2"} {
			ws, err := ix.Move(c, "p", "q")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Commit("move-"+c, ws); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := ix.Children("p", 10); err != nil || len(got) != 0 {
			t.Fatalf("Children(p) after moves = %q, %v", got, err)
		}
		// An emptied parent leaves no index records behind.
		if keys, _ := s.Keys("contexts-children"); !reflect.DeepEqual(keys, []string{"q"}) {
			t.Fatalf("bucket keys = %q", keys)
		}
		if _, err := ix.Children("q", 1); !errors.Is(err, ErrTraversalLimit) {
			t.Fatalf("Children over limit = %v", err)
		}
	})
}

// Seed: context_discard_reads_only_the_bounded_subtree.
func TestSubtreeReadsOnlyTheBoundedSubtree(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		ix := newIndex(t, s)
		register(t, s, ix, "parent", context{State: "active"})
		register(t, s, ix, "child", context{Parent: "parent", State: "active"})
		register(t, s, ix, "unrelated", context{State: "active"})
		b.rawPut(t, s, "contexts", "unrelated", "not-json")

		sub, err := ix.Subtree("child", 1)
		if err != nil || !reflect.DeepEqual(sub.Nodes, []string{"child"}) {
			t.Fatalf("Subtree(child, 1) = %q, %v", sub.Nodes, err)
		}
		// Discard the subtree, fenced on the index records the walk read.
		writes := append([]Write(nil), sub.Fences...)
		for _, id := range sub.Nodes {
			var c context
			rev, _, err := s.Load("contexts", id, &c)
			if err != nil {
				t.Fatal(err)
			}
			c.State = "discarded"
			writes = append(writes, Write{Family: "contexts", Key: id, ExpectRev: rev, Value: c})
		}
		if err := s.Commit("discard", writes); err != nil {
			t.Fatal(err)
		}
		var c context
		if _, _, err := s.Load("contexts", "child", &c); err != nil || c.State != "discarded" {
			t.Fatalf("child = %+v, %v", c, err)
		}
		if sub, err := ix.Subtree("parent", 2); err != nil || !reflect.DeepEqual(sub.Nodes, []string{"parent", "child"}) {
			t.Fatalf("Subtree(parent, 2) = %q, %v", sub.Nodes, err)
		}
		if _, err := ix.Subtree("parent", 1); !errors.Is(err, ErrTraversalLimit) {
			t.Fatalf("Subtree(parent, 1) = %v", err)
		}
		b.rawDelete(t, s, "contexts", "unrelated")
	})
}

func TestSubtreeFencesCatchConcurrentGrowth(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		ix := newIndex(t, s)
		register(t, s, ix, "root", context{State: "active"})
		register(t, s, ix, "kid", context{Parent: "root", State: "active"})
		sub, err := ix.Subtree("root", 10)
		if err != nil {
			t.Fatal(err)
		}
		register(t, s, ix, "grandkid", context{Parent: "kid", State: "active"})
		writes := append(sub.Fences, Write{Family: "contexts", Key: "root", ExpectRev: 1, Value: context{State: "discarded"}})
		if err := s.Commit("discard", writes); !errors.Is(err, ErrConflict) {
			t.Fatalf("commit over a grown subtree = %v, want ErrConflict", err)
		}
	})
}

// Seed: context_discard_checks_child_count_before_reading_bucket.
func TestSubtreeChecksChildCountBeforeReadingBucket(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		ix := newIndex(t, s)
		register(t, s, ix, "parent", context{State: "active"})
		register(t, s, ix, "child", context{Parent: "parent", State: "active"})
		mustCAS(t, s, "contexts-child-counts", "child", 0, 10_000)
		b.rawPut(t, s, "contexts-children", "child", "not-json")
		if _, err := ix.Subtree("child", 1); !errors.Is(err, ErrTraversalLimit) {
			t.Fatalf("Subtree = %v, want ErrTraversalLimit before the bucket is read", err)
		}
		b.rawDelete(t, s, "contexts-children", "child")
	})
}

// Seed: context_discard_bounds_bucket_bytes_before_deserialization.
func TestSubtreeBoundsBucketBytesBeforeDecoding(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		ix := newIndex(t, s)
		register(t, s, ix, "parent", context{State: "active"})
		register(t, s, ix, "child", context{Parent: "parent", State: "active"})
		mustCAS(t, s, "contexts-child-counts", "child", 0, 1) // understated
		b.rawPut(t, s, "contexts-children", "child", strings.Repeat(" ", 1_000_000))
		if _, err := ix.Subtree("child", 2); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Subtree = %v, want ErrTooLarge", err)
		}
		b.rawDelete(t, s, "contexts-children", "child")
	})
}

func TestSubtreeRejectsInconsistentIndex(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		ix := newIndex(t, s)
		register(t, s, ix, "a", context{State: "active"})
		register(t, s, ix, "b", context{Parent: "a", State: "active"})
		// Count disagrees with the bucket.
		mustCAS(t, s, "contexts-child-counts", "a", 1, 2)
		if _, err := ix.Subtree("a", 10); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("count mismatch = %v, want ErrCorrupt", err)
		}
		// A cycle: b lists a.
		mustCAS(t, s, "contexts-child-counts", "a", 2, 1)
		ws, err := ix.Move("a", "", "b")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Commit("cycle", ws); err != nil {
			t.Fatal(err)
		}
		if _, err := ix.Subtree("a", 10); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cycle = %v, want ErrCorrupt", err)
		}
	})
}

// Seed: prepared_context_transaction_rolls_back_child_index_with_record.
func TestPreparedTransactionRollsBackChildIndexWithRecord(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	ix := newIndex(t, s)
	register(t, s, ix, "parent", context{State: "active"})
	ws, err := ix.Move("child", "", "parent")
	if err != nil {
		t.Fatal(err)
	}
	ws = append(ws, Write{Family: "contexts", Key: "child", Value: context{Parent: "parent", State: "active"}})
	crash := crashAt(t, "tx.after-apply-2")
	if err := s.Commit("register-child", ws); !errors.Is(err, crash) {
		t.Fatalf("Commit = %v", err)
	}
	SetFailpointForTest(nil)
	reopened := openStore(t, dir)
	if _, found, err := reopened.Load("contexts", "child", nil); err != nil || found {
		t.Fatalf("child after rollback: found %v, %v", found, err)
	}
	if got, err := newIndex(t, reopened).Children("parent", 10); err != nil || len(got) != 0 {
		t.Fatalf("parent's children after rollback = %q, %v", got, err)
	}
}

func TestAssertFencesWithoutWriting(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		mustCAS(t, s, "a", "read", 0, 1)
		if err := s.Commit("ok", []Write{{Family: "a", Key: "read", ExpectRev: 1, Assert: true}, {Family: "a", Key: "w", Value: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, rev, _ := loadInt(t, s, "a", "read"); rev != 1 {
			t.Fatalf("assert wrote: rev %d", rev)
		}
		err := s.Commit("stale", []Write{{Family: "a", Key: "read", ExpectRev: 0, Assert: true}, {Family: "a", Key: "w", ExpectRev: 1, Value: 2}})
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("stale assert = %v", err)
		}
		if v, _, _ := loadInt(t, s, "a", "w"); v != 1 {
			t.Fatalf("write applied despite failed assert: %d", v)
		}
		// An assert merged with a write to the same record at the same revision.
		if err := s.Commit("merged", []Write{{Family: "a", Key: "w", ExpectRev: 1, Assert: true}, {Family: "a", Key: "w", ExpectRev: 1, Value: 3}}); err != nil {
			t.Fatal(err)
		}
		if v, rev, _ := loadInt(t, s, "a", "w"); v != 3 || rev != 2 {
			t.Fatalf("merged = %d rev %d", v, rev)
		}
		if err := s.Commit("bad", []Write{{Family: "a", Key: "w", ExpectRev: 1, Assert: true}, {Family: "a", Key: "w", ExpectRev: 2, Value: 4}}); !errors.Is(err, ErrInvalidTransaction) {
			t.Fatalf("contradictory expectations = %v", err)
		}
		if err := s.Commit("only", []Write{{Family: "a", Key: "w", ExpectRev: 2, Assert: true}}); err != nil {
			t.Fatalf("assert-only commit: %v", err)
		}
	})
}

func TestTypedFamily(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		f, err := NewFamily[context](s, "contexts")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewFamily[int](s, "Bad"); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("bad family name = %v", err)
		}
		if _, err := f.CompareAndSwap("x", 0, context{State: "a"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit("t", []Write{f.Put("y", 0, context{State: "b"}), f.Remove("x", 1)}); err != nil {
			t.Fatal(err)
		}
		v, rev, found, err := f.Load("y")
		if err != nil || !found || rev != 1 || v.State != "b" {
			t.Fatalf("Load(y) = %+v %d %v %v", v, rev, found, err)
		}
		if keys, err := f.Keys(); err != nil || !reflect.DeepEqual(keys, []string{"y"}) {
			t.Fatalf("Keys = %q %v", keys, err)
		}
		if _, _, _, err := f.LoadBounded("y", 4); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("LoadBounded = %v", err)
		}
		if err := f.CompareAndDelete("y", 1); err != nil || f.Name() != "contexts" {
			t.Fatal(err)
		}
	})
}
