package rebase

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/rebase/rebasetest"
	"github.com/acyclicfs/acyclicfs/store"
	"pgregory.net/rapid"
)

// The path universe of random trees: small, with file/dir clashes ("d/e"
// vs "d/e/z", "e" vs "e/q") so that type conflicts occur.
var propPaths = []string{"a", "b", "d/x", "d/y", "d/e", "d/e/z", "e", "e/q", "f/g/h"}

var propContents = []string{
	"1\n2\n3\n4\n5\n", "X\n2\n3\n4\n5\n", "1\n2\n3\n4\nY\n", "1\n2\nZ\n4\n5\n",
	"1\n2\n3\n4\n5", "\x00bin", "\x00bin2", "", "q\r\n",
}

func genFile(t *rapid.T, label string) F {
	k := rapid.SampledFrom([]store.Kind{store.KindFile, store.KindFile, store.KindExec, store.KindSymlink,
		store.KindFIFO, store.KindSocket, store.KindCharDev, store.KindBlockDev}).Draw(t, label+"-kind")
	if k.IsSpecial() {
		// Devices with two numbers, so that sides can differ in the
		// number alone.
		var rdev uint64
		if k.IsDevice() {
			rdev = rapid.SampledFrom([]uint64{1<<8 | 3, 1<<8 | 5}).Draw(t, label+"-rdev")
		}
		return withMode(t, label, F{Kind: k, Rdev: rdev})
	}
	return withMode(t, label, F{Kind: k, Data: rapid.SampledFrom(propContents).Draw(t, label+"-data")})
}

// withMode gives f one of a few permission bits (0: its kind's default),
// normalised as a tree keeps them: a regular file's kind follows its exec
// bits, a mode equal to the default is none, a symlink has none.
func withMode(t *rapid.T, label string, f F) F {
	m := rapid.SampledFrom([]uint32{0, 0, 0o600, 0o4755, 0o640, 0o700}).Draw(t, label+"-mode")
	if m == 0 || f.Kind == store.KindSymlink {
		return f
	}
	e := store.Entry{Kind: f.Kind}
	e.SetPerm(m)
	f.Kind, f.Mode = e.Kind, 0
	if e.HasPerm() {
		f.Mode = e.Perm()
	}
	return f
}

// normalize drops paths under a path that is a file, so fs is a valid tree.
func normalize(fs Fs) Fs {
	for _, p := range fs.Paths() {
		for i := range p {
			if p[i] == '/' {
				if _, ok := fs[p[:i]]; ok {
					delete(fs, p)
					break
				}
			}
		}
	}
	return fs
}

func genTree(t *rapid.T, label string) Fs {
	fs := Fs{}
	for _, p := range propPaths {
		if rapid.IntRange(0, 2).Draw(t, label+p) > 0 {
			fs[p] = genFile(t, label+p)
		}
	}
	return normalize(fs)
}

// genEdit derives a tree from base by deleting, replacing and adding paths;
// only paths accepted by allow are touched.
func genEdit(t *rapid.T, label string, base Fs, allow func(string) bool) Fs {
	fs := clone2(base)
	for _, p := range propPaths {
		if !allow(p) {
			continue
		}
		switch rapid.IntRange(0, 4).Draw(t, label+p) {
		case 0:
			delete(fs, p)
		case 1:
			fs[p] = genFile(t, label+p)
		}
	}
	// Keep the other side's paths intact: normalise only within allow.
	for _, p := range fs.Paths() {
		for i := range p {
			if p[i] == '/' {
				if _, ok := fs[p[:i]]; ok && allow(p) {
					delete(fs, p)
					break
				} else if ok {
					delete(fs, p[:i])
				}
			}
		}
	}
	return fs
}

func all(string) bool { return true }

func build(t *rapid.T, mem *rebasetest.Mem, fs Fs) store.ID {
	id, err := mem.Build(fs)
	if err != nil {
		t.Fatalf("build %v: %v", fs, err)
	}
	return id
}

func flatten(t *rapid.T, mem *rebasetest.Mem, id store.ID) Fs {
	fs, err := mem.Flatten(id)
	if err != nil {
		t.Fatalf("flatten: %v", err)
	}
	return content(fs)
}

func swapSides(cs []Conflict) []Conflict {
	if cs == nil {
		return nil
	}
	out := make([]Conflict, len(cs))
	for i, c := range cs {
		c.Ours, c.Theirs = c.Theirs, c.Ours
		out[i] = c
	}
	return out
}

