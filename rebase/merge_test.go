package rebase

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/rebase/rebasetest"
	"github.com/acyclicfs/acyclicfs/store"
)

var (
	_ TreeReader = (*rebasetest.Mem)(nil)
	_ TreeWriter = (*rebasetest.Mem)(nil)
)

type F = rebasetest.File
type Fs = rebasetest.Files

func file(s string) F { return F{Kind: store.KindFile, Data: s} }
func exec(s string) F { return F{Kind: store.KindExec, Data: s} }
func link(s string) F { return F{Kind: store.KindSymlink, Data: s} }

// content strips mtimes so results can be compared by what matters.
func content(fs Fs) Fs {
	out := Fs{}
	for p, f := range fs {
		f.Mtime = 0
		out[p] = f
	}
	return out
}

type mergeCase struct {
	mem                *rebasetest.Mem
	base, ours, theirs store.ID
}

func newCase(t testing.TB, base, ours, theirs Fs) mergeCase {
	t.Helper()
	mem := rebasetest.NewMem()
	c := mergeCase{mem: mem}
	var err error
	for _, x := range []struct {
		fs Fs
		id *store.ID
	}{{base, &c.base}, {ours, &c.ours}, {theirs, &c.theirs}} {
		if *x.id, err = mem.Build(x.fs); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c mergeCase) merge(t testing.TB, opt Options) (Result, Fs) {
	t.Helper()
	res, err := Merge3(c.mem, c.mem, c.base, c.ours, c.theirs, opt)
	if err != nil {
		t.Fatalf("Merge3: %v", err)
	}
	if res.Conflicts != nil && !opt.KeepConflicts {
		if !res.Tree.IsZero() {
			t.Fatalf("conflicted merge returned tree %s", res.Tree.Short())
		}
		return res, nil
	}
	fs, err := c.mem.Flatten(res.Tree)
	if err != nil {
		t.Fatalf("flatten: %v", err)
	}
	return res, fs
}

func conflictPaths(cs []Conflict) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Path+":"+string(c.Kind))
	}
	return strings.Join(s, " ")
}

