package rebase

import (
	"testing"

	"github.com/acyclicfs/acyclicfs/rebase/rebasetest"
	"github.com/acyclicfs/acyclicfs/store"
)

// A mode change on one side and a content change on the other both land;
// two different mode changes of a file are a mode conflict (git's rule);
// a directory's mode merges the same way, ours winning a clash.
func TestMerge3Modes(t *testing.T) {
	mem := rebasetest.NewMem()
	base := Fs{".env": file("a\nb\nc\n"), "run": file("x\n"), "priv/k": file("k\n"), "s": file("1\n")}
	ours := Fs{".env": {Kind: store.KindFile, Data: "a\nb\nc\n", Mode: 0o600}, "run": {Kind: store.KindExec, Data: "x\n", Mode: 0o4755},
		"priv/k": file("k\n"), "s": {Kind: store.KindFile, Data: "1\n", Mode: 0o600}}
	theirs := Fs{".env": file("a\nB\nc\n"), "run": file("y\n"), "priv/k": file("k2\n"), "s": {Kind: store.KindFile, Data: "1\n", Mode: 0o640}}
	b, o, th := mem.MustBuild(base), mem.MustBuild(ours), mem.MustBuild(theirs)
	// The directory: ours makes it 0700 (a tree built from Files has no
	// directory modes, so set it by hand).
	o = chmodDir(t, mem, o, "priv", 0o700)

	r, err := Merge3(mem, mem, b, o, th, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Conflicts) != 1 || r.Conflicts[0].Path != "s" || r.Conflicts[0].Kind != ConflictMode {
		t.Fatalf("conflicts %+v, want one mode conflict at s", r.Conflicts)
	}
	r, err = Merge3(mem, mem, b, o, th, Options{Markers: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := mem.Flatten(r.Tree)
	if err != nil {
		t.Fatal(err)
	}
	want := Fs{".env": {Kind: store.KindFile, Data: "a\nB\nc\n", Mode: 0o600}, "run": {Kind: store.KindExec, Data: "y\n", Mode: 0o4755},
		"priv/k": file("k2\n"), "s": {Kind: store.KindFile, Data: "1\n", Mode: 0o600}}
	for p, f := range want {
		if g := got[p]; g.Kind != f.Kind || g.Data != f.Data || g.Mode != f.Mode {
			t.Errorf("%s: %+v, want %+v", p, g, f)
		}
	}
	root, _ := mem.GetTree(r.Tree)
	if e, _ := root.Lookup("priv"); e.Perm() != 0o700 {
		t.Errorf("priv: mode %04o, want 0700 (ours' change kept through theirs' content change)", e.Perm())
	}

	// A mode-only change is a change to Diff.
	ch, err := Diff(mem, b, mem.MustBuild(Fs{".env": {Kind: store.KindFile, Data: "a\nb\nc\n", Mode: 0o600}, "run": file("x\n"), "priv/k": file("k\n"), "s": file("1\n")}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 1 || ch[0].Path != ".env" || ch[0].Kind != Modified || ch[0].New.Perm() != 0o600 {
		t.Fatalf("diff of a chmod: %+v", ch)
	}
	ch, err = Diff(mem, b, chmodDir(t, mem, b, "priv", 0o700))
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 1 || ch[0].Path != "priv" || ch[0].Kind != Modified || ch[0].New.Perm() != 0o700 {
		t.Fatalf("diff of a directory chmod: %+v", ch)
	}
}

func chmodDir(t *testing.T, mem *rebasetest.Mem, root store.ID, name string, perm uint32) store.ID {
	t.Helper()
	tr, err := mem.GetTree(root)
	if err != nil {
		t.Fatal(err)
	}
	c := &store.Tree{Entries: append([]store.Entry(nil), tr.Entries...)}
	for i := range c.Entries {
		if c.Entries[i].Name == name {
			c.Entries[i].SetPerm(perm)
		}
	}
	id, err := mem.PutTree(c)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
