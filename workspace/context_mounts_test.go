package workspace

import "testing"

func TestReadOnlyRootOfFollowsContextState(t *testing.T) {
	m := openTest(t)
	twoRootContext(t, m) // main over app, lib; c1 over c1.app, c1.lib
	check := func(ws, wantCtx string, want bool) {
		t.Helper()
		ctx, ro, err := m.ReadOnlyRootOf(ws)
		if err != nil {
			t.Fatal(err)
		}
		if ro != want || ctx != wantCtx {
			t.Fatalf("ReadOnlyRootOf(%s) = %q, %v; want %q, %v", ws, ctx, ro, wantCtx, want)
		}
	}
	for _, ws := range []string{"app", "lib", "c1.app", "nosuch"} {
		check(ws, "", false)
	}
	if _, err := m.FreezeContext("main"); err != nil {
		t.Fatal(err)
	}
	check("app", "main", true)
	check("lib", "main", true)
	check("c1.app", "", false) // forks are roots of c1, which is active
	if _, err := m.DiscardContext("c1", DefaultDiscardBound); err != nil {
		t.Fatal(err)
	}
	check("c1.lib", "c1", true)
}

func TestRootsWithoutMountpoint(t *testing.T) {
	c := Context{Roots: []ContextRoot{{Workspace: "a", Mountpoint: "/m/a"}, {Workspace: "b"}, {Workspace: "c"}}}
	if got := c.RootsWithoutMountpoint(); len(got) != 2 || got[0] != "b" || got[1] != "c" {
		t.Fatalf("RootsWithoutMountpoint = %q", got)
	}
}
