package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
)

// Opener opens a fresh, empty store with opt for one (sub)test.
type Opener func(t *testing.T, opt store.Options) *store.Store

// Run is the store conformance suite: the behaviour every store
// configuration (and a future remote-backed store) must show.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"BlobRoundTrip", testBlobRoundTrip},
		{"BlobBatch", testBlobBatch},
		{"TreeRoundTrip", testTreeRoundTrip},
		{"ManyRecordsAtOnce", testManyRecordsAtOnce},
		{"GenerationRoundTrip", testGenerationRoundTrip},
		{"ResolveGeneration", testResolveGeneration},
		{"Workspaces", testWorkspaces},
		{"CompareAndAppend", testCompareAndAppend},
		{"CompareAndAppendRace", testCompareAndAppendRace},
		{"Permit", testPermit},
		{"AppendManyAtomic", testAppendManyAtomic},
		{"Operations", testOperations},
		{"Meta", testMeta},
		{"GC", testGC},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
}

// must turns (value, error) into a check: must(f())(t).
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
}

func testBlobRoundTrip(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	for _, content := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("abc"), 100000)} {
		id, n, err := s.WriteBlob(bytes.NewReader(content))
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(len(content)) || id != store.BlobID(content) {
			t.Fatalf("WriteBlob = %s, %d; want %s, %d", id, n, store.BlobID(content), len(content))
		}
		if ok := must(s.HasBlob(id))(t); !ok {
			t.Fatal("HasBlob false after write")
		}
		if got := must(s.ReadBlob(id))(t); !bytes.Equal(got, content) {
			t.Fatal("ReadBlob content differs")
		}
		rc := must(s.OpenBlob(id))(t)
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("OpenBlob: %v", err)
		}
		// Writing again deduplicates.
		if id2 := must(s.WriteBlobBytes(content))(t); id2 != id {
			t.Fatal("rewrite changed id")
		}
	}
	missing := store.BlobID([]byte("never written"))
	if ok := must(s.HasBlob(missing))(t); ok {
		t.Fatal("HasBlob true for missing blob")
	}
	_, err := s.ReadBlob(missing)
	wantErr(t, err, store.ErrNotFound)
	_, err = s.OpenBlob(missing)
	wantErr(t, err, store.ErrNotFound)
}

func testBlobBatch(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	b := s.NewBlobBatch()
	var wg sync.WaitGroup
	ids := make([]store.ID, 64)
	errs := make([]error, 64)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half the contents repeat, to exercise in-batch dedup.
			ids[i], errs[i] = b.WriteBlobBytes(fmt.Appendf(nil, "blob %d", i%32))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch write %d: %v", i, err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if got := must(s.ReadBlob(id))(t); string(got) != fmt.Sprintf("blob %d", i%32) {
			t.Fatalf("blob %d content %q", i, got)
		}
	}
	// A batch is reusable, and an empty commit is a no-op.
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	// A big batch (the one-syncfs path).
	var big []store.ID
	for i := range 100 {
		big = append(big, must(b.WriteBlobBytes(fmt.Appendf(nil, "big %d", i)))(t))
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, id := range big {
		if got := must(s.ReadBlob(id))(t); string(got) != fmt.Sprintf("big %d", i) {
			t.Fatalf("big blob %d content %q", i, got)
		}
	}
	id := must(b.WriteBlobBytes([]byte("late")))(t)
	b.Abort()
	if ok := must(s.HasBlob(id))(t); ok {
		t.Fatal("aborted blob is visible")
	}
}

