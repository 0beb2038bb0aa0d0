package store_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

// TestGenerationWithoutLinksEncodesAsBefore: a generation written before
// link groups existed decodes with none and re-encodes byte for byte, so
// its id is unchanged; one with groups carries them as "links".
func TestGenerationWithoutLinksEncodesAsBefore(t *testing.T) {
	root := store.EmptyTreeID()
	old := fmt.Sprintf(`{"root":"%s","workspace":"main","kind":"capture","operation":"op","time":7}`, root)
	g, err := store.DecodeGeneration([]byte(old))
	if err != nil {
		t.Fatalf("decode a generation of an older version: %v", err)
	}
	if g.Links != nil {
		t.Fatalf("links of an old generation: %v", g.Links)
	}
	enc, err := g.Encode()
	if err != nil || string(enc) != old {
		t.Fatalf("re-encoded %q (%v), want %q", enc, err, old)
	}
	g.Links = [][]string{{"a", "d/b"}, {"x", "y", "z/w"}}
	enc, err = g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := old[:len(old)-1] + `,"links":[["a","d/b"],["x","y","z/w"]]}`
	if string(enc) != want {
		t.Fatalf("encoded %q, want %q", enc, want)
	}
	back, err := store.DecodeGeneration(enc)
	if err != nil || !store.EqualLinks(back.Links, g.Links) {
		t.Fatalf("round trip: %v %v", back, err)
	}
}

func TestBadLinkGroupsRefused(t *testing.T) {
	for _, links := range [][][]string{
		{{"a"}},                      // one path
		{{"b", "a"}},                 // unsorted
		{{"a", "a"}},                 // duplicate
		{{"c", "d"}, {"a", "b"}},     // groups unsorted
		{{"a", "b"}, {"b", "c"}},     // a path in two groups
		{{"a", "../b"}},              // bad path
		{{"", "b"}},                  // empty path
		{{"a/", "b"}},                // empty name
		{{"a", "b\x00c"}},            // NUL
		{{"a", "b"}, {"a/x", "a/y"}}, // fine
	} {
		g := &store.Generation{Root: store.EmptyTreeID(), Workspace: "w", Kind: store.GenCommit, Links: links}
		_, err := g.Encode()
		fine := len(links) == 2 && links[1][0] == "a/x"
		if fine != (err == nil) || err != nil && !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("links %q: %v", links, err)
		}
	}
}

func genGroups(rt *rapid.T, label string) [][]string {
	paths := []string{"a", "b", "c", "d/e", "d/f", "g/h/i"}
	return rapid.SliceOfN(rapid.SliceOfN(rapid.SampledFrom(paths), 0, 4), 0, 4).Draw(rt, label)
}

// TestMergeLinksProperties: normalised groups are valid; a merge where
// one side kept base's groups takes the other side's; a merge of equal
// sides keeps them; the result is always valid and only holds pairs
// linked on some side.
func TestMergeLinksProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		b := store.NormalizeLinks(genGroups(rt, "base"))
		o := store.NormalizeLinks(genGroups(rt, "ours"))
		th := store.NormalizeLinks(genGroups(rt, "theirs"))
		for _, g := range [][][]string{b, o, th} {
			if err := store.ValidLinks(g); err != nil {
				rt.Fatalf("normalised groups invalid: %v", err)
			}
		}
		if got := store.MergeLinks(b, b, th); !store.EqualLinks(got, th) {
			rt.Fatalf("ours = base: got %v, want theirs %v", got, th)
		}
		if got := store.MergeLinks(b, o, b); !store.EqualLinks(got, o) {
			rt.Fatalf("theirs = base: got %v, want ours %v", got, o)
		}
		if got := store.MergeLinks(b, o, o); !store.EqualLinks(got, o) {
			rt.Fatalf("equal sides: got %v, want %v", got, o)
		}
		m := store.MergeLinks(b, o, th)
		if err := store.ValidLinks(m); err != nil {
			rt.Fatalf("merge invalid: %v", err)
		}
		linked := func(gs [][]string, p, q string) bool {
			return slices.ContainsFunc(gs, func(g []string) bool { return slices.Contains(g, p) && slices.Contains(g, q) })
		}
		for _, g := range m {
			for _, p := range g {
				for _, q := range g {
					if !linked(o, p, q) && !linked(th, p, q) {
						rt.Fatalf("merge links %s and %s, which no side links: %v", p, q, m)
					}
				}
			}
		}
		// Ours wins: every group of ours that theirs did not drop (a base
		// group theirs lacks) is kept whole.
		has := func(gs [][]string, g []string) bool {
			return slices.ContainsFunc(gs, func(x []string) bool { return slices.Equal(x, g) })
		}
		for _, g := range o {
			if has(b, g) && !has(th, g) {
				continue
			}
			if !has(m, g) {
				rt.Fatalf("ours' group %v lost: %v", g, m)
			}
		}
	})
}

