package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"
)

var lazyOverlayBucket = []byte("lazy-overlay")

type overlayFailer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// overlayKeys returns the set of node IDs stored in the lazy-overlay bucket.
func overlayKeys(t overlayFailer, s *store.Store) map[store.ID]bool {
	t.Helper()
	keys := map[store.ID]bool{}
	err := s.DB().View(func(tx *bolt.Tx) error {
		b := tx.Bucket(lazyOverlayBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			var id store.ID
			copy(id[:], k)
			keys[id] = true
			return nil
		})
	})
	if err != nil {
		t.Fatalf("count overlay nodes: %v", err)
	}
	return keys
}

// putRawOverlayNode stores enc under key, bypassing every check.
func putRawOverlayNode(t overlayFailer, s *store.Store, key store.ID, enc []byte) {
	t.Helper()
	err := s.DB().Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(lazyOverlayBucket)
		if err != nil {
			return err
		}
		return b.Put(key[:], enc)
	})
	if err != nil {
		t.Fatalf("put raw overlay node: %v", err)
	}
}

func encodeOverlayNode(t overlayFailer, n store.OverlayNode) []byte {
	t.Helper()
	enc, err := n.Encode()
	if err != nil {
		t.Fatalf("encode %q: %v", n.Path, err)
	}
	return enc
}

// checkTreap reads the stored treap under root independently of the
// store's own walk and fails unless every node hashes to its key, paths are
// in BST order and priorities in heap order (ties: smaller path above). It
// returns the treap's height.
func checkTreap(t overlayFailer, s *store.Store, root store.ID) int {
	t.Helper()
	var height int
	err := s.DB().View(func(tx *bolt.Tx) error {
		b := tx.Bucket(lazyOverlayBucket)
		var rec func(id store.ID, lo, hi *string, parent *store.OverlayNode, depth int) error
		rec = func(id store.ID, lo, hi *string, parent *store.OverlayNode, depth int) error {
			if id.IsZero() {
				height = max(height, depth)
				return nil
			}
			if b == nil {
				return fmt.Errorf("node %s: no bucket", id.Short())
			}
			v := b.Get(id[:])
			if v == nil {
				return fmt.Errorf("node %s missing", id.Short())
			}
			if store.OverlayNodeID(v) != id {
				return fmt.Errorf("node %s: hash mismatch", id.Short())
			}
			n, err := store.DecodeOverlayNode(v)
			if err != nil {
				return err
			}
			if (lo != nil && n.Path <= *lo) || (hi != nil && n.Path >= *hi) {
				return fmt.Errorf("node %q breaks BST order", n.Path)
			}
			if parent != nil && !(parent.Priority > n.Priority || (parent.Priority == n.Priority && parent.Path < n.Path)) {
				return fmt.Errorf("node %q breaks heap order under %q", n.Path, parent.Path)
			}
			if err := rec(n.Left, lo, &n.Path, &n, depth+1); err != nil {
				return err
			}
			return rec(n.Right, &n.Path, hi, &n, depth+1)
		}
		return rec(root, nil, nil, nil, 0)
	})
	if err != nil {
		t.Fatalf("treap %s: %v", root.Short(), err)
	}
	return height
}