func testTreeRoundTrip(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	blob := must(s.WriteBlobBytes([]byte("hello")))(t)
	sub := must(s.PutTree(&store.Tree{Entries: []store.Entry{{Name: "f", Kind: store.KindFile, Size: 5, ID: blob}}}))(t)
	tr := &store.Tree{Entries: []store.Entry{
		{Name: "a", Kind: store.KindExec, Size: 5, Mtime: -3, ID: blob},
		{Name: "d", Kind: store.KindDir, ID: sub},
		{Name: "l", Kind: store.KindSymlink, Size: 5, Mtime: 1 << 60, ID: blob},
	}}
	id := must(s.PutTree(tr))(t)
	got := must(s.GetTree(id))(t)
	if fmt.Sprint(got.Entries) != fmt.Sprint(tr.Entries) {
		t.Fatalf("GetTree = %v, want %v", got.Entries, tr.Entries)
	}
	if e := must(s.GetTree(store.EmptyTreeID()))(t); len(e.Entries) != 0 {
		t.Fatal("empty tree has entries")
	}
	ids := must(s.PutTrees([]*store.Tree{{}, tr}))(t)
	if ids[0] != store.EmptyTreeID() || ids[1] != id {
		t.Fatal("PutTrees ids differ from PutTree")
	}
	_, err := s.PutTree(&store.Tree{Entries: []store.Entry{{Name: "b", Kind: store.KindFile, ID: blob}, {Name: "a", Kind: store.KindFile, ID: blob}}})
	wantErr(t, err, store.ErrCorrupt)
	_, err = s.GetTree(store.BlobID([]byte("nope")))
	wantErr(t, err, store.ErrNotFound)
}

func testGenerationRoundTrip(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	root := PutFiles(t, s, map[string]string{"a": "1"})
	g := &store.Generation{Root: root, Workspace: "main", Kind: store.GenCommit, Operation: "op1", Time: 42}
	id := must(s.PutGeneration(g))(t)
	got := must(s.GetGeneration(id))(t)
	if fmt.Sprint(*got) != fmt.Sprint(*g) {
		t.Fatalf("GetGeneration = %+v, want %+v", got, g)
	}
	child := must(s.PutGeneration(&store.Generation{Root: store.EmptyTreeID(), Parents: []store.ID{id}, Workspace: "main", Kind: store.GenCommit}))(t)
	if p := must(s.GetGeneration(child))(t).Parents; len(p) != 1 || p[0] != id {
		t.Fatal("parents lost")
	}
	_, err := s.PutGeneration(&store.Generation{Root: store.BlobID([]byte("no tree")), Workspace: "main", Kind: store.GenCommit})
	wantErr(t, err, store.ErrNotFound)
	_, err = s.PutGeneration(&store.Generation{Root: root, Parents: []store.ID{store.BlobID(nil)}, Workspace: "main", Kind: store.GenCommit})
	wantErr(t, err, store.ErrNotFound)
	_, err = s.PutGeneration(&store.Generation{Root: root, Kind: "bogus"})
	wantErr(t, err, store.ErrCorrupt)
	_, err = s.GetGeneration(root)
	wantErr(t, err, store.ErrNotFound)
}

