package rebase

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// mergeKeep merges with KeepConflicts and returns the written tree.
func (c mergeCase) mergeKeep(t *testing.T) (Result, Fs) {
	t.Helper()
	res, err := Merge3(c.mem, c.mem, c.base, c.ours, c.theirs, Options{KeepConflicts: true})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := c.mem.Flatten(res.Tree)
	if err != nil {
		t.Fatal(err)
	}
	return res, fs
}

// with returns a copy of fs with the given path/content pairs set.
func with(fs Fs, kv ...string) Fs {
	out := clone2(fs)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = file(kv[i+1])
	}
	return out
}

const (
	attrBase   = "1\n2\n3\n4\n5\n"
	attrOurs   = "1\n2\n3\n4\n5\nours\n"
	attrTheirs = "1\n2\n3\n4\n5\ntheirs\n"
	attrUnion  = "1\n2\n3\n4\n5\nours\ntheirs\n"
	// Disjoint edits: a clean text merge.
	attrOursD   = "ONE\n2\n3\n4\n5\n"
	attrTheirsD = "1\n2\n3\n4\nFIVE\n"
	attrMergedD = "ONE\n2\n3\n4\nFIVE\n"
)

func TestMerge3AttrUnion(t *testing.T) {
	base := Fs{".gitattributes": file("*.log merge=union\n"), "a.log": file(attrBase), "d/b.log": file(attrBase), "t.txt": file(attrBase)}
	mc := newCase(t, base,
		with(base, "a.log", attrOurs, "d/b.log", attrOurs, "new.log", "x\ny\n"),
		with(base, "a.log", attrTheirs, "d/b.log", attrTheirs, "new.log", "x\nz\n"))
	res, got := mc.merge(t, Options{})
	if res.Conflicts != nil || res.Resolved != nil {
		t.Fatalf("conflicts %s resolved %s", conflictPaths(res.Conflicts), conflictPaths(res.Resolved))
	}
	want := with(base, "a.log", attrUnion, "d/b.log", attrUnion, "new.log", "x\ny\nz\n")
	if !reflect.DeepEqual(content(got), want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}

	// A binary file still conflicts under union.
	mc = newCase(t, base, with(base, "a.log", "\x00o"), with(base, "a.log", "\x00t"))
	if res, _ := mc.merge(t, Options{}); conflictPaths(res.Conflicts) != "a.log:content" {
		t.Fatalf("binary union: conflicts %s", conflictPaths(res.Conflicts))
	}
}

func TestMerge3AttrNoMerge(t *testing.T) {
	for _, attrs := range []string{"*.bin binary\n", "*.bin -merge\n", "*.bin merge=binary\n", "*.bin merge=union\n*.bin binary\n"} {
		base := Fs{".gitattributes": file(attrs), "f.bin": file(attrBase), "f.txt": file(attrBase)}
		ours := with(base, "f.bin", attrOursD, "f.txt", attrOursD)
		theirs := with(base, "f.bin", attrTheirsD, "f.txt", attrTheirsD)
		mc := newCase(t, base, ours, theirs)
		res, _ := mc.merge(t, Options{})
		if got := conflictPaths(res.Conflicts); got != "f.bin:content" {
			t.Fatalf("%q: conflicts %s", attrs, got)
		}
		// With markers, ours stands in: no markers for a -merge file,
		// while f.txt still merges.
		res, got := mc.merge(t, Options{Markers: true})
		if conflictPaths(res.Resolved) != "f.bin:content" {
			t.Fatalf("%q: resolved %s", attrs, conflictPaths(res.Resolved))
		}
		want := with(base, "f.bin", attrOursD, "f.txt", attrMergedD)
		if !reflect.DeepEqual(content(got), want) {
			t.Fatalf("%q: got %v\nwant %v", attrs, got, want)
		}
	}
}

func TestMerge3AttrNested(t *testing.T) {
	base := Fs{
		".gitattributes":     file("*.txt merge=union\n[attr]nomerge -merge\n"),
		"sub/.gitattributes": file("*.txt nomerge\n"),
		"sub/in/x.txt":       file(attrBase),
		"sub/x.txt":          file(attrBase),
		"x.txt":              file(attrBase),
		"other/x.txt":        file(attrBase),
	}
	kv := func(c string) []string {
		return []string{"sub/in/x.txt", c, "sub/x.txt", c, "x.txt", c, "other/x.txt", c}
	}
	mc := newCase(t, base, with(base, kv(attrOurs)...), with(base, kv(attrTheirs)...))
	res, got := mc.mergeKeep(t)
	if c := conflictPaths(res.Conflicts); c != "sub/in/x.txt:content sub/x.txt:content" {
		t.Fatalf("conflicts %s", c)
	}
	if got["x.txt"].Data != attrUnion || got["other/x.txt"].Data != attrUnion {
		t.Fatalf("root files not union-merged: %q %q", got["x.txt"].Data, got["other/x.txt"].Data)
	}
}

