package workspace

import (
	"context"
	"testing"
)

// gc drops the attribution of collected generations and the session log
// of removed workspaces; records of what is kept stay.
func TestGCDropsAttributionOfCollectedGenerations(t *testing.T) {
	m := openTest(t)
	ctx := context.Background()
	srcA, srcB := t.TempDir(), t.TempDir()
	write(t, srcA, map[string]string{"a": "1"})
	write(t, srcB, map[string]string{"b": "2"})
	genKeep, _, err := m.Create(ctx, "keep", srcA)
	if err != nil {
		t.Fatal(err)
	}
	genGone, _, err := m.Create(ctx, "gone", srcB)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(ws string, gen [32]byte, start int64) {
		t.Helper()
		a := &Attribution{Generation: gen, Workspace: ws, Time: start,
			Paths: []PathAttribution{{Path: "p", Writers: []Writer{{PID: 7, Comm: "sh", Session: "sid:7"}}}}}
		e := SessionEntry{Workspace: ws, Lease: "l", Owner: "sid:7", Kind: "session", StartNS: start, Generation: gen, Paths: []string{"p"}}
		if err := m.RecordAttribution(a, []SessionEntry{e}); err != nil {
			t.Fatal(err)
		}
	}
	rec("keep", genKeep, 1)
	rec("gone", genGone, 2)
	if _, err := m.Remove("gone", false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GC(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := m.Attribution(genKeep); err != nil || !ok {
		t.Errorf("attribution of a kept generation: ok=%v err=%v", ok, err)
	}
	if _, ok, err := m.Attribution(genGone); err != nil || ok {
		t.Errorf("attribution of a collected generation: ok=%v err=%v, want gone", ok, err)
	}
	if bl, err := m.Blame("keep", "p", true); err != nil || len(bl) != 1 {
		t.Errorf("blame keep p: %+v, %v", bl, err)
	}
	all, err := m.st.ListMeta(nsSessions)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Errorf("session entries after gc: %d, want only keep's", len(all))
	}
}

func TestBlameRefusesBadPaths(t *testing.T) {
	m := openTest(t)
	src := t.TempDir()
	write(t, src, map[string]string{"a": "1"})
	if _, _, err := m.Create(context.Background(), "w", src); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../x", "a/../b", "a//b"} {
		if _, err := m.Blame("w", p, false); err == nil {
			t.Errorf("blame %q: no error", p)
		}
	}
	if _, err := m.Blame("nosuch", "a", false); err == nil {
		t.Error("blame of an unknown workspace: no error")
	}
}