func testResolveGeneration(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	var ids []store.ID
	for i := range 50 {
		ids = append(ids, must(s.PutGeneration(&store.Generation{Root: store.EmptyTreeID(), Workspace: "w", Kind: store.GenCommit, Time: int64(i)}))(t))
	}
	for _, id := range ids {
		full := id.String()
		for _, in := range []string{full, full[:8], full[:9], full[:33], strings.ToUpper(full[:10])} {
			if got := must(s.ResolveGeneration(in))(t); got != id {
				t.Fatalf("Resolve(%q) = %s, want %s", in, got, id)
			}
		}
	}
	full := ids[0].String()
	for _, bad := range []string{"", full[:7], "zzzzzzzz", full + "0", full[:8] + "g", "-1234567"} {
		_, err := s.ResolveGeneration(bad)
		wantErr(t, err, store.ErrInvalidID)
	}
	// A tree ID is not a generation.
	_, err := s.ResolveGeneration(store.EmptyTreeID().String())
	wantErr(t, err, store.ErrNotFound)
	_, err = s.ResolveGeneration(store.EmptyTreeID().String()[:8])
	wantErr(t, err, store.ErrNotFound)
	// Ambiguity needs two generations sharing 8+ hex characters, which
	// hashing will not produce; plant two raw keys, then remove them so
	// the store checks clean.
	a, b := ids[0], ids[0]
	a[31] ^= 1
	b[31] ^= 2
	// Generations are read on the plane (meta/doc.go), so raw keys can be
	// planted through it.
	gens := meta.NewSpace("generations")
	raw := func(fn func(tx meta.Tx) error) {
		t.Helper()
		if err := s.Meta().Update(context.Background(), fn); err != nil {
			t.Fatal(err)
		}
	}
	raw(func(tx meta.Tx) error {
		if err := tx.Put(gens.Key(a[:]), []byte("x")); err != nil {
			return err
		}
		return tx.Put(gens.Key(b[:]), []byte("x"))
	})
	_, err = s.ResolveGeneration(full[:8])
	wantErr(t, err, store.ErrAmbiguous)
	_, err = s.ResolveGeneration(full[:63])
	wantErr(t, err, store.ErrAmbiguous)
	if got := must(s.ResolveGeneration(full))(t); got != ids[0] {
		t.Fatal("full id ambiguous")
	}
	raw(func(tx meta.Tx) error {
		if err := tx.Delete(gens.Key(a[:])); err != nil {
			return err
		}
		return tx.Delete(gens.Key(b[:]))
	})
}

func testWorkspaces(t *testing.T, open Opener) {
	s := open(t, store.Options{Clock: NewClock(1000).Now})
	g := PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "1"})
	w := must(s.CreateWorkspace(store.Workspace{Name: "main"}, store.HeadEntry{Gen: g, Kind: store.GenCreate, Operation: "create-main"}))(t)
	if w.Head != g || w.Seq != 1 || w.Created != 1000 || !w.Base.IsZero() {
		t.Fatalf("created %+v", w)
	}
	_, err := s.CreateWorkspace(store.Workspace{Name: "main"}, store.HeadEntry{Gen: g, Kind: store.GenCreate})
	wantErr(t, err, store.ErrExists)
	_, err = s.CreateWorkspace(store.Workspace{Name: "orphan", Parent: "nope"}, store.HeadEntry{Gen: g, Kind: store.GenCreate})
	wantErr(t, err, store.ErrNotFound)
	_, err = s.CreateWorkspace(store.Workspace{Name: "nogen"}, store.HeadEntry{Gen: store.BlobID(nil), Kind: store.GenCreate})
	wantErr(t, err, store.ErrNotFound)
	for _, bad := range []string{"", ".x", "-x", "a/b", "a b", string(make([]byte, 129))} {
		_, err = s.CreateWorkspace(store.Workspace{Name: bad}, store.HeadEntry{Gen: g, Kind: store.GenCreate})
		wantErr(t, err, store.ErrInvalidName)
	}
	MustCreate(t, s, "b-child", "main", g, g)
	MustCreate(t, s, "a-child", "main", g, g)
	MustCreate(t, s, "main2", "", g, store.ID{})
	if kids := must(s.Children("main"))(t); fmt.Sprint(kids) != "[a-child b-child]" {
		t.Fatalf("Children = %v", kids)
	}
	if kids := must(s.Children("main2"))(t); len(kids) != 0 {
		t.Fatalf("Children(main2) = %v", kids)
	}
	var names []string
	for _, w := range must(s.ListWorkspaces())(t) {
		names = append(names, w.Name)
	}
	if fmt.Sprint(names) != "[a-child b-child main main2]" {
		t.Fatalf("ListWorkspaces = %v", names)
	}
	got := must(s.GetWorkspace("a-child"))(t)
	if got.Parent != "main" || got.Base != g || got.Head != g {
		t.Fatalf("GetWorkspace = %+v", got)
	}
	wantErr(t, s.DeleteWorkspace("main"), store.ErrHasChildren)
	if err := s.DeleteWorkspace("a-child"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetWorkspace("a-child")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.HeadLog("a-child", 0)
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, s.DeleteWorkspace("a-child"), store.ErrNotFound)
	if kids := must(s.Children("main"))(t); fmt.Sprint(kids) != "[b-child]" {
		t.Fatalf("Children after delete = %v", kids)
	}
	// A recreated name starts a fresh log.
	w = MustCreate(t, s, "a-child", "main", g, g)
	if log := must(s.HeadLog("a-child", 0))(t); len(log) != 1 || w.Seq != 1 {
		t.Fatalf("recreated log %v", log)
	}
}