// TestFitLinks: a group keeps the paths that are not directories, split
// by kind and content (a device by its number).
func TestFitLinks(t *testing.T) {
	x, y := store.BlobID([]byte("x")), store.BlobID([]byte("y"))
	ents := map[string]store.Entry{
		"a": {Kind: store.KindFile, ID: x}, "b": {Kind: store.KindFile, ID: x}, "c": {Kind: store.KindFile, ID: y},
		"d": {Kind: store.KindFile, ID: y}, "e": {Kind: store.KindSymlink, ID: x}, "f": {Kind: store.KindExec, ID: x},
	}
	ents["s1"], ents["s2"] = store.Entry{Kind: store.KindSymlink, ID: x}, store.Entry{Kind: store.KindSymlink, ID: x}
	ents["p1"], ents["p2"] = store.SpecialEntry("p1", store.KindFIFO, 0, 1), store.SpecialEntry("p2", store.KindFIFO, 0, 2)
	ents["c1"], ents["c2"] = store.SpecialEntry("c1", store.KindCharDev, 0x103, 1), store.SpecialEntry("c2", store.KindCharDev, 0x105, 1)
	ents["dir"], ents["dir2"] = store.Entry{Kind: store.KindDir, ID: x}, store.Entry{Kind: store.KindDir, ID: x}
	got, err := store.FitLinks([][]string{{"a", "b", "c", "d", "e", "f", "gone", "s1", "s2", "p1", "p2", "c1", "c2", "dir", "dir2"}}, func(p string) (store.Entry, bool, error) {
		e, ok := ents[p]
		return e, ok, nil
	})
	if err != nil || !store.EqualLinks(got, [][]string{{"a", "b"}, {"c", "d"}, {"e", "s1", "s2"}, {"p1", "p2"}}) {
		t.Fatalf("FitLinks: %v %v", got, err)
	}
}

// TestCheckFindsBadLinkGroups: fsck reports a link group whose paths do not
// hold one file's content, and accepts one that does.
func TestCheckFindsBadLinkGroups(t *testing.T) {
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	root := storetest.PutFiles(t, s, map[string]string{"a": "same", "d/b": "same", "c": "other"})
	good, err := s.PutGeneration(&store.Generation{Root: root, Workspace: "w", Kind: store.GenCreate, Links: [][]string{{"a", "d/b"}}})
	mustOK(t, err)
	storetest.MustCreate(t, s, "w", "", good, store.ID{})
	ps, err := s.Check()
	mustOK(t, err)
	if len(ps) != 0 {
		t.Fatalf("a good group: %v", ps)
	}
	bad, err := s.PutGeneration(&store.Generation{Root: root, Parents: []store.ID{good}, Workspace: "w", Kind: store.GenCommit, Links: [][]string{{"a", "c", "d/b"}}})
	mustOK(t, err)
	_, err = s.CompareAndAppend("w", good, store.HeadEntry{Gen: bad, Kind: store.GenCommit}, nil)
	mustOK(t, err)
	ps, err = s.Check()
	mustOK(t, err)
	if len(ps) != 1 || !hasProblem(ps, store.ProblemBadLinks, bad.String()) {
		t.Fatalf("want the bad group, got %v", ps)
	}
	if _, err := s.GC(nil); err != nil {
		t.Fatalf("gc refused a store with a bad link group: %v", err)
	}
}