func TestMerge3Properties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mem := rebasetest.NewMem()
		bf := genTree(t, "b")
		xf := genEdit(t, "x", bf, all)
		yf := genEdit(t, "y", bf, all)
		b, x, y := build(t, mem, bf), build(t, mem, xf), build(t, mem, yf)

		if r, err := Merge3(mem, mem, b, x, b, Options{}); err != nil || r.Tree != x || r.Conflicts != nil {
			t.Fatalf("Merge3(b,x,b) = %+v, %v", r, err)
		}
		if r, err := Merge3(mem, mem, b, b, y, Options{}); err != nil || r.Tree != y || r.Conflicts != nil {
			t.Fatalf("Merge3(b,b,y) = %+v, %v", r, err)
		}
		// The same identity through a real walk: a copy of b that differs
		// only in mtimes has other tree IDs but no changes.
		touched := Fs{}
		for p, f := range bf {
			f.Mtime = 7
			touched[p] = f
		}
		if r, err := Merge3(mem, mem, b, x, build(t, mem, touched), Options{}); err != nil || r.Conflicts != nil {
			t.Fatalf("Merge3(b,x,touched b) = %+v, %v", r, err)
		} else if got := flatten(t, mem, r.Tree); !reflect.DeepEqual(got, content(xf)) {
			t.Fatalf("Merge3(b,x,touched b):\ngot  %v\nwant %v", got, xf)
		}

		r1, err := Merge3(mem, mem, b, x, y, Options{})
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Merge3(mem, mem, b, y, x, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r1.Tree != r2.Tree || r1.Changed != r2.Changed || !reflect.DeepEqual(swapSides(r1.Conflicts), r2.Conflicts) {
			t.Fatalf("swap: %+v vs %+v", r1, r2)
		}
		if again, _ := Merge3(mem, mem, b, x, y, Options{}); !reflect.DeepEqual(again, r1) {
			t.Fatal("not deterministic")
		}
		if !sort.SliceIsSorted(r1.Conflicts, func(i, j int) bool { return r1.Conflicts[i].Path < r1.Conflicts[j].Path }) {
			t.Fatal("conflicts not sorted")
		}
		if r1.Conflicts == nil {
			got := flatten(t, mem, r1.Tree)
			// A path added by one side is never lost by a clean merge.
			for _, side := range []Fs{xf, yf} {
				for p, f := range side {
					if _, inBase := bf[p]; !inBase {
						if g, ok := got[p]; !ok || g.Kind != f.Kind || g.Data != f.Data || g.Rdev != f.Rdev || g.Mode != f.Mode {
							t.Fatalf("added %s = %+v lost: got %+v", p, f, g)
						}
					}
				}
			}
		}

		po, err := Merge3(mem, mem, b, x, y, Options{Prefer: PreferOurs})
		if err != nil {
			t.Fatal(err)
		}
		pt, err := Merge3(mem, mem, b, y, x, Options{Prefer: PreferTheirs})
		if err != nil {
			t.Fatal(err)
		}
		if po.Conflicts != nil || po.Tree != pt.Tree || len(po.Resolved) != len(r1.Conflicts) {
			t.Fatalf("prefer: %+v vs %+v (plain %+v)", po, pt, r1)
		}
		mk, err := Merge3(mem, mem, b, x, y, Options{Markers: true})
		if err != nil || mk.Conflicts != nil || len(mk.Resolved) != len(r1.Conflicts) {
			t.Fatalf("markers: %+v %v", mk, err)
		}
		if r1.Conflicts == nil && (mk.Tree != r1.Tree || po.Tree != r1.Tree) {
			t.Fatal("options changed a clean merge")
		}
		// KeepConflicts writes what PreferOurs writes (ours stands in at
		// every conflict) and reports the same conflicts as unresolved.
		kc, err := Merge3(mem, mem, b, x, y, Options{KeepConflicts: true})
		if err != nil {
			t.Fatal(err)
		}
		if kc.Tree != po.Tree || !reflect.DeepEqual(kc.Conflicts, r1.Conflicts) || kc.Resolved != nil {
			t.Fatalf("keep conflicts: %+v, want tree %v and conflicts %+v", kc, po.Tree, r1.Conflicts)
		}
	})
}

func TestMerge3DisjointProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mem := rebasetest.NewMem()
		bf := genTree(t, "b")
		top := func(p string) string { return strings.SplitN(p, "/", 2)[0] }
		mine := rapid.SliceOfDistinct(rapid.SampledFrom([]string{"a", "b", "d", "e", "f"}), func(s string) string { return s }).Draw(t, "mine")
		inMine := func(p string) bool {
			for _, m := range mine {
				if top(p) == m {
					return true
				}
			}
			return false
		}
		xf := genEdit(t, "x", bf, inMine)
		yf := genEdit(t, "y", bf, func(p string) bool { return !inMine(p) })
		want := Fs{}
		for p, f := range xf {
			if inMine(p) {
				want[p] = f
			}
		}
		for p, f := range yf {
			if !inMine(p) {
				want[p] = f
			}
		}
		r, err := Merge3(mem, mem, build(t, mem, bf), build(t, mem, xf), build(t, mem, yf), Options{})
		if err != nil || r.Conflicts != nil {
			t.Fatalf("disjoint merge: %+v %v", r, err)
		}
		if got := flatten(t, mem, r.Tree); !reflect.DeepEqual(got, content(want)) {
			t.Fatalf("got  %v\nwant %v", got, want)
		}
	})
}

func TestDiffProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mem := rebasetest.NewMem()
		af := genTree(t, "a")
		bf := genEdit(t, "b", af, all)
		a, b := build(t, mem, af), build(t, mem, bf)
		ab, err := Diff(mem, a, b)
		if err != nil {
			t.Fatal(err)
		}
		ba, err := Diff(mem, b, a)
		if err != nil {
			t.Fatal(err)
		}
		if len(ab) != len(ba) {
			t.Fatalf("asymmetric: %v vs %v", ab, ba)
		}
		inverse := map[ChangeKind]ChangeKind{Added: Deleted, Deleted: Added, Modified: Modified, TypeChg: TypeChg}
		for i := range ab {
			if ab[i].Path != ba[i].Path || inverse[ab[i].Kind] != ba[i].Kind {
				t.Fatalf("not inverse at %d: %+v vs %+v", i, ab[i], ba[i])
			}
		}
		// Applying the file-level changes to a's map gives b's.
		got := clone2(af)
		for _, c := range ab {
			switch c.Kind {
			case Deleted:
				delete(got, c.Path)
			case Added, Modified:
				got[c.Path] = bf[c.Path]
			case TypeChg:
				delete(got, c.Path)
				if c.New.Kind != store.KindDir {
					got[c.Path] = bf[c.Path]
				}
			}
		}
		if !reflect.DeepEqual(got, bf) {
			t.Fatalf("apply diff:\ngot  %v\nwant %v\n%v", got, bf, ab)
		}
	})
}