func testCompareAndAppend(t *testing.T, open Opener) {
	clock := NewClock(5000)
	s := open(t, store.Options{Clock: clock.Now})
	g1 := PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "1"})
	g2 := PutGen(t, s, "main", store.GenCommit, map[string]string{"a": "2"}, g1)
	g3 := PutGen(t, s, "main", store.GenCommit, map[string]string{"a": "3"}, g2)
	MustCreate(t, s, "main", "", g1, store.ID{})
	w := must(s.CompareAndAppend("main", g1, store.HeadEntry{Gen: g2, Kind: store.GenCommit, Seq: 99}, nil))(t)
	if w.Head != g2 || w.Seq != 2 {
		t.Fatalf("after append %+v", w)
	}
	_, err := s.CompareAndAppend("main", g1, store.HeadEntry{Gen: g3, Kind: store.GenCommit}, nil)
	wantErr(t, err, store.ErrHeadMoved)
	_, err = s.CompareAndAppend("main", g2, store.HeadEntry{Gen: store.BlobID(nil), Kind: store.GenCommit}, nil)
	wantErr(t, err, store.ErrNotFound)
	_, err = s.CompareAndAppend("nope", g2, store.HeadEntry{Gen: g3, Kind: store.GenCommit}, nil)
	wantErr(t, err, store.ErrNotFound)
	clock.Set(7000)
	must(s.CompareAndAppend("main", g2, store.HeadEntry{Gen: g3, Base: g1, Kind: store.GenRebase, Time: 123}, nil))(t)
	// Undo: an old generation may become head again.
	w = must(s.CompareAndAppend("main", g3, store.HeadEntry{Gen: g2, Kind: store.GenUndo}, nil))(t)
	if w.Head != g2 || w.Seq != 4 || !w.Base.IsZero() {
		t.Fatalf("after undo %+v", w)
	}
	log := must(s.HeadLog("main", 0))(t)
	if len(log) != 4 {
		t.Fatalf("log has %d entries", len(log))
	}
	wantGens := []store.ID{g2, g3, g2, g1}
	for i, e := range log {
		if e.Seq != uint64(4-i) || e.Gen != wantGens[i] {
			t.Fatalf("log[%d] = %+v", i, e)
		}
	}
	if log[1].Time != 123 || log[1].Base != g1 || log[0].Time != 7000 || log[3].Time != 5000 {
		t.Fatalf("log times/bases wrong: %+v", log)
	}
	if l := must(s.HeadLog("main", 2))(t); len(l) != 2 || l[0].Seq != 4 {
		t.Fatalf("limited log %+v", l)
	}
}