func TestMerge3Clean(t *testing.T) {
	base := Fs{"a": file("1\n2\n3\n4\n5\n"), "d/x": file("x\n"), "d/y": file("y\n"), "s": link("t"), "bin": file("\x00b")}
	for _, c := range []struct {
		name         string
		ours, theirs func(Fs)
		want         func(Fs)
	}{
		{"ours edits", func(f Fs) { f["d/x"] = file("X\n") }, func(Fs) {}, func(f Fs) { f["d/x"] = file("X\n") }},
		{"theirs adds", func(Fs) {}, func(f Fs) { f["new/deep/f"] = file("n") }, func(f Fs) { f["new/deep/f"] = file("n") }},
		{"text merge", func(f Fs) { f["a"] = file("ONE\n2\n3\n4\n5\n") }, func(f Fs) { f["a"] = file("1\n2\n3\n4\nFIVE\n") },
			func(f Fs) { f["a"] = file("ONE\n2\n3\n4\nFIVE\n") }},
		{"same change", func(f Fs) { f["bin"] = file("\x00c") }, func(f Fs) { f["bin"] = file("\x00c") }, func(f Fs) { f["bin"] = file("\x00c") }},
		{"both delete", func(f Fs) { delete(f, "s") }, func(f Fs) { delete(f, "s") }, func(f Fs) { delete(f, "s") }},
		{"exec bit and edit", func(f Fs) { f["a"] = exec(f["a"].Data) }, func(f Fs) { f["a"] = file("1\n2\nthree\n4\n5\n") },
			func(f Fs) { f["a"] = exec("1\n2\nthree\n4\n5\n") }},
		{"exec bit and text merge", func(f Fs) { f["a"] = exec("ONE\n2\n3\n4\n5\n") }, func(f Fs) { f["a"] = file("1\n2\n3\n4\nFIVE\n") },
			func(f Fs) { f["a"] = exec("ONE\n2\n3\n4\nFIVE\n") }},
		{"disjoint in same dir", func(f Fs) { f["d/x"] = file("X\n") }, func(f Fs) { delete(f, "d/y"); f["d/z"] = file("z") },
			func(f Fs) { f["d/x"] = file("X\n"); delete(f, "d/y"); f["d/z"] = file("z") }},
		{"dir deleted vs deletions inside", func(f Fs) { delete(f, "d/x"); delete(f, "d/y") }, func(f Fs) { delete(f, "d/y") },
			func(f Fs) { delete(f, "d/x"); delete(f, "d/y") }},
		{"dir deleted vs add inside keeps add", func(f Fs) { delete(f, "d/x"); delete(f, "d/y") }, func(f Fs) { f["d/new"] = file("n") },
			func(f Fs) { delete(f, "d/x"); delete(f, "d/y"); f["d/new"] = file("n") }},
		{"both add dir", func(f Fs) { f["n/a"] = file("a") }, func(f Fs) { f["n/b"] = file("b") },
			func(f Fs) { f["n/a"] = file("a"); f["n/b"] = file("b") }},
		{"symlink retarget", func(f Fs) { f["s"] = link("u") }, func(f Fs) { f["d/x"] = file("X\n") },
			func(f Fs) { f["s"] = link("u"); f["d/x"] = file("X\n") }},
		{"file becomes dir", func(f Fs) { delete(f, "s"); f["s/in"] = file("i") }, func(f Fs) { f["a"] = file("") },
			func(f Fs) { delete(f, "s"); f["s/in"] = file("i"); f["a"] = file("") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, th, want := clone2(base), clone2(base), clone2(base)
			c.ours(o)
			c.theirs(th)
			c.want(want)
			mc := newCase(t, base, o, th)
			res, got := mc.merge(t, Options{})
			if res.Conflicts != nil {
				t.Fatalf("conflicts: %s", conflictPaths(res.Conflicts))
			}
			if !reflect.DeepEqual(content(got), want) {
				t.Fatalf("got  %v\nwant %v", got, want)
			}
		})
	}
}

func clone2(f Fs) Fs {
	out := Fs{}
	for k, v := range f {
		out[k] = v
	}
	return out
}

func TestMerge3SameChangeTakesOursMtime(t *testing.T) {
	base := Fs{"f": {Kind: store.KindFile, Data: "a", Mtime: 1}, "g": file("g")}
	ours := Fs{"f": {Kind: store.KindFile, Data: "b", Mtime: 2}, "g": file("g2")}
	theirs := Fs{"f": {Kind: store.KindFile, Data: "b", Mtime: 3}, "g": file("g")}
	_, got := newCase(t, base, ours, theirs).merge(t, Options{})
	if got["f"].Mtime != 2 || got["f"].Data != "b" {
		t.Fatalf("got %+v", got["f"])
	}
	// An mtime-only difference is not a change: theirs' touch loses to ours' edit.
	theirs = Fs{"f": {Kind: store.KindFile, Data: "a", Mtime: 9}, "g": file("g")}
	res, got := newCase(t, base, ours, theirs).merge(t, Options{})
	if res.Conflicts != nil || got["f"].Data != "b" || got["f"].Mtime != 2 {
		t.Fatalf("got %+v %v", got["f"], res.Conflicts)
	}
}