func TestMerge3AttrRepositoryTop(t *testing.T) {
	// A directory with .git is a repository top: the workspace root's
	// rules stop there, and its own top-level file may define macros.
	base := Fs{
		".gitattributes":      file("*.txt merge=union\n"),
		"repo/.git/HEAD":      file("ref: refs/heads/main\n"),
		"repo/.gitattributes": file("[attr]u merge=union\n*.log u\n"),
		"repo/x.txt":          file(attrBase),
		"repo/x.log":          file(attrBase),
	}
	mc := newCase(t, base,
		with(base, "repo/x.txt", attrOurs, "repo/x.log", attrOurs),
		with(base, "repo/x.txt", attrTheirs, "repo/x.log", attrTheirs))
	res, got := mc.mergeKeep(t)
	if c := conflictPaths(res.Conflicts); c != "repo/x.txt:content" {
		t.Fatalf("conflicts %s", c)
	}
	if got["repo/x.log"].Data != attrUnion {
		t.Fatalf("repo/x.log = %q", got["repo/x.log"].Data)
	}
}

func TestMerge3AttrFromTheirs(t *testing.T) {
	// Ours has no .gitattributes; theirs adds one: it applies. Where ours
	// has one, ours' wins.
	base := Fs{"a.log": file(attrBase), "d/.gitattributes": file("*.log merge=union\n"), "d/b.log": file(attrBase)}
	ours := with(base, "a.log", attrOurs, "d/b.log", attrOurs)
	theirs := with(base, "a.log", attrTheirs, "d/b.log", attrTheirs, ".gitattributes", "*.log merge=union\n", "d/.gitattributes", "*.log -merge\n")
	mc := newCase(t, base, ours, theirs)
	res, got := mc.merge(t, Options{})
	if res.Conflicts != nil {
		t.Fatalf("conflicts %s", conflictPaths(res.Conflicts))
	}
	if got["a.log"].Data != attrUnion || got["d/b.log"].Data != attrUnion {
		t.Fatalf("got %q %q", got["a.log"].Data, got["d/b.log"].Data)
	}
}

type driverCall struct {
	name, path         string
	base, ours, theirs string
	baseNil            bool
}

func TestMerge3AttrDriver(t *testing.T) {
	base := Fs{".gitattributes": file("*.cat merge=cat\n*.fail merge=fail\n*.none merge=union\n*.err merge=err\n"),
		"a.cat": file(attrBase), "a.fail": file(attrBase), "a.none": file(attrBase), "plain": file(attrBase)}
	kv := func(c string) []string { return []string{"a.cat", c, "a.fail", c, "a.none", c, "plain", c} }
	ours := with(base, kv(attrOurs)...)
	theirs := with(base, kv(attrTheirs)...)
	ours["added.cat"], theirs["added.cat"] = file("o\n"), file("t\n")
	var calls []driverCall
	driver := func(name, path string, b, o, th []byte) ([]byte, bool, bool, error) {
		calls = append(calls, driverCall{name: name, path: path, base: string(b), ours: string(o), theirs: string(th), baseNil: b == nil})
		switch name {
		case "cat":
			return []byte(string(b) + "|" + string(o) + "|" + string(th)), true, true, nil
		case "fail":
			return []byte("stand-in\n"), false, true, nil
		case "err":
			return nil, false, true, errors.New("boom")
		}
		return nil, false, false, nil
	}
	mc := newCase(t, base, ours, theirs)
	res, got := mc.merge(t, Options{Driver: driver, Markers: true})
	if c := conflictPaths(res.Resolved); c != "a.fail:content plain:content" {
		t.Fatalf("resolved %s", c)
	}
	want := map[string]string{
		"a.cat":     attrBase + "|" + attrOurs + "|" + attrTheirs,
		"added.cat": "|o\n|t\n",
		"a.fail":    "stand-in\n",
		"a.none":    attrUnion, // ok=false: the built-in union
	}
	for p, w := range want {
		if got[p].Data != w {
			t.Errorf("%s = %q, want %q", p, got[p].Data, w)
		}
	}
	if !strings.HasPrefix(got["plain"].Data, "1\n2\n3\n4\n5\n"+MarkerOurs) {
		t.Errorf("plain = %q, want text markers", got["plain"].Data)
	}
	wantCalls := []driverCall{
		{name: "cat", path: "a.cat", base: attrBase, ours: attrOurs, theirs: attrTheirs},
		{name: "fail", path: "a.fail", base: attrBase, ours: attrOurs, theirs: attrTheirs},
		{name: "union", path: "a.none", base: attrBase, ours: attrOurs, theirs: attrTheirs},
		{name: "cat", path: "added.cat", ours: "o\n", theirs: "t\n", baseNil: true},
	}
	if !reflect.DeepEqual(calls, wantCalls) {
		t.Fatalf("calls\n%+v\nwant\n%+v", calls, wantCalls)
	}

	// Without markers a failed driver is an unresolved conflict.
	calls = nil
	res, _ = mc.merge(t, Options{Driver: driver})
	if c := conflictPaths(res.Conflicts); c != "a.fail:content plain:content" {
		t.Fatalf("conflicts %s", c)
	}

	// A driver error fails the merge, naming driver and path.
	base["a.err"] = file(attrBase)
	mc = newCase(t, base, with(base, "a.err", attrOurs), with(base, "a.err", attrTheirs))
	_, err := Merge3(mc.mem, mc.mem, mc.base, mc.ours, mc.theirs, Options{Driver: driver})
	if err == nil || !strings.Contains(err.Error(), `"err"`) || !strings.Contains(err.Error(), "a.err") {
		t.Fatalf("err = %v", err)
	}
}