func testCompareAndAppendRace(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	g0 := PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "0"})
	MustCreate(t, s, "main", "", g0, store.ID{})
	const n = 32
	gens := make([]store.ID, n)
	for i := range gens {
		gens[i] = PutGen(t, s, "main", store.GenCommit, map[string]string{"a": fmt.Sprint(i + 1)})
	}
	// Every goroutine races from the same head: exactly one wins. Then
	// each loser retries from the head it reads, so all eventually land
	// with contiguous sequence numbers.
	var wg sync.WaitGroup
	var mu sync.Mutex
	firstRoundWins, moved := 0, 0
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			expect := g0
			for attempt := 0; ; attempt++ {
				_, err := s.CompareAndAppend("main", expect, store.HeadEntry{Gen: gens[i], Kind: store.GenCommit}, nil)
				mu.Lock()
				switch {
				case err == nil && attempt == 0:
					firstRoundWins++
				case errors.Is(err, store.ErrHeadMoved):
					moved++
				case err != nil:
					t.Errorf("append: %v", err)
				}
				mu.Unlock()
				if err == nil || !errors.Is(err, store.ErrHeadMoved) {
					return
				}
				w, err := s.GetWorkspace("main")
				if err != nil {
					t.Error(err)
					return
				}
				expect = w.Head
			}
		}()
	}
	close(start)
	wg.Wait()
	if firstRoundWins != 1 {
		t.Fatalf("%d appends from the initial head succeeded, want 1", firstRoundWins)
	}
	log := must(s.HeadLog("main", 0))(t)
	if len(log) != n+1 {
		t.Fatalf("log has %d entries, want %d", len(log), n+1)
	}
	seen := store.IDSet{}
	for i, e := range log {
		if e.Seq != uint64(n+1-i) {
			t.Fatalf("seq not contiguous at %d: %d", i, e.Seq)
		}
		seen.Add(e.Gen)
	}
	if len(seen) != n+1 {
		t.Fatalf("some generation appended twice or lost: %d distinct", len(seen))
	}
}

func testPermit(t *testing.T, open Opener) {
	clock := NewClock(10_000)
	s := open(t, store.Options{Clock: clock.Now})
	g0 := PutGen(t, s, "ws", store.GenCreate, map[string]string{"a": "0"})
	g1 := PutGen(t, s, "ws", store.GenCapture, map[string]string{"a": "1"})
	MustCreate(t, s, "ws", "", g0, store.ID{})
	gate := func(fn func(tx meta.Tx) error) {
		t.Helper()
		if err := s.Meta().Update(context.Background(), fn); err != nil {
			t.Fatal(err)
		}
	}
	var p1 store.Permit
	gate(func(tx meta.Tx) (err error) { p1, err = store.OpenGateTx(tx, "lease-1", 20_000); return })
	appendWith := func(p store.Permit) error {
		_, err := s.CompareAndAppend("ws", g0, store.HeadEntry{Gen: g1, Kind: store.GenCapture}, &p)
		return err
	}
	unchanged := func() {
		t.Helper()
		if w := must(s.GetWorkspace("ws"))(t); w.Head != g0 || w.Seq != 1 {
			t.Fatalf("fenced append changed the workspace: %+v", w)
		}
	}
	// Expired at the store clock.
	clock.Set(20_000)
	wantErr(t, appendWith(p1), store.ErrFenced)
	unchanged()
	// Superseded by a renewal.
	clock.Set(15_000)
	var p2 store.Permit
	gate(func(tx meta.Tx) (err error) { p2, err = store.RenewGateTx(tx, "lease-1", 30_000); return })
	wantErr(t, appendWith(p1), store.ErrFenced)
	unchanged()
	// Unknown gate.
	wantErr(t, appendWith(store.Permit{Gate: "other", Epoch: 1}), store.ErrFenced)
	unchanged()
	// Closed gate.
	gate(func(tx meta.Tx) error { return store.FenceGateTx(tx, "lease-1") })
	wantErr(t, appendWith(p2), store.ErrFenced)
	unchanged()
	// Open gate: works.
	var p3 store.Permit
	gate(func(tx meta.Tx) (err error) { p3, err = store.OpenGateTx(tx, "lease-1", 30_000); return })
	if err := appendWith(p3); err != nil {
		t.Fatal(err)
	}
	if w := must(s.GetWorkspace("ws"))(t); w.Head != g1 || w.Seq != 2 {
		t.Fatalf("permitted append missing: %+v", w)
	}
}