// checkOverlayAgrees fails unless root holds exactly model, through Walk,
// Len and Get (also for the absent paths in probe).
func checkOverlayAgrees(t overlayFailer, s *store.Store, root store.ID, model map[string][]byte, probe []string) {
	t.Helper()
	var paths []string
	err := s.OverlayWalk(root, func(p string, v []byte) error {
		want, ok := model[p]
		if !ok || !bytes.Equal(v, want) {
			return fmt.Errorf("walk: %q = %x, model has %x (present %v)", p, v, want, ok)
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		t.Fatalf("%v", err)
	}
	if want := slices.Sorted(maps.Keys(model)); !slices.Equal(paths, want) {
		t.Fatalf("walk order %q, want %q", paths, want)
	}
	n, err := s.OverlayLen(root)
	if err != nil || n != len(model) {
		t.Fatalf("len %d, %v; want %d", n, err, len(model))
	}
	for _, p := range append(slices.Collect(maps.Keys(model)), probe...) {
		v, ok, err := s.OverlayGet(root, p)
		want, wantOK := model[p]
		if err != nil || ok != wantOK || !bytes.Equal(v, want) {
			t.Fatalf("get %q = %x, %v, %v; want %x, %v", p, v, ok, err, want, wantOK)
		}
	}
}

// TestOverlayLoadRejectsContentAddressMismatch ports the seed's
// lazy_overlay_load_rejects_content_address_mismatch: a different but valid
// node stored under an overlay's ID must not load.
func TestOverlayLoadRejectsContentAddressMismatch(t *testing.T) {
	s := storetest.MustOpen(t)
	root, err := s.OverlayApply(store.ID{}, map[string][]byte{"/file": []byte("v")}, nil)
	mustOK(t, err)
	v, ok, err := s.OverlayGet(root, "/file")
	if err != nil || !ok || string(v) != "v" {
		t.Fatalf("get before tampering: %q %v %v", v, ok, err)
	}

	tampered := encodeOverlayNode(t, store.OverlayNode{Path: "/tampered", Priority: store.OverlayPriority("/tampered")})
	putRawOverlayNode(t, s, root, tampered)

	_, _, err = s.OverlayGet(root, "/file")
	wantIs(t, err, store.ErrCorrupt)
	_, _, err = s.OverlayGet(root, "/tampered")
	wantIs(t, err, store.ErrCorrupt)
	err = s.OverlayWalk(root, func(string, []byte) error { return nil })
	wantIs(t, err, store.ErrCorrupt)
	_, err = s.OverlayLen(root)
	wantIs(t, err, store.ErrCorrupt)
	err = s.OverlayNodes(root, func(store.ID) error { return nil })
	wantIs(t, err, store.ErrCorrupt)
	_, err = s.OverlayApply(root, map[string][]byte{"/other": nil}, nil)
	wantIs(t, err, store.ErrCorrupt)
	_, err = s.OverlayApply(root, nil, nil)
	wantIs(t, err, store.ErrCorrupt)

	// Undecodable bytes are corrupt too.
	putRawOverlayNode(t, s, root, []byte{1, 2, 3})
	_, _, err = s.OverlayGet(root, "/file")
	wantIs(t, err, store.ErrCorrupt)
}

// TestOverlayRejectsMisorderedNodes: nodes stored under their true address
// but linked out of treap order (not something OverlayApply writes) are
// corrupt, not silently misread.
func TestOverlayRejectsMisorderedNodes(t *testing.T) {
	s := storetest.MustOpen(t)
	a, b := "a", "b"
	if store.OverlayPriority(a) < store.OverlayPriority(b) {
		a, b = b, a
	}
	// a has the higher priority, so it must be the parent; put b on the
	// wrong side of it.
	child := encodeOverlayNode(t, store.OverlayNode{Path: b, Priority: store.OverlayPriority(b)})
	childID := store.OverlayNodeID(child)
	parent := store.OverlayNode{Path: a, Priority: store.OverlayPriority(a)}
	if b < a {
		parent.Right = childID
	} else {
		parent.Left = childID
	}
	penc := encodeOverlayNode(t, parent)
	root := store.OverlayNodeID(penc)
	putRawOverlayNode(t, s, childID, child)
	putRawOverlayNode(t, s, root, penc)

	err := s.OverlayWalk(root, func(string, []byte) error { return nil })
	wantIs(t, err, store.ErrCorrupt)
	// Get and Apply check the nodes they pass: a path on the child's side
	// that sits below the parent leads through it.
	side := "0" // sorts before "a" and "b"
	if parent.Right == childID {
		side = "z"
	}
	probe := ""
	for i := 0; probe == ""; i++ {
		if p := fmt.Sprint(side, i); store.OverlayPriority(p) < parent.Priority {
			probe = p
		}
	}
	_, _, err = s.OverlayGet(root, probe)
	wantIs(t, err, store.ErrCorrupt)
	_, err = s.OverlayApply(root, map[string][]byte{probe: nil}, nil)
	wantIs(t, err, store.ErrCorrupt)
	_, err = s.OverlayApply(root, nil, []string{probe})
	wantIs(t, err, store.ErrCorrupt)

	// A child above its parent breaks heap order.
	swapped := store.OverlayNode{Path: b, Priority: store.OverlayPriority(b)}
	achild := encodeOverlayNode(t, store.OverlayNode{Path: a, Priority: store.OverlayPriority(a)})
	if a < b {
		swapped.Left = store.OverlayNodeID(achild)
	} else {
		swapped.Right = store.OverlayNodeID(achild)
	}
	senc := encodeOverlayNode(t, swapped)
	putRawOverlayNode(t, s, store.OverlayNodeID(achild), achild)
	putRawOverlayNode(t, s, store.OverlayNodeID(senc), senc)
	_, err = s.OverlayLen(store.OverlayNodeID(senc))
	wantIs(t, err, store.ErrCorrupt)
}

func TestOverlayMissingAndEmpty(t *testing.T) {
	s := storetest.MustOpen(t)
	// The zero ID is the empty overlay, even before the bucket exists.
	n, err := s.OverlayLen(store.ID{})
	if err != nil || n != 0 {
		t.Fatalf("empty len %d %v", n, err)
	}
	_, ok, err := s.OverlayGet(store.ID{}, "x")
	if err != nil || ok {
		t.Fatalf("empty get %v %v", ok, err)
	}
	if len(overlayKeys(t, s)) != 0 {
		t.Fatal("reads created nodes")
	}
	missing := store.BlobID([]byte("no such node"))
	_, _, err = s.OverlayGet(missing, "x")
	wantIs(t, err, store.ErrNotFound)
	err = s.OverlayWalk(missing, func(string, []byte) error { return nil })
	wantIs(t, err, store.ErrNotFound)
	_, err = s.OverlayApply(missing, map[string][]byte{"x": nil}, nil)
	wantIs(t, err, store.ErrNotFound)
	_, err = s.OverlayApply(missing, nil, nil)
	wantIs(t, err, store.ErrNotFound)

	// Deleting the last path gives back the empty overlay.
	root, err := s.OverlayApply(store.ID{}, map[string][]byte{"x": nil}, nil)
	mustOK(t, err)
	v, ok, err := s.OverlayGet(root, "x")
	if err != nil || !ok || len(v) != 0 {
		t.Fatalf("get empty value: %q %v %v", v, ok, err)
	}
	root, err = s.OverlayApply(root, nil, []string{"x", "y"})
	mustOK(t, err)
	if !root.IsZero() {
		t.Fatalf("root after deleting everything is %s", root.Short())
	}
}

func TestOverlayApplyRejectsBadInput(t *testing.T) {
	s := storetest.MustOpen(t)
	long := strings.Repeat("p", store.MaxOverlayPathLen)
	root, err := s.OverlayApply(store.ID{}, map[string][]byte{long: []byte("ok"), "\xff\xfe not utf-8": nil}, nil)
	mustOK(t, err)
	for name, c := range map[string]struct {
		puts    map[string][]byte
		deletes []string
	}{
		"empty put":      {puts: map[string][]byte{"": nil}},
		"empty delete":   {deletes: []string{""}},
		"nul":            {puts: map[string][]byte{"a\x00b": nil}},
		"nul delete":     {deletes: []string{"a\x00"}},
		"too long":       {puts: map[string][]byte{long + "p": nil}},
		"put and delete": {puts: map[string][]byte{"a": nil}, deletes: []string{"a"}},
		"huge value":     {puts: map[string][]byte{"a": make([]byte, store.MaxOverlayValueLen+1)}},
	} {
		got, err := s.OverlayApply(root, c.puts, c.deletes)
		if !errors.Is(err, store.ErrInvalidName) || !got.IsZero() {
			t.Errorf("%s: got %s, %v; want ErrInvalidName", name, got.Short(), err)
		}
	}
	checkOverlayAgrees(t, s, root, map[string][]byte{long: []byte("ok"), "\xff\xfe not utf-8": {}}, nil)

	if _, err := (&store.OverlayNode{Path: "a", Priority: 7}).Encode(); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("encode with a foreign priority: %v", err)
	}
}

func TestOverlayReadOnly(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	root, err := s.OverlayApply(store.ID{}, map[string][]byte{"a": []byte("1")}, nil)
	mustOK(t, err)
	mustOK(t, s.Close())
	ro := openDir(t, dir, store.Options{ReadOnly: true})
	defer ro.Close()
	checkOverlayAgrees(t, ro, root, map[string][]byte{"a": []byte("1")}, []string{"b"})
	_, err = ro.OverlayApply(root, map[string][]byte{"b": nil}, nil)
	wantIs(t, err, store.ErrReadOnly)
}

// TestOverlayWalkStopsOnError: fn's error comes back unwrapped and ends the walk.
func TestOverlayWalkStopsOnError(t *testing.T) {
	s := storetest.MustOpen(t)
	root, err := s.OverlayApply(store.ID{}, map[string][]byte{"a": nil, "b": nil, "c": nil}, nil)
	mustOK(t, err)
	stop := errors.New("stop")
	calls := 0
	err = s.OverlayWalk(root, func(p string, _ []byte) error {
		calls++
		if p == "b" {
			return stop
		}
		return nil
	})
	if err != stop || calls != 2 {
		t.Fatalf("walk returned %v after %d calls", err, calls)
	}
	err = s.OverlayNodes(root, func(store.ID) error { return stop })
	if err != stop {
		t.Fatalf("nodes returned %v", err)
	}
}

func overlayPathGen() *rapid.Generator[string] {
	pool := []string{"a", "a/b", "a/b/c", "a/c", "b", "b/a", "z", "é", "\xff\xfe", "\x01", strings.Repeat("x", store.MaxOverlayPathLen)}
	return rapid.OneOf(
		rapid.SampledFrom(pool),
		rapid.Map(rapid.SliceOfN(rapid.ByteRange(1, 255), 1, 6), func(b []byte) string { return string(b) }),
	)
}

// TestOverlayModel applies random batches of puts and deletes and checks,
// after each, that the overlay agrees with a Go map, that the stored treap
// is well formed, that older roots are untouched, and that the root ID does
// not depend on the order in which the same contents were reached.
func TestOverlayModel(t *testing.T) {
	s := storetest.MustOpen(t)
	var allRoots []store.ID
	rapid.Check(t, func(rt *rapid.T) {
		type snapshot struct {
			root  store.ID
			model map[string][]byte
		}
		model := map[string][]byte{}
		root := store.ID{}
		history := []snapshot{{root, maps.Clone(model)}}
		var probe []string
		steps := rapid.IntRange(1, 12).Draw(rt, "steps")
		for range steps {
			puts := map[string][]byte{}
			var deletes []string
			ops := rapid.IntRange(0, 8).Draw(rt, "ops")
			for range ops {
				p := overlayPathGen().Draw(rt, "path")
				probe = append(probe, p)
				if rapid.Bool().Draw(rt, "delete") {
					if _, ok := puts[p]; !ok {
						deletes = append(deletes, p)
					}
					continue
				}
				if slices.Contains(deletes, p) {
					continue
				}
				puts[p] = rapid.SliceOfN(rapid.Byte(), 0, 6).Draw(rt, "value")
			}
			next, err := s.OverlayApply(root, puts, deletes)
			if err != nil {
				rt.Fatalf("apply: %v", err)
			}
			for _, p := range deletes {
				delete(model, p)
			}
			for p, v := range puts {
				model[p] = v
			}
			root = next
			allRoots = append(allRoots, root)
			history = append(history, snapshot{root, maps.Clone(model)})
			checkTreap(rt, s, root)
			checkOverlayAgrees(rt, s, root, model, probe)
		}

		// Persistence: every earlier root still holds its contents.
		old := rapid.SampledFrom(history).Draw(rt, "old")
		checkOverlayAgrees(rt, s, old.root, old.model, probe)

		// History independence: the same contents reached in one batch,
		// one path at a time in another order, or from a different start
		// have the same root.
		all, err := s.OverlayApply(store.ID{}, model, nil)
		if err != nil {
			rt.Fatalf("bulk apply: %v", err)
		}
		if all != root {
			rt.Fatalf("bulk root %s, incremental root %s", all.Short(), root.Short())
		}
		order := rapid.Permutation(slices.Sorted(maps.Keys(model))).Draw(rt, "order")
		one := old.root
		for p := range old.model {
			if _, ok := model[p]; !ok {
				if one, err = s.OverlayApply(one, nil, []string{p}); err != nil {
					rt.Fatalf("delete %q: %v", p, err)
				}
				allRoots = append(allRoots, one)
			}
		}
		for _, p := range order {
			if one, err = s.OverlayApply(one, map[string][]byte{p: model[p]}, nil); err != nil {
				rt.Fatalf("put %q: %v", p, err)
			}
			allRoots = append(allRoots, one)
		}
		if one != root {
			rt.Fatalf("one-at-a-time root from %s is %s, want %s", old.root.Short(), one.Short(), root.Short())
		}
		allRoots = append(allRoots, all)
	})

	// OverlayApply stores only the final shape of each batch: every stored
	// node is reachable from some root it returned.
	reached := map[store.ID]bool{}
	for _, r := range allRoots {
		mustOK(t, s.OverlayNodes(r, func(id store.ID) error { reached[id] = true; return nil }))
	}
	if stored := overlayKeys(t, s); !maps.Equal(stored, reached) {
		t.Fatalf("%d nodes stored, %d reachable from returned roots", len(stored), len(reached))
	}
}

func bigOverlay(n int) map[string][]byte {
	puts := make(map[string][]byte, n)
	for i := range n {
		puts[fmt.Sprintf("dir%03d/file%06d", i%100, i)] = bytes.Repeat([]byte{byte(i)}, 40)
	}
	return puts
}

// TestOverlayStructuralSharing: one change to a 10,000-entry overlay
// stores O(log n) nodes and leaves the original root intact.
func TestOverlayStructuralSharing(t *testing.T) {
	s := storetest.MustOpen(t)
	const n = 10000
	base, err := s.OverlayApply(store.ID{}, bigOverlay(n), nil)
	mustOK(t, err)
	if got := len(overlayKeys(t, s)); got != n {
		t.Fatalf("bulk apply of %d paths stored %d nodes", n, got)
	}
	height := checkTreap(t, s, base)
	t.Logf("height of a %d-entry treap: %d", n, height)

	newNodes := func(name string, puts map[string][]byte, deletes []string) store.ID {
		t.Helper()
		before := len(overlayKeys(t, s))
		root, err := s.OverlayApply(base, puts, deletes)
		mustOK(t, err)
		added := len(overlayKeys(t, s)) - before
		t.Logf("%s: %d new nodes", name, added)
		if added >= 64 {
			t.Fatalf("%s stored %d new nodes, want < 64", name, added)
		}
		checkTreap(t, s, root)
		return root
	}
	forkA := newNodes("put new", map[string][]byte{"dir050/new": []byte("x")}, nil)
	forkB := newNodes("overwrite", map[string][]byte{"dir007/file000007": []byte("y")}, nil)
	forkC := newNodes("delete", nil, []string{"dir042/file004242"})
	if same := newNodes("same value", map[string][]byte{"dir001/file000001": bytes.Repeat([]byte{1}, 40)}, nil); same != base {
		t.Fatal("putting an unchanged value changed the root")
	}

	for _, c := range []struct {
		root store.ID
		path string
		want string
		ok   bool
		len  int
	}{
		{base, "dir050/new", "", false, n},
		{forkA, "dir050/new", "x", true, n + 1},
		{forkB, "dir007/file000007", "y", true, n},
		{base, "dir007/file000007", strings.Repeat("\x07", 40), true, n},
		{forkC, "dir042/file004242", "", false, n - 1},
		{base, "dir042/file004242", strings.Repeat("\x92", 40), true, n},
	} {
		v, ok, err := s.OverlayGet(c.root, c.path)
		if err != nil || ok != c.ok || string(v) != c.want {
			t.Errorf("get %q in %s: %q %v %v; want %q %v", c.path, c.root.Short(), v, ok, err, c.want, c.ok)
		}
		if l, err := s.OverlayLen(c.root); err != nil || l != c.len {
			t.Errorf("len %s: %d %v; want %d", c.root.Short(), l, err, c.len)
		}
	}
}

func overlayNodeSeeds() [][]byte {
	var seeds [][]byte
	for _, n := range []store.OverlayNode{
		{Path: "a"},
		{Path: "dir/file", Value: []byte("fingerprint"), Left: store.BlobID(nil)},
		{Path: "\xff\n", Value: make([]byte, 300), Left: store.BlobID([]byte("l")), Right: store.BlobID([]byte("r"))},
	} {
		n.Priority = store.OverlayPriority(n.Path)
		enc, err := n.Encode()
		if err != nil {
			panic(err)
		}
		seeds = append(seeds, enc)
	}
	return seeds
}

func FuzzDecodeOverlayNode(f *testing.F) {
	for _, s := range overlayNodeSeeds() {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0x81, 0x00})
	f.Add([]byte{1, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := store.DecodeOverlayNode(b)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("decode error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		enc, err := n.Encode()
		if err != nil {
			t.Fatalf("decoded node does not encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("round trip changed the encoding:\n in %x\nout %x", b, enc)
		}
	})
}

// BenchmarkOverlayApply measures one put into a 100,000-entry overlay.
func BenchmarkOverlayApply(b *testing.B) {
	s := storetest.MustOpen(b)
	base, err := s.OverlayApply(store.ID{}, bigOverlay(100000), nil)
	if err != nil {
		b.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 40)
	i := 0
	for b.Loop() {
		if _, err := s.OverlayApply(base, map[string][]byte{fmt.Sprintf("new/%d", i): value}, nil); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
