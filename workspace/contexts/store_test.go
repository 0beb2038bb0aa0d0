package contexts

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/acyclicfs/acyclicfs/corestate"
	"github.com/acyclicfs/acyclicfs/meta"

	"github.com/acyclicfs/acyclicfs/workspace/errs"
)

func openContextStore(t *testing.T) (*Store, *corestate.Store) {
	t.Helper()
	cs, err := corestate.Open(t.TempDir(), corestate.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(cs)
	if err != nil {
		t.Fatal(err)
	}
	return s, cs
}

func testContext(name, parent string, state State) Context {
	return Context{Name: name, Parent: parent, State: state, Roots: []Root{{Workspace: "durable"}}, Created: 1}
}

func mustCAS(t *testing.T, s *Store, rev uint64, c Context) {
	t.Helper()
	ok, err := s.CompareAndSwap(rev, c)
	if err != nil || !ok {
		t.Fatalf("CompareAndSwap(%s, %d) = %v, %v", c.Name, rev, ok, err)
	}
}

// recordFile is the current file of a corestate record (see corestate/doc.go).
func recordFile(cs *corestate.Store, family, key string) string {
	return filepath.Join(cs.Root(), family, hex.EncodeToString([]byte(key))+".json")
}

func TestContextsAreDurableAndDiscoverable(t *testing.T) {
	s, cs := openContextStore(t)
	c := testContext("ctx", "", Active)
	mustCAS(t, s, 0, c)
	reopened, err := corestate.Open(cs.Root(), corestate.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := NewStore(reopened)
	got, err := s2.List()
	if err != nil {
		t.Fatal(err)
	}
	c.Version, c.ID, c.Revision = contextVersion, ID("ctx"), 1
	if !reflect.DeepEqual(got, []Context{c}) {
		t.Fatalf("List = %+v, want %+v", got, []Context{c})
	}
	if ok, err := s2.CompareAndSwap(0, c); err != nil || ok {
		t.Fatalf("second create = %v, %v; want false", ok, err)
	}
}

func TestContextCompareAndSwapManyRequiresExactSet(t *testing.T) {
	s, _ := openContextStore(t)
	mustCAS(t, s, 0, testContext("a", "", Active))
	mustCAS(t, s, 0, testContext("b", "", Active))
	frozenA := testContext("a", "", Frozen)
	if ok, err := s.CompareAndSwapMany(map[string]uint64{"a": 1}, []Context{frozenA}, true); err != nil || ok {
		t.Fatalf("exact set without b = %v, %v; want false", ok, err)
	}
	if ok, err := s.CompareAndSwapMany(map[string]uint64{"a": 1, "b": 2}, []Context{frozenA}, true); err != nil || ok {
		t.Fatalf("stale revision of b = %v, %v; want false", ok, err)
	}
	frozenB := testContext("b", "", Frozen)
	if ok, err := s.CompareAndSwapMany(map[string]uint64{"a": 1, "b": 1}, []Context{frozenA, frozenB}, true); err != nil || !ok {
		t.Fatalf("exact set = %v, %v; want true", ok, err)
	}
	for _, n := range []string{"a", "b"} {
		c, _, err := s.Load(n)
		if err != nil || c.State != Frozen || c.Revision != 2 {
			t.Fatalf("%s = %+v, %v", n, c, err)
		}
	}
	if ok, _ := s.CompareAndSwapMany(map[string]uint64{"a": 2}, []Context{testContext("c", "", Active)}, false); ok {
		t.Fatal("a replacement not named in expected was accepted")
	}
}

func TestContextParentIsFixedAndMustExist(t *testing.T) {
	s, _ := openContextStore(t)
	if _, err := s.CompareAndSwap(0, testContext("child", "nobody", Active)); !errors.Is(err, ErrUnknown) {
		t.Fatalf("child of a missing parent: %v", err)
	}
	mustCAS(t, s, 0, testContext("p", "", Active))
	mustCAS(t, s, 0, testContext("child", "p", Active))
	if _, err := s.CompareAndSwap(1, testContext("child", "", Active)); !errors.Is(err, errs.ErrInvalidInput) {
		t.Fatalf("reparenting: %v", err)
	}
	if kids, err := s.Children("p", 10); err != nil || !reflect.DeepEqual(kids, []string{"child"}) {
		t.Fatalf("Children = %v, %v", kids, err)
	}
}

func TestContextDiscardReadsOnlyTheBoundedSubtree(t *testing.T) {
	s, cs := openContextStore(t)
	for _, c := range []Context{testContext("parent", "", Active), testContext("child", "parent", Active), testContext("unrelated", "", Active)} {
		mustCAS(t, s, 0, c)
	}
	if err := os.WriteFile(recordFile(cs, familyContexts, Key("unrelated")), []byte("not-json"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := s.DiscardSubtree("parent", "child", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "child" || got[0].State != Discarded {
		t.Fatalf("discarded = %+v", got)
	}
	c, found, err := s.Load("child")
	if err != nil || !found || c.State != Discarded {
		t.Fatalf("child after discard = %+v %v %v (kept, marked discarded)", c, found, err)
	}
	if p, _, _ := s.Load("parent"); p.State != Active {
		t.Fatalf("parent state = %s", p.State)
	}
}

func TestContextDiscardWholeSubtreeAndLimit(t *testing.T) {
	s, _ := openContextStore(t)
	for _, c := range []Context{testContext("r", "", Active), testContext("a", "r", Active), testContext("b", "r", Frozen), testContext("a1", "a", Active)} {
		mustCAS(t, s, 0, c)
	}
	if _, err := s.DiscardSubtree("", "r", 3); !errors.Is(err, ErrTraversalLimit) {
		t.Fatalf("discard of 4 with bound 3: %v", err)
	}
	for _, n := range []string{"r", "a", "b", "a1"} {
		if c, _, _ := s.Load(n); c.State == Discarded {
			t.Fatalf("%s discarded by a refused discard", n)
		}
	}
	if _, err := s.DiscardSubtree("x", "r", 10); !errors.Is(err, ErrIncompatibleState) {
		t.Fatalf("wrong parent: %v", err)
	}
	got, err := s.DiscardSubtree("", "r", 4)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	if len(names) != 4 || names[0] != "r" {
		t.Fatalf("discarded %v", names)
	}
	if again, err := s.DiscardSubtree("", "r", 4); err != nil || len(again) != 4 {
		t.Fatalf("second discard = %v, %v (idempotent)", again, err)
	}
}

func TestContextDiscardChecksChildCountBeforeReadingBucket(t *testing.T) {
	s, cs := openContextStore(t)
	mustCAS(t, s, 0, testContext("parent", "", Active))
	mustCAS(t, s, 0, testContext("child", "parent", Active))
	if _, err := cs.CompareAndSwap(contextIndexName+"-child-counts", Key("child"), 0, 10000); err != nil {
		t.Fatal(err)
	}
	bucket := recordFile(cs, contextIndexName+"-children", Key("child"))
	if err := os.MkdirAll(filepath.Dir(bucket), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bucket, []byte("not-json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DiscardSubtree("parent", "child", 1); !errors.Is(err, ErrTraversalLimit) {
		t.Fatalf("want ErrTraversalLimit before the bucket is read, got %v", err)
	}
}

func TestContextDiscardBoundsBucketBytesBeforeDecoding(t *testing.T) {
	s, cs := openContextStore(t)
	mustCAS(t, s, 0, testContext("parent", "", Active))
	mustCAS(t, s, 0, testContext("child", "parent", Active))
	if _, err := cs.CompareAndSwap(contextIndexName+"-child-counts", Key("child"), 0, 1); err != nil {
		t.Fatal(err)
	}
	bucket := recordFile(cs, contextIndexName+"-children", Key("child"))
	if err := os.MkdirAll(filepath.Dir(bucket), 0o700); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = ' '
	}
	if err := os.WriteFile(bucket, big, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.DiscardSubtree("parent", "child", 2)
	if !errors.Is(err, corestate.ErrTooLarge) {
		t.Fatalf("want ErrTooLarge for an oversized bucket, got %v", err)
	}
	if c, _, _ := s.Load("child"); c.State != Active {
		t.Fatal("child changed by a failed discard")
	}
}

func TestContextDiscardNeverRebuildsAMissingIndex(t *testing.T) {
	_, cs := openContextStore(t)
	legacy, _ := corestate.NewFamily[Context](cs, familyContexts)
	for _, c := range []Context{testContext("parent", "", Active), testContext("child", "parent", Active), testContext("unrelated", "", Active)} {
		c.Version, c.ID = contextVersion, ID(c.Name)
		if _, err := legacy.CompareAndSwap(Key(c.Name), 0, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(recordFile(cs, familyContexts, Key("unrelated")), []byte("not-json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ := NewStore(cs)
	if _, err := s.DiscardSubtree("parent", "child", 1); !errors.Is(err, ErrIncompatibleState) {
		t.Fatalf("want ErrIncompatibleState, got %v", err)
	}
	if _, ready, err := s.indexReady(); err != nil || ready {
		t.Fatalf("index marker after discard: ready=%v err=%v (must not be rebuilt)", ready, err)
	}
	if keys, _ := cs.Keys(contextIndexName + "-children"); len(keys) != 0 {
		t.Fatalf("index buckets written by a discard: %q", keys)
	}
}

func TestContextIndexIsRebuiltByList(t *testing.T) {
	_, cs := openContextStore(t)
	legacy, _ := corestate.NewFamily[Context](cs, familyContexts)
	for _, c := range []Context{testContext("parent", "", Active), testContext("child", "parent", Active)} {
		c.Version, c.ID = contextVersion, ID(c.Name)
		if _, err := legacy.CompareAndSwap(Key(c.Name), 0, c); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := NewStore(cs)
	if all, err := s.List(); err != nil || len(all) != 2 {
		t.Fatalf("List = %v, %v", all, err)
	}
	got, err := s.DiscardSubtree("", "parent", 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("discard after rebuild = %v, %v", got, err)
	}
}

// crashAt makes the next corestate write stop at step as a crash would.
func crashAt(t *testing.T, step string) {
	t.Helper()
	restore := corestate.SetFailpointForTest(func(got string) error {
		if got == step {
			return errors.New("crash")
		}
		return nil
	})
	t.Cleanup(restore)
}

func TestPreparedContextTransactionRollsBackRecordAndChildIndex(t *testing.T) {
	s, cs := openContextStore(t)
	mustCAS(t, s, 0, testContext("parent", "", Active))
	crashAt(t, "tx.after-apply-3") // record and index partly applied
	if _, err := s.CompareAndSwap(0, testContext("child", "parent", Active)); err == nil {
		t.Fatal("crashed transaction reported success")
	}
	corestate.SetFailpointForTest(nil)
	if pending, _ := cs.PendingTransactions(); len(pending) != 1 {
		t.Fatalf("pending transactions = %q, want the crashed one", pending)
	}
	if _, found, err := s.Load("child"); err != nil || found {
		t.Fatalf("child after rollback: found=%v err=%v", found, err)
	}
	if kids, err := s.Children("parent", 10); err != nil || len(kids) != 0 {
		t.Fatalf("parent's children after rollback = %v, %v", kids, err)
	}
	if keys, _ := cs.Keys(contextIndexName + "-children"); len(keys) != 0 {
		t.Fatalf("index bucket survived rollback: %q", keys)
	}
}

func TestCommittedContextTransactionRollsForward(t *testing.T) {
	s, cs := openContextStore(t)
	mustCAS(t, s, 0, testContext("parent", "", Active))
	crashAt(t, "tx.after-commit")
	_, _ = s.CompareAndSwap(0, testContext("child", "parent", Active))
	corestate.SetFailpointForTest(nil)
	reopened, err := corestate.Open(cs.Root(), corestate.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := NewStore(reopened)
	if c, found, err := s2.Load("child"); err != nil || !found || c.Parent != "parent" {
		t.Fatalf("child after roll-forward = %+v %v %v", c, found, err)
	}
	if kids, err := s2.Children("parent", 10); err != nil || !reflect.DeepEqual(kids, []string{"child"}) {
		t.Fatalf("children after roll-forward = %v, %v", kids, err)
	}
}

// FuzzContextRecord feeds arbitrary record values to the decoder and the
// validation every load runs: no panic, and an accepted record survives a
// round trip unchanged.
func FuzzContextRecord(f *testing.F) {
	good := testContext("ctx", "parent", Frozen)
	good.Version, good.ID = contextVersion, ID("ctx")
	b, _ := json.Marshal(good)
	f.Add(b)
	f.Add([]byte(`{"version":1,"id":"00","name":"x","state":"active","roots":null}`))
	f.Add([]byte(`{"version":1,"name":".bad","state":"gone"}`))
	f.Add([]byte(`not-json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Context
		if json.Unmarshal(data, &c) != nil || c.check() != nil {
			return
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var back Context
		if err := json.Unmarshal(again, &back); err != nil || back.check() != nil || !reflect.DeepEqual(normalize(back), normalize(c)) {
			t.Fatalf("round trip changed %+v into %+v (%v)", c, back, err)
		}
	})
}

// normalize makes nil and empty root lists compare equal.
func normalize(c Context) Context {
	if len(c.Roots) == 0 {
		c.Roots = nil
	}
	return c
}

func TestContextCheck(t *testing.T) {
	s, cs := openContextStore(t)
	mustCAS(t, s, 0, testContext("p", "", Active))
	mustCAS(t, s, 0, testContext("c", "p", Active))
	if probs, err := s.Check(); err != nil || len(probs) != 0 {
		t.Fatalf("clean store: %q, %v", probs, err)
	}
	// Drop the child from the index behind the store's back.
	ws, err := s.index.Move(Key("c"), Key("p"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Commit("break-index", ws); err != nil {
		t.Fatal(err)
	}
	probs, err := s.Check()
	if err != nil || len(probs) != 1 {
		t.Fatalf("broken index: %q, %v", probs, err)
	}
}

// boundedPlane is the in-memory plane with etcd-like transaction limits.
type boundedPlane struct {
	*meta.Memory
	limits meta.TxLimits
}

func (b boundedPlane) TxLimits() meta.TxLimits { return b.limits }

// On a bounded plane (a store on etcd) a discard whose subtree fits the
// caller's bound but not one plane transaction is refused whole as a
// traversal limit, not half-applied, and a smaller one goes through.
func TestContextDiscardOnABoundedPlane(t *testing.T) {
	cs, err := corestate.OpenPlane(boundedPlane{meta.NewMemory(), meta.TxLimits{MaxWrites: 8, MaxBytes: 1 << 20}}, corestate.PlaneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(cs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Context{testContext("r", "", Active), testContext("a", "r", Active), testContext("b", "r", Active), testContext("a1", "a", Active)} {
		mustCAS(t, s, 0, c)
	}
	// r's subtree: 1 ready fence + 3 records per context = 13 > 8.
	if _, err := s.DiscardSubtree("", "r", 10); !errors.Is(err, ErrTraversalLimit) || !errors.Is(err, errs.ErrInvalidInput) {
		t.Fatalf("discard over the plane's limit = %v, want ErrTraversalLimit", err)
	}
	for _, n := range []string{"r", "a", "b", "a1"} {
		if c, _, _ := s.Load(n); c.State == Discarded {
			t.Fatalf("%s discarded by a refused discard", n)
		}
	}
	// a's subtree: 1 + 3*2 = 7 records fits.
	if got, err := s.DiscardSubtree("r", "a", 10); err != nil || len(got) != 2 {
		t.Fatalf("discard of a = %v, %v", got, err)
	}
}