func testAppendManyAtomic(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	g0 := PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "0"})
	g1 := PutGen(t, s, "main", store.GenLand, map[string]string{"a": "1"})
	MustCreate(t, s, "main", "", g0, store.ID{})
	MustCreate(t, s, "c1", "main", g0, g0)
	MustCreate(t, s, "c2", "main", g0, g0)
	// The last append's expectation is wrong: nothing may change.
	_, err := s.CompareAndAppendMany([]store.Append{
		{Workspace: "main", ExpectHead: g0, Entry: store.HeadEntry{Gen: g1, Kind: store.GenLand, Operation: "land-1"}},
		{Workspace: "c1", ExpectHead: g0, Entry: store.HeadEntry{Gen: g1, Base: g1, Kind: store.GenRebase, Operation: "land-1"}},
		{Workspace: "c2", ExpectHead: g1, Entry: store.HeadEntry{Gen: g1, Base: g1, Kind: store.GenRebase}},
	}, nil)
	wantErr(t, err, store.ErrHeadMoved)
	for _, name := range []string{"main", "c1", "c2"} {
		w := must(s.GetWorkspace(name))(t)
		if w.Head != g0 || w.Seq != 1 {
			t.Fatalf("%s changed by failed multi-append: %+v", name, w)
		}
		if log := must(s.HeadLog(name, 0))(t); len(log) != 1 {
			t.Fatalf("%s log grew", name)
		}
	}
	if _, ok := must3(s.FindOperation("main", "land-1"))(t); ok {
		t.Fatal("operation of failed append recorded")
	}
	ws, err := s.CompareAndAppendMany([]store.Append{
		{Workspace: "main", ExpectHead: g0, Entry: store.HeadEntry{Gen: g1, Kind: store.GenLand, Operation: "land-1"}},
		{Workspace: "c1", ExpectHead: g0, Entry: store.HeadEntry{Gen: g1, Base: g1, Kind: store.GenRebase, Operation: "land-1"}},
		{Workspace: "c2", ExpectHead: g0, Entry: store.HeadEntry{Gen: g1, Base: g1, Kind: store.GenRebase}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		if w.Head != g1 || w.Seq != 2 || (i > 0 && w.Base != g1) {
			t.Fatalf("multi-append result %d: %+v", i, w)
		}
	}
}

func must3[A, B any](a A, b B, err error) func(t *testing.T) (A, B) {
	return func(t *testing.T) (A, B) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
}

func testOperations(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	g0 := PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "0"})
	g1 := PutGen(t, s, "main", store.GenCommit, map[string]string{"a": "1"})
	MustCreate(t, s, "main", "", g0, store.ID{})
	must(s.CompareAndAppend("main", g0, store.HeadEntry{Gen: g1, Kind: store.GenCommit, Operation: "op-7"}, nil))(t)
	e, ok := must3(s.FindOperation("main", "op-7"))(t)
	if !ok || e.Gen != g1 || e.Seq != 2 || e.Operation != "op-7" {
		t.Fatalf("FindOperation = %+v, %v", e, ok)
	}
	if _, ok := must3(s.FindOperation("main", "op-8"))(t); ok {
		t.Fatal("found unknown operation")
	}
	if _, ok := must3(s.FindOperation("nope", "op-7"))(t); ok {
		t.Fatal("found operation of unknown workspace")
	}
	// A retried operation cannot append twice.
	_, err := s.CompareAndAppend("main", g1, store.HeadEntry{Gen: g0, Kind: store.GenCommit, Operation: "op-7"}, nil)
	wantErr(t, err, store.ErrExists)
	if w := must(s.GetWorkspace("main"))(t); w.Seq != 2 {
		t.Fatal("duplicate operation appended")
	}
}

