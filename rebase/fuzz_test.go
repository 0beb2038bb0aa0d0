package rebase

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/acyclicfs/acyclicfs/rebase/rebasetest"
	"github.com/acyclicfs/acyclicfs/store"
)

// treesFromBytes decodes fuzz input into three small trees over propPaths:
// per tree a count byte, then (path, kind and mode, content) byte triples. Tree 1
// and 2 start from tree 0 so that they share most of it.
func treesFromBytes(data []byte) [3]Fs {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	kinds := []store.Kind{store.KindFile, store.KindExec, store.KindSymlink, store.KindFile}
	// The kind byte's higher values pick a mode (0: the kind's default).
	modes := []uint32{0, 0o600, 0o4755, 0o640, 0o700, 0o000}
	var out [3]Fs
	for i := range out {
		fs := Fs{}
		if i > 0 {
			fs = clone2(out[0])
		}
		for n := int(next() % 8); n > 0; n-- {
			p := propPaths[int(next())%len(propPaths)]
			k := next()
			if k >= 0xf0 {
				delete(fs, p)
				next()
				continue
			}
			f := F{Kind: kinds[int(k)%len(kinds)], Data: propContents[int(next())%len(propContents)]}
			if m := modes[int(k)/len(kinds)%len(modes)]; m != 0 && f.Kind != store.KindSymlink {
				e := store.Entry{Kind: f.Kind}
				e.SetPerm(m)
				f.Kind, f.Mode = e.Kind, e.Perm()
				if !e.HasPerm() {
					f.Mode = 0
				}
			}
			fs[p] = f
		}
		out[i] = normalize(fs)
	}
	return out
}

func FuzzMerge3(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 2, 1, 1, 3, 1, 0, 1, 1, 0, 2, 2, 0, 2, 1, 0, 3})
	f.Add([]byte{4, 5, 0, 0, 3, 2, 0, 5, 1, 1, 0, 2, 0xf0, 0, 1, 5, 2, 1})
	f.Add([]byte{7, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0, 5, 0, 0, 6, 0, 0, 2, 4, 0xff, 0, 2, 3, 5, 0, 3, 2, 0xff, 0, 3, 1, 1})
	// Modes: a chmod on one side, a content change on the other, and two
	// different chmods (a mode conflict).
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0, 2, 0, 4, 0, 1, 8, 0, 2, 0, 0, 1, 12, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := treesFromBytes(data)
		mem := rebasetest.NewMem()
		var ids [3]store.ID
		for i := range fs {
			var err error
			if ids[i], err = mem.Build(fs[i]); err != nil {
				t.Fatalf("build: %v", err)
			}
		}
		for _, opt := range []Options{{}, {Markers: true}, {Prefer: PreferOurs}} {
			r1, err1 := Merge3(mem, mem, ids[0], ids[1], ids[2], opt)
			r2, err2 := Merge3(mem, mem, ids[0], ids[1], ids[2], opt)
			if err1 != nil || err2 != nil {
				t.Fatalf("Merge3: %v %v", err1, err2)
			}
			if !reflect.DeepEqual(r1, r2) {
				t.Fatalf("not deterministic: %+v vs %+v", r1, r2)
			}
			if r1.Conflicts != nil && (!r1.Tree.IsZero() || opt.Markers || opt.Prefer != PreferNone) {
				t.Fatalf("unexpected conflicts: %+v", r1)
			}
			if r1.Conflicts == nil {
				if _, err := mem.Flatten(r1.Tree); err != nil {
					t.Fatalf("merged tree unreadable: %v", err)
				}
			}
		}
		if _, err := Diff(mem, ids[1], ids[2]); err != nil {
			t.Fatalf("Diff: %v", err)
		}
	})
}

func FuzzMergeText(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nB\nc\n"), []byte("a\nb\nC\n"))
	f.Add([]byte("a\r\nb"), []byte("a\nb"), []byte("x\r\nb\n"))
	f.Add([]byte(""), []byte("x"), []byte("y"))
	f.Add([]byte("1\n2\n3\n4\n"), []byte("1\nX\n3\n4\n"), []byte("1\n2\nY\n4\n"))
	f.Fuzz(func(t *testing.T, base, ours, theirs []byte) {
		m1, c1 := MergeText(base, ours, theirs)
		m2, c2 := MergeText(base, ours, theirs)
		if c1 != c2 || !bytes.Equal(m1, m2) {
			t.Fatal("not deterministic")
		}
		if m, c := MergeText(base, ours, base); !c || !bytes.Equal(m, ours) {
			t.Fatalf("MergeText(b,x,b) = %q, %v", m, c)
		}
		if m, c := MergeText(base, base, theirs); !c || !bytes.Equal(m, theirs) {
			t.Fatalf("MergeText(b,b,y) = %q, %v", m, c)
		}
		if m, c := MergeText(base, ours, ours); !c || !bytes.Equal(m, ours) {
			t.Fatalf("MergeText(b,x,x) = %q, %v", m, c)
		}
		s, sc := MergeText(base, theirs, ours)
		if sc != c1 || (c1 && !bytes.Equal(s, m1)) {
			t.Fatalf("swap: %q,%v vs %q,%v", m1, c1, s, sc)
		}
		if d := UnifiedDiff("a/f", "b/f", base, ours, 2); d != "" && !IsBinary(base) && !IsBinary(ours) {
			if got := applyUnified(t, base, d); !bytes.Equal(got, ours) {
				t.Fatalf("diff does not apply:\n%s", d)
			}
		}
	})
}