func TestMerge3Conflicts(t *testing.T) {
	base := Fs{"t": file("1\n2\n3\n"), "bin": file("\x00a"), "d/x": file("x\n"), "d/y": file("y\n"), "s": link("base"), "keep": file("k")}
	for _, c := range []struct {
		name         string
		ours, theirs func(Fs)
		want         string   // conflict paths:kinds
		markers      func(Fs) // expected result under Markers
	}{
		{"text overlap", func(f Fs) { f["t"] = file("1\nA\n3\n") }, func(f Fs) { f["t"] = file("1\nB\n3\n") }, "t:content",
			func(f Fs) { f["t"] = file("1\n" + conflictText("A\n", "2\n", "B\n") + "3\n") }},
		{"binary", func(f Fs) { f["bin"] = file("\x00o") }, func(f Fs) { f["bin"] = file("\x00t") }, "bin:content",
			func(f Fs) { f["bin"] = file("\x00o") }},
		{"symlink", func(f Fs) { f["s"] = link("o") }, func(f Fs) { f["s"] = link("t") }, "s:content",
			func(f Fs) { f["s"] = link("o") }},
		{"modify/delete", func(f Fs) { delete(f, "t") }, func(f Fs) { f["t"] = file("T\n") }, "t:modify/delete",
			func(f Fs) { f["t"] = file("T\n") }},
		{"delete/modify", func(f Fs) { f["t"] = file("T\n") }, func(f Fs) { delete(f, "t") }, "t:modify/delete",
			func(f Fs) { f["t"] = file("T\n") }},
		{"dir deleted vs modified inside", func(f Fs) { delete(f, "d/x"); delete(f, "d/y") },
			func(f Fs) { f["d/x"] = file("X\n"); f["d/n"] = file("n") }, "d/x:modify/delete",
			func(f Fs) { delete(f, "d/y"); f["d/x"] = file("X\n"); f["d/n"] = file("n") }},
		{"add/add", func(f Fs) { f["n"] = file("o\n") }, func(f Fs) { f["n"] = file("t\n") }, "n:add/add",
			func(f Fs) { f["n"] = file(conflictText("o\n", "", "t\n")) }},
		{"add/add binary", func(f Fs) { f["n"] = file("\x00o") }, func(f Fs) { f["n"] = file("\x00t") }, "n:add/add",
			func(f Fs) { f["n"] = file("\x00o") }},
		{"type file vs dir", func(f Fs) { delete(f, "t"); f["t/in"] = file("i") }, func(f Fs) { f["t"] = file("T\n") }, "t:type",
			func(f Fs) { delete(f, "t"); f["t/in"] = file("i") }},
		{"type dir vs symlink", func(f Fs) { f["d/x"] = file("X\n") }, func(f Fs) { delete(f, "d/x"); delete(f, "d/y"); f["d"] = link("l") }, "d:type",
			func(f Fs) { f["d/x"] = file("X\n") }},
		{"type add", func(f Fs) { f["n"] = link("o") }, func(f Fs) { f["n"] = file("t") }, "n:type",
			func(f Fs) { f["n"] = link("o") }},
		{"mode", func(f Fs) { f["n"] = exec("same") }, func(f Fs) { f["n"] = file("same") }, "n:mode",
			func(f Fs) { f["n"] = exec("same") }},
		{"several", func(f Fs) { f["t"] = file("A\n"); delete(f, "bin") }, func(f Fs) { f["t"] = file("B\n"); f["bin"] = file("\x00t") },
			"bin:modify/delete t:content",
			func(f Fs) { f["t"] = file(conflictText("A\n", "1\n2\n3\n", "B\n")); f["bin"] = file("\x00t") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, th := clone2(base), clone2(base)
			c.ours(o)
			c.theirs(th)
			mc := newCase(t, base, o, th)
			before := mc.mem.Objects()
			res, _ := mc.merge(t, Options{})
			if got := conflictPaths(res.Conflicts); got != c.want {
				t.Fatalf("conflicts %q, want %q", got, c.want)
			}
			if res.Resolved != nil || !res.Tree.IsZero() {
				t.Fatalf("conflicted merge: resolved %v tree %v", res.Resolved, res.Tree)
			}
			if mc.mem.Objects() != before {
				t.Fatal("a conflicted merge wrote objects")
			}
			for _, cf := range res.Conflicts {
				if cf.Ours != nil && cf.Ours.Name != cf.Path[strings.LastIndex(cf.Path, "/")+1:] {
					t.Errorf("entry name %q for path %q", cf.Ours.Name, cf.Path)
				}
			}

			for _, p := range []Prefer{PreferOurs, PreferTheirs} {
				res, got := mc.merge(t, Options{Prefer: p, Markers: true})
				if res.Conflicts != nil || conflictPaths(res.Resolved) != c.want {
					t.Fatalf("prefer %v: conflicts %v resolved %q", p, res.Conflicts, conflictPaths(res.Resolved))
				}
				side := o
				if p == PreferTheirs {
					side = th
				}
				for _, cf := range res.Resolved {
					for path, f := range side {
						if path == cf.Path || strings.HasPrefix(path, cf.Path+"/") {
							if got[path].Data != f.Data || got[path].Kind != f.Kind {
								t.Errorf("prefer %v: %s = %+v, want %+v", p, path, got[path], f)
							}
						}
					}
					if _, ok := side[cf.Path]; !ok {
						if _, ok := got[cf.Path]; ok && !strings.Contains(c.name, "dir") {
							t.Errorf("prefer %v: %s should be absent", p, cf.Path)
						}
					}
				}
			}

			want := clone2(base)
			c.markers(want)
			res, got := mc.merge(t, Options{Markers: true})
			if res.Conflicts != nil || conflictPaths(res.Resolved) != c.want {
				t.Fatalf("markers: conflicts %v resolved %q", res.Conflicts, conflictPaths(res.Resolved))
			}
			if !reflect.DeepEqual(content(got), want) {
				t.Fatalf("markers:\ngot  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestMerge3ConflictEntries(t *testing.T) {
	base := Fs{"f": file("b\n")}
	mc := newCase(t, base, Fs{}, Fs{"f": file("t\n")})
	res, _ := mc.merge(t, Options{})
	if len(res.Conflicts) != 1 {
		t.Fatalf("conflicts %v", res.Conflicts)
	}
	c := res.Conflicts[0]
	if c.Base == nil || c.Ours != nil || c.Theirs == nil || c.Base.ID != store.BlobID([]byte("b\n")) || c.Theirs.ID != store.BlobID([]byte("t\n")) {
		t.Fatalf("conflict %+v", c)
	}
}

func TestMerge3Limits(t *testing.T) {
	base := Fs{"a": file("a\n"), "b": file("b\n"), "c": file("c\n")}
	ours := Fs{"a": file("A\n"), "b": file("B\n"), "c": file("c\n")}
	theirs := Fs{"a": file("1\n"), "b": file("2\n"), "c": file("C\n")}
	mc := newCase(t, base, ours, theirs)
	if _, err := Merge3(mc.mem, mc.mem, mc.base, mc.ours, mc.theirs, Options{Limits: Limits{MaxConflicts: 1}}); !errors.Is(err, ErrLimit) {
		t.Fatalf("MaxConflicts: %v", err)
	}
	if _, err := Merge3(mc.mem, mc.mem, mc.base, mc.ours, mc.theirs, Options{Limits: Limits{MaxChanges: 1}}); !errors.Is(err, ErrLimit) {
		t.Fatalf("MaxChanges: %v", err)
	}
	res, err := Merge3(mc.mem, mc.mem, mc.base, mc.ours, mc.theirs, Options{Limits: Limits{MaxChanges: 3, MaxConflicts: 2}})
	if err != nil || len(res.Conflicts) != 2 || res.Changed != 3 {
		t.Fatalf("at the limits: %v %+v", err, res)
	}

	// Too large to merge by lines: a content conflict, not an error.
	big := Fs{"f": file("1\n2\n3\n4\n")}
	mc = newCase(t, big, Fs{"f": file("X\n2\n3\n4\n")}, Fs{"f": file("1\n2\n3\nY\n")})
	res, err = Merge3(mc.mem, mc.mem, mc.base, mc.ours, mc.theirs, Options{Limits: Limits{MaxTextBytes: 4}})
	if err != nil || conflictPaths(res.Conflicts) != "f:content" {
		t.Fatalf("MaxTextBytes: %v %v", err, res.Conflicts)
	}
	if res, _ := mc.merge(t, Options{}); res.Conflicts != nil {
		t.Fatalf("default limits: %v", res.Conflicts)
	}
	if d := DefaultLimits(); d.MaxGenerations != 4096 || d.MaxChanges != 65536 || d.MaxConflicts != 1024 || (Limits{}).WithDefaults() != d {
		t.Fatalf("defaults %+v", d)
	}
}

type badWriter struct{ *rebasetest.Mem }

func (badWriter) WriteBlobBytes([]byte) (store.ID, error) { return store.ID{1}, nil }

type failReader struct {
	*rebasetest.Mem
	bad store.ID
}

func (f failReader) GetTree(id store.ID) (*store.Tree, error) {
	if id == f.bad {
		return nil, store.ErrCorrupt
	}
	return f.Mem.GetTree(id)
}

func TestMerge3Errors(t *testing.T) {
	mc := newCase(t, Fs{"f": file("1\n2\n3\n")}, Fs{"f": file("A\n2\n3\n")}, Fs{"f": file("1\n2\nC\n")})
	if _, err := Merge3(mc.mem, badWriter{mc.mem}, mc.base, mc.ours, mc.theirs, Options{}); !errors.Is(err, ErrIDMismatch) {
		t.Fatalf("bad writer: %v", err)
	}
	if _, err := Merge3(failReader{mc.mem, mc.theirs}, mc.mem, mc.base, mc.ours, mc.theirs, Options{}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("bad reader: %v", err)
	}
	missing := store.ID{7}
	if _, err := Merge3(mc.mem, mc.mem, mc.base, mc.ours, missing, Options{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing tree: %v", err)
	}
	if _, err := Diff(mc.mem, mc.base, missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("diff missing tree: %v", err)
	}
}

func TestMerge3ZeroRoots(t *testing.T) {
	mem := rebasetest.NewMem()
	x := mem.MustBuild(Fs{"a": file("a")})
	y := mem.MustBuild(Fs{"b": file("b")})
	var zero store.ID
	for _, c := range []struct{ b, o, t, want store.ID }{
		{zero, x, zero, x}, {zero, zero, y, y}, {x, zero, x, zero}, {zero, zero, zero, zero},
	} {
		res, err := Merge3(mem, mem, c.b, c.o, c.t, Options{})
		if err != nil || res.Tree != c.want {
			t.Fatalf("%v: %v %v", c, res, err)
		}
	}
	res, err := Merge3(mem, mem, zero, x, y, Options{})
	if err != nil || res.Conflicts != nil {
		t.Fatal(res, err)
	}
	got, _ := mem.Flatten(res.Tree)
	if !reflect.DeepEqual(content(got), Fs{"a": file("a"), "b": file("b")}) {
		t.Fatal(got)
	}
	// Both delete everything, differently: the empty tree is written.
	res, err = Merge3(mem, mem, res.Tree, x, y, Options{})
	if err != nil || res.Tree.IsZero() {
		t.Fatal(res, err)
	}
	if tr, err := mem.GetTree(res.Tree); err != nil || len(tr.Entries) != 0 {
		t.Fatal(tr, err)
	}
}

// bigTree builds dirs x files, all in memory.
func bigTree(mem *rebasetest.Mem, dirs, files int) (store.ID, Fs) {
	fs := Fs{}
	for d := 0; d < dirs; d++ {
		for f := 0; f < files; f++ {
			fs[fmt.Sprintf("d%03d/f%04d", d, f)] = file(fmt.Sprintf("line 1\nfile %d/%d\nline 3\nline 4\nline 5\n", d, f))
		}
	}
	return mem.MustBuild(fs), fs
}

// editTree returns root with n files changed, one per directory starting at
// dir first, by rebuilding only the touched directories.
func editTree(t testing.TB, mem *rebasetest.Mem, root store.ID, first, n int, edit func(string) string) store.ID {
	rt, err := mem.GetTree(root)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		de := &rt.Entries[first+i]
		dt, err := mem.GetTree(de.ID)
		if err != nil {
			t.Fatal(err)
		}
		fe := &dt.Entries[0]
		data, err := mem.ReadBlob(fe.ID)
		if err != nil {
			t.Fatal(err)
		}
		nd := edit(string(data))
		fe.ID, _ = mem.WriteBlobBytes([]byte(nd))
		fe.Size = int64(len(nd))
		de.ID, _ = mem.PutTree(dt)
	}
	id, _ := mem.PutTree(rt)
	return id
}

func TestMerge3IsOChanged(t *testing.T) {
	mem := rebasetest.NewMem()
	base, _ := bigTree(mem, 100, 100)
	ours := editTree(t, mem, base, 0, 10, func(s string) string { return "OURS\n" + s[7:] })
	theirs := editTree(t, mem, base, 5, 10, func(s string) string { return s[:len(s)-7] + "THEIRS\n" })
	mem.ResetStats()
	res, err := Merge3(mem, mem, base, ours, theirs, Options{})
	if err != nil || res.Conflicts != nil {
		t.Fatal(err, res.Conflicts)
	}
	treeReads, blobReads, writes := mem.Stats()
	// Only the 5 dirs both sides changed are read (3 trees each, plus the
	// 3 roots); 5 text merges read 3 blobs each; 5 merged blobs, 5 dirs
	// and the root are written.
	if treeReads != 3+3*5 || blobReads != 15 || writes != 5+5+1 {
		t.Fatalf("tree reads %d blob reads %d writes %d", treeReads, blobReads, writes)
	}
	if res.Changed != 15+5 { // 15 dirs, and the 5 files inside the dirs read
		t.Fatalf("changed %d", res.Changed)
	}
	mem.ResetStats()
	ch, err := Diff(mem, base, ours)
	if err != nil || len(ch) != 10 {
		t.Fatal(err, ch)
	}
	if treeReads, _, _ := mem.Stats(); treeReads != 2+2*10 {
		t.Fatalf("diff tree reads %d", treeReads)
	}
	got, err := mem.Flatten(res.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if f := got["d007/f0000"].Data; !strings.HasPrefix(f, "OURS\n") || !strings.HasSuffix(f, "THEIRS\n") {
		t.Fatalf("merged d007/f0000 = %q", f)
	}
}

func TestDiff(t *testing.T) {
	mem := rebasetest.NewMem()
	a := mem.MustBuild(Fs{"f": file("f"), "x": exec("x"), "d/a": file("a"), "d/e/b": file("b"), "gone/g": file("g"),
		"l": link("t"), "t": file("t"), "td/in": file("i"), "same": {Kind: store.KindFile, Data: "s", Mtime: 1}})
	b := mem.MustBuild(Fs{"f": file("F"), "x": file("x"), "d/a": file("a"), "d/e/b": file("B"), "new/n": file("n"),
		"new/m/k": file("k"), "l": link("u"), "t/in": file("t"), "td": link("td"), "empty": {Kind: store.KindDir},
		"same": {Kind: store.KindFile, Data: "s", Mtime: 2}})
	ch, err := Diff(mem, a, b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range ch {
		got = append(got, string(c.Kind)+" "+c.Path)
		if (c.Old == nil) != (c.Kind == Added) || (c.New == nil) != (c.Kind == Deleted) {
			t.Errorf("%s %s: old %v new %v", string(c.Kind), c.Path, c.Old, c.New)
		}
	}
	want := []string{"M d/e/b", "A empty", "M f", "D gone/g", "M l", "A new/m/k", "A new/n", "T t", "A t/in", "T td", "D td/in", "M x"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if ch, err := Diff(mem, a, a); err != nil || ch != nil {
		t.Fatal(ch, err)
	}
	ch, err = Diff(mem, store.ID{}, a)
	if err != nil || len(ch) != 9 {
		t.Fatal(ch, err)
	}
}

func TestMerge3MarkersKeepMergedExecBit(t *testing.T) {
	base := Fs{"s": file("1\n2\n3\n")}
	mc := newCase(t, base, Fs{"s": exec("1\nA\n3\n")}, Fs{"s": file("1\nB\n3\n")})
	res, got := mc.merge(t, Options{Markers: true})
	want := exec("1\n" + conflictText("A\n", "2\n", "B\n") + "3\n")
	if conflictPaths(res.Resolved) != "s:content" || !reflect.DeepEqual(content(got)["s"], want) {
		t.Fatalf("got %+v resolved %v", got, res.Resolved)
	}
}

func TestMerge3DeletedDirVsTypeChangeInside(t *testing.T) {
	base := Fs{"d/x": file("x"), "d/y": file("y")}
	mc := newCase(t, base, Fs{}, Fs{"d/x/in": file("i"), "d/y": file("y")})
	res, _ := mc.merge(t, Options{})
	if got := conflictPaths(res.Conflicts); got != "d/x:modify/delete" {
		t.Fatalf("conflicts %q", got)
	}
	// The other order gives the same path and kind with the sides swapped.
	mc = newCase(t, base, Fs{"d/x/in": file("i"), "d/y": file("y")}, Fs{})
	res2, _ := mc.merge(t, Options{})
	if !reflect.DeepEqual(swapSides(res.Conflicts), res2.Conflicts) {
		t.Fatalf("%+v vs %+v", res.Conflicts, res2.Conflicts)
	}
}

func TestMerge3TouchedDirIsNotAChange(t *testing.T) {
	// Theirs only touched a file's mtime inside d, which changes d's tree
	// ID; ours replaced d by a file. That is not a type conflict.
	base := Fs{"d/x": file("x")}
	ours := Fs{"d": file("now a file")}
	theirs := Fs{"d/x": {Kind: store.KindFile, Data: "x", Mtime: 99}}
	res, got := newCase(t, base, ours, theirs).merge(t, Options{})
	if res.Conflicts != nil || !reflect.DeepEqual(content(got), ours) {
		t.Fatalf("got %v conflicts %v", got, res.Conflicts)
	}
}

// fakeSubtree settles every directory called "special" by taking theirs
// and reporting one conflict inside it; it declines everything else.
type fakeSubtree struct {
	offered []string
}

func (f *fakeSubtree) MergeSubtree(path string, b, o, t *store.Entry) (*store.Entry, []Conflict, bool, error) {
	f.offered = append(f.offered, path)
	if !strings.HasSuffix(path, "special") {
		return nil, nil, false, nil
	}
	return t, []Conflict{{Path: path + "/ref", Kind: "git-ref", Ours: o, Theirs: t}}, true, nil
}

func TestMerge3SubtreeAndKeepConflicts(t *testing.T) {
	base := Fs{"d/special/x": file("b\n"), "d/plain/y": file("1\n2\n3\n"), "t": file("base\n")}
	ours := Fs{"d/special/x": file("o\n"), "d/plain/y": file("O\n2\n3\n"), "t": file("ours\n")}
	theirs := Fs{"d/special/x": file("t\n"), "d/plain/y": file("1\n2\nT\n"), "t": file("theirs\n")}
	mc := newCase(t, base, ours, theirs)
	sub := &fakeSubtree{}
	before := mc.mem.Objects()
	res, got := mc.merge(t, Options{Subtree: sub, KeepConflicts: true})
	if strings.Join(sub.offered, " ") != "d d/plain d/special" {
		t.Fatalf("offered %q: want every directory both sides changed", sub.offered)
	}
	if conflictPaths(res.Conflicts) != "d/special/ref:git-ref t:content" {
		t.Fatalf("conflicts %q", conflictPaths(res.Conflicts))
	}
	if res.Tree.IsZero() || mc.mem.Objects() == before {
		t.Fatal("KeepConflicts must write the merged tree")
	}
	want := Fs{"d/special/x": file("t\n"), "d/plain/y": file("O\n2\nT\n"), "t": file("ours\n")}
	if !reflect.DeepEqual(content(got), content(want)) {
		t.Fatalf("got %+v\nwant %+v", content(got), content(want))
	}
	// Without KeepConflicts the subtree's conflict voids the merge.
	if res, _ := Merge3(mc.mem, mc.mem, mc.base, mc.ours, mc.theirs, Options{Subtree: &fakeSubtree{}}); !res.Tree.IsZero() || len(res.Conflicts) != 2 {
		t.Fatalf("plain merge with a subtree conflict: %+v", res)
	}
}