func testMeta(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	if err := s.PutMeta("conflicts", "ws1", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMeta("conflicts", "ws2", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMeta("mounts", "ws1", []byte("m")); err != nil {
		t.Fatal(err)
	}
	if v := must(s.GetMeta("conflicts", "ws1"))(t); string(v) != "v1" {
		t.Fatalf("GetMeta = %q", v)
	}
	if m := must(s.ListMeta("conflicts"))(t); len(m) != 2 || string(m["ws2"]) != "v2" {
		t.Fatalf("ListMeta = %q", m)
	}
	if err := s.DeleteMeta("conflicts", "ws1"); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetMeta("conflicts", "ws1")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.GetMeta("nothing", "x")
	wantErr(t, err, store.ErrNotFound)
	if m := must(s.ListMeta("nothing"))(t); len(m) != 0 {
		t.Fatal("ListMeta of empty namespace not empty")
	}
	wantErr(t, s.PutMeta("", "k", nil), store.ErrInvalidName)
	wantErr(t, s.PutMeta("ns", "", nil), store.ErrInvalidName)
}

func testGC(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	g0 := PutGen(t, s, "main", store.GenCreate, map[string]string{"keep": "kept content", "d/sub": "nested kept"})
	MustCreate(t, s, "main", "", g0, store.ID{})
	// Garbage: a generation nobody's log reaches, with its own blobs.
	garbageGen := PutGen(t, s, "main", store.GenCommit, map[string]string{"junk": "garbage content!", "keep": "kept content"})
	orphanBlob := must(s.WriteBlobBytes([]byte("orphan")))(t)
	extraBlob := must(s.WriteBlobBytes([]byte("journal-held")))(t)
	freed, err := s.GC(store.IDSet{extraBlob: {}})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len("garbage content!") + len("orphan")); freed != want {
		t.Fatalf("GC freed %d bytes, want %d", freed, want)
	}
	if ok := must(s.HasGeneration(garbageGen))(t); ok {
		t.Fatal("unreachable generation survived")
	}
	for _, c := range []string{"garbage content!", "orphan"} {
		if ok := must(s.HasBlob(store.BlobID([]byte(c))))(t); ok {
			t.Fatalf("unreachable blob %q survived", c)
		}
	}
	for _, c := range []string{"kept content", "nested kept", "journal-held"} {
		if ok := must(s.HasBlob(store.BlobID([]byte(c))))(t); !ok {
			t.Fatalf("reachable blob %q swept", c)
		}
	}
	if ok := must(s.HasBlob(orphanBlob))(t); ok {
		t.Fatal("orphan blob survived")
	}
	g := must(s.GetGeneration(g0))(t)
	if _, err := s.GetTree(g.Root); err != nil {
		t.Fatalf("reachable tree swept: %v", err)
	}
	// Extra roots keep generations and trees too.
	extraGen := PutGen(t, s, "x", store.GenCommit, map[string]string{"e": "extra gen"})
	must(s.GC(store.IDSet{extraGen: {}}))(t)
	if ok := must(s.HasGeneration(extraGen))(t); !ok {
		t.Fatal("extra-root generation swept")
	}
	if got := must(s.ReadBlob(store.BlobID([]byte("extra gen"))))(t); string(got) != "extra gen" {
		t.Fatal("extra-root generation's blob lost")
	}
	// A second GC with the same roots frees nothing.
	if freed := must(s.GC(store.IDSet{extraGen: {}, extraBlob: {}}))(t); freed != 0 {
		t.Fatalf("idempotent GC freed %d", freed)
	}
}

// manyTrees returns n distinct trees of about entries entries each, whose
// entries all name blob, and the tree of n directories naming them.
func manyTrees(blob store.ID, n, entries int, salt string) ([]*store.Tree, *store.Tree) {
	var ts []*store.Tree
	root := &store.Tree{}
	for i := range n {
		tr := &store.Tree{}
		for j := range entries {
			tr.Entries = append(tr.Entries, store.Entry{Name: fmt.Sprintf("%s-%04d-%04d", salt, i, j), Kind: store.KindFile, Size: 5, ID: blob})
		}
		ts = append(ts, tr)
		root.Entries = append(root.Entries, store.Entry{Name: fmt.Sprintf("d%04d", i), Kind: store.KindDir})
	}
	return ts, root
}

// testManyRecordsAtOnce: the calls that write many immutable records at
// once (an import's PutTrees, a capture's ResolveMany and the
// PublishGeneration carrying it) work whatever the plane's transaction
// limits (etcd: 128 operations, 1.5 MiB): hundreds of trees, and more
// bytes of them than one etcd request holds. Everything is readable after.
func testManyRecordsAtOnce(t *testing.T, open Opener) {
	s := open(t, store.Options{})
	blob := must(s.WriteBlobBytes([]byte("hello")))(t)
	check := func(ts []*store.Tree, ids []store.ID) {
		t.Helper()
		for i, id := range ids {
			if got := must(s.GetTree(id))(t); len(got.Entries) != len(ts[i].Entries) {
				t.Fatalf("tree %d: %d entries, want %d", i, len(got.Entries), len(ts[i].Entries))
			}
		}
	}
	// Many small trees: more than 128 writes.
	small, root := manyTrees(blob, 300, 2, "small")
	ids := must(s.PutTrees(small))(t)
	check(small, ids)
	for i := range root.Entries {
		root.Entries[i].ID = ids[i]
	}
	// Fewer, big trees: more than 1.5 MiB in all.
	big, _ := manyTrees(blob, 40, 1000, "big")
	check(big, must(s.PutTrees(big))(t))

	// A capture's preservation published with its generation.
	g0 := must(s.PutGeneration(&store.Generation{Root: store.EmptyTreeID(), Workspace: "w", Kind: store.GenCreate}))(t)
	w := must(s.CreateWorkspace(store.Workspace{Name: "w"}, store.HeadEntry{Gen: g0, Kind: store.GenCreate, Operation: "create"}))(t)
	more, _ := manyTrees(blob, 200, 50, "more")
	pr := must(s.PrepareResolve(append(more, root), nil))(t)
	tids := pr.TreeIDs()
	g := &store.Generation{Root: tids[len(tids)-1], Parents: []store.ID{g0}, Workspace: "w", Kind: store.GenCapture}
	gid, w2, err := s.PublishGeneration(g, "w", w.Head, store.HeadEntry{Kind: store.GenCapture, Operation: "capture-1"}, nil, pr)
	if err != nil {
		t.Fatalf("publish with %d trees: %v", len(more)+1, err)
	}
	if w2.Head != gid {
		t.Fatalf("head %s, want the published %s", w2.Head.Short(), gid.Short())
	}
	check(more, tids[:len(more)])
	if got := must(s.GetTree(must(s.GetGeneration(gid))(t).Root))(t); len(got.Entries) != len(small) {
		t.Fatalf("published root has %d entries, want %d", len(got.Entries), len(small))
	}

	// A lazy overlay changed at hundreds of paths at once (an in-place
	// materialization's shadow).
	puts := map[string][]byte{}
	for i := range 400 {
		puts[fmt.Sprintf("dir/file-%04d", i)] = []byte(fmt.Sprint(i))
	}
	ov := must(s.OverlayApply(store.ID{}, puts, nil))(t)
	ov = must(s.OverlayApply(ov, map[string][]byte{"dir/new": []byte("n")}, []string{"dir/file-0007"}))(t)
	for _, p := range []string{"dir/file-0000", "dir/file-0399", "dir/new"} {
		if _, ok, err := s.OverlayGet(ov, p); err != nil || !ok {
			t.Fatalf("overlay %s: found %v, %v", p, ok, err)
		}
	}
	if _, ok, err := s.OverlayGet(ov, "dir/file-0007"); err != nil || ok {
		t.Fatalf("overlay deleted path: found %v, %v", ok, err)
	}
}