func TestMerge3AttrUnknownDriverIsText(t *testing.T) {
	base := Fs{".gitattributes": file("* merge=nosuch\n"), "a": file(attrBase), "b": file(attrBase)}
	mc := newCase(t, base, with(base, "a", attrOursD, "b", attrOurs), with(base, "a", attrTheirsD, "b", attrTheirs))
	res, got := mc.merge(t, Options{Markers: true})
	if c := conflictPaths(res.Resolved); c != "b:content" {
		t.Fatalf("resolved %s", c)
	}
	if got["a"].Data != attrMergedD {
		t.Fatalf("a = %q", got["a"].Data)
	}
	if !strings.Contains(got["b"].Data, MarkerOurs) {
		t.Fatalf("b = %q, want markers", got["b"].Data)
	}
}

// .gitattributes is read only when a file's content is merged, and once
// per directory.
func TestMerge3AttrLazy(t *testing.T) {
	base := Fs{".gitattributes": file("*.log merge=union\n"), "d/.gitattributes": file("*.x -merge\n"),
		"a.log": file(attrBase), "b.log": file(attrBase), "d/c.log": file(attrBase), "d/e.log": file(attrBase)}
	mc := newCase(t, base, with(base, "a.log", attrOurs), with(base, "b.log", attrTheirs))
	mc.mem.ResetStats()
	mc.merge(t, Options{})
	if _, blobs, _ := mc.mem.Stats(); blobs != 0 {
		t.Fatalf("%d blob reads for a merge without content merges", blobs)
	}
	kv := func(c string) []string { return []string{"a.log", c, "b.log", c, "d/c.log", c, "d/e.log", c} }
	mc = newCase(t, base, with(base, kv(attrOurs)...), with(base, kv(attrTheirs)...))
	mc.mem.ResetStats()
	mc.merge(t, Options{})
	// 4 union merges of 3 blobs each, 2 attribute files.
	if _, blobs, _ := mc.mem.Stats(); blobs != 4*3+2 {
		t.Fatalf("%d blob reads, want %d", blobs, 4*3+2)
	}
}

func TestMergeUnion(t *testing.T) {
	for _, c := range []struct{ base, ours, theirs, want string }{
		{"a\n", "a\nx\n", "a\ny\n", "a\nx\ny\n"},
		{"a\n", "a\nc\nx\n", "a\nc\ny\n", "a\nc\nx\ny\n"},
		{"a\nb\n", "x\nb\n", "y\nb\n", "x\ny\nb\n"},
		{"a\n", "a\nx", "a\ny", "a\nx\ny"},
		{"1\n2\n3\n", "1\nO\n3\n", "1\n2\nT\n", "1\nO\n3\n2\nT\n"}, // as git merge-file --union
		{"", "o\n", "t\n", "o\nt\n"},
		{"a\n", "a\nx\nz\n", "a\ny\nz\n", "a\nx\ny\nz\n"},
		{"a\n", "b\n", "a\n", "b\n"},
	} {
		if got := MergeUnion([]byte(c.base), []byte(c.ours), []byte(c.theirs)); string(got) != c.want {
			t.Errorf("MergeUnion(%q, %q, %q) = %q, want %q", c.base, c.ours, c.theirs, got, c.want)
		}
	}
}

// MergeUnion agrees with MergeText wherever that is clean, and otherwise
// keeps every line of both sides' versions.
func TestMergeUnionProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := genText(t, "base")
		x := mutate(t, "x", base)
		y := mutate(t, "y", base)
		u := MergeUnion(base, x, y)
		if m, clean := MergeText(base, x, y); clean && !bytes.Equal(m, u) {
			t.Fatalf("clean merge %q, union %q", m, u)
		}
		count := func(b []byte) map[string]int {
			n := map[string]int{}
			for _, l := range splitLines(b) {
				n[string(bytes.TrimSuffix(l, []byte("\n")))]++
			}
			return n
		}
		cu, cb := count(u), count(base)
		for _, side := range [][]byte{x, y} {
			for l, n := range count(side) {
				// A line the side has more often than base was added
				// by it and must survive.
				if n > cb[l] && cu[l] == 0 {
					t.Fatalf("union %q lost line %q of %q", u, l, side)
				}
			}
		}
	})
}
