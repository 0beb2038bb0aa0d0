package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/store"
)

// twoRootContext makes workspaces app and lib, context main over them, and
// its fork c1 with one change committed into each forked root.
func twoRootContext(t *testing.T, m *Manager) {
	t.Helper()
	dir := t.TempDir()
	for _, ws := range []string{"app", "lib"} {
		src := filepath.Join(dir, ws)
		write(t, src, map[string]string{"f": ws + "\n"})
		if _, _, err := m.Create(context.Background(), ws, src); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.CreateContext("main", []ContextRoot{{Workspace: "app"}, {Workspace: "lib"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ForkContext("main", "c1"); err != nil {
		t.Fatal(err)
	}
	for _, ws := range []string{"app", "lib"} {
		src := filepath.Join(dir, "c1-"+ws)
		write(t, src, map[string]string{"f": ws + "\n", "new-" + ws: "x"})
		if _, _, err := m.Commit(context.Background(), "c1."+ws, src); err != nil {
			t.Fatal(err)
		}
	}
}

func heads(t *testing.T, m *Manager, names ...string) []store.ID {
	t.Helper()
	var out []store.ID
	for _, n := range names {
		w, err := m.Get(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, w.Head)
	}
	return out
}

func TestLandContextAllRootsAtOnce(t *testing.T) {
	m := openTest(t)
	twoRootContext(t, m)
	want := heads(t, m, "c1.app", "c1.lib")
	res, err := m.LandContext("c1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeLanded || len(res.Roots) != 2 {
		t.Fatalf("result = %+v", res)
	}
	if got := heads(t, m, "app", "lib"); got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("parents = %v, want %v", got, want)
	}
	if ops, _ := m.PublicationOperations(); len(ops) != 0 {
		t.Fatalf("publication records left: %q", ops)
	}
	if keys, _ := m.claims().Keys(); len(keys) != 0 {
		t.Fatalf("claims left: %q", keys)
	}
}

func TestLandContextConflictLandsNothing(t *testing.T) {
	m := openTest(t)
	twoRootContext(t, m)
	// lib's parent changes f too: c1.lib conflicts, c1.app would merge.
	src := filepath.Join(t.TempDir(), "lib2")
	write(t, src, map[string]string{"f": "changed in lib\n"})
	if _, _, err := m.Commit(context.Background(), "lib", src); err != nil {
		t.Fatal(err)
	}
	src = filepath.Join(t.TempDir(), "c1lib")
	write(t, src, map[string]string{"f": "changed in c1.lib\n"})
	if _, _, err := m.Commit(context.Background(), "c1.lib", src); err != nil {
		t.Fatal(err)
	}
	before := heads(t, m, "app", "lib")
	res, err := m.LandContext("c1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != OutcomeConflicted || res.Roots[0].Outcome != OutcomeNotLanded || res.Roots[1].Outcome != OutcomeConflicted {
		t.Fatalf("result = %+v", res)
	}
	if got := heads(t, m, "app", "lib"); got[0] != before[0] || got[1] != before[1] {
		t.Fatal("a parent moved although a root conflicted")
	}
	if keys, _ := m.claims().Keys(); len(keys) != 0 {
		t.Fatalf("claim not released: %q", keys)
	}
}

func TestFrozenContextRefusesForkAndLand(t *testing.T) {
	m := openTest(t)
	twoRootContext(t, m)
	if _, err := m.FreezeContext("main"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ForkContext("main", "c2"); !errors.Is(err, ErrContextFrozen) || !errors.Is(err, ErrBusy) {
		t.Fatalf("fork of frozen: %v", err)
	}
	if _, err := m.LandContext("c1"); !errors.Is(err, ErrContextFrozen) {
		t.Fatalf("land into frozen: %v", err)
	}
	if _, err := m.Get("c2.app"); err == nil {
		t.Fatal("refused fork left a workspace behind")
	}
}

func TestClaimParentIsIdempotentAndExclusive(t *testing.T) {
	m := openTest(t)
	if err := m.ClaimParent("p", "op1"); err != nil {
		t.Fatal(err)
	}
	if err := m.ClaimParent("p", "op1"); err != nil {
		t.Fatalf("same operation: %v", err)
	}
	if err := m.ClaimParent("p", "op2"); !errors.Is(err, ErrContextClaimed) {
		t.Fatalf("other operation: %v", err)
	}
	if err := m.ReleaseParent("p", "op2"); err != nil {
		t.Fatal(err)
	}
	if err := m.ClaimParent("p", "op2"); !errors.Is(err, ErrContextClaimed) {
		t.Fatal("release by another operation dropped the claim")
	}
	if err := m.ReleaseParent("p", "op1"); err != nil {
		t.Fatal(err)
	}
	if err := m.ClaimParent("p", "op2"); err != nil {
		t.Fatalf("after release: %v", err)
	}
	// A claim without a publication record is an orphan: recovery frees it.
	if done, err := m.RecoverContextLandings(); err != nil || len(done) != 1 {
		t.Fatalf("recover = %v, %v", done, err)
	}
	if keys, _ := m.claims().Keys(); len(keys) != 0 {
		t.Fatalf("orphan claim kept: %q", keys)
	}
}

type crashed struct{ point string }

// TestLandContextCrashRecovery stops a landing at each failpoint (a panic
// unwinds it without running its cleanup) and checks that recovery lands
// every root or none.
func TestLandContextCrashRecovery(t *testing.T) {
	for _, tc := range []struct {
		point  string
		landed bool
	}{
		{"context.land.after-claim", false},
		{"context.land.after-first", false},
		{"context.land.after-prepare", false},
		{"context.land.after-append", true},
	} {
		t.Run(tc.point, func(t *testing.T) {
			m := openTest(t)
			twoRootContext(t, m)
			before := heads(t, m, "app", "lib")
			want := heads(t, m, "c1.app", "c1.lib")
			disarm := failpoint.ArmForTest(func(name string) { panic(crashed{name}) }, tc.point)
			func() {
				defer func() {
					if r := recover(); r != (crashed{tc.point}) {
						t.Fatalf("landing did not stop at %s: %v", tc.point, r)
					}
				}()
				_, _ = m.LandContext("c1")
			}()
			disarm()
			if ops, _ := m.PublicationOperations(); len(ops) != 1 {
				t.Fatalf("publication records after crash: %q", ops)
			}
			done, err := m.Recover()
			if err != nil {
				t.Fatal(err)
			}
			got := heads(t, m, "app", "lib")
			switch {
			case tc.landed && (got[0] != want[0] || got[1] != want[1]):
				t.Fatalf("recovery after the append: parents %v, want %v (%q)", got, want, done)
			case !tc.landed && (got[0] != before[0] || got[1] != before[1]):
				t.Fatalf("recovery before the append: parents moved (%q)", done)
			}
			if ops, _ := m.PublicationOperations(); len(ops) != 0 {
				t.Fatalf("publication records after recovery: %q", ops)
			}
			if keys, _ := m.claims().Keys(); len(keys) != 0 {
				t.Fatalf("claims after recovery: %q", keys)
			}
			if !tc.landed {
				if res, err := m.LandContext("c1"); err != nil || res.Outcome != OutcomeLanded {
					t.Fatalf("land after rollback = %+v, %v", res, err)
				}
			}
		})
	}
}

// contextModel is the reference for the property test.
type contextModel struct {
	parent map[string]string
	state  map[string]ContextState
}

func (md *contextModel) subtree(name string) []string {
	out := []string{name}
	for i := 0; i < len(out); i++ {
		for c, p := range md.parent {
			if p == out[i] {
				out = append(out, c)
			}
		}
	}
	return out
}

// TestContextOperationsMatchModel runs random create / fork / freeze /
// discard sequences against a manager and a plain model.
func TestContextOperationsMatchModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "ctx-model-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		m, err := Open(dir, Options{NoSync: true})
		if err != nil {
			rt.Fatal(err)
		}
		defer m.Close()
		if _, _, err := m.Create(context.Background(), "ws", ""); err != nil {
			rt.Fatal(err)
		}
		md := &contextModel{parent: map[string]string{}, state: map[string]ContextState{}}
		var names, touched []string
		n := 0
		existing := func(rt *rapid.T, label string) string { return rapid.SampledFrom(names).Draw(rt, label) }
		// An explicit, short action loop instead of rt.Repeat: every step
		// costs a few corestate transactions, and rapid's default of ~30
		// steps per check would make this the slowest test of the package.
		actions := map[string]func(*rapid.T){
			"create": func(rt *rapid.T) {
				n++
				name := fmt.Sprintf("r%d", n)
				if _, err := m.CreateContext(name, []ContextRoot{{Workspace: "ws"}}); err != nil {
					rt.Fatal(err)
				}
				md.parent[name], md.state[name] = "", ContextActive
				touched = append(touched, name)
				names = append(names, name)
			},
			"fork": func(rt *rapid.T) {
				p := existing(rt, "parent")
				n++
				child := fmt.Sprintf("k%d", n)
				_, err := m.ForkContext(p, child)
				switch md.state[p] {
				case ContextActive:
					if err != nil {
						rt.Fatalf("fork %s: %v", p, err)
					}
					md.parent[child], md.state[child] = p, ContextActive
					touched = append(touched, child)
					names = append(names, child)
				case ContextFrozen:
					if !errors.Is(err, ErrContextFrozen) {
						rt.Fatalf("fork of frozen %s: %v", p, err)
					}
				case ContextDiscarded:
					if !errors.Is(err, ErrContextDiscarded) {
						rt.Fatalf("fork of discarded %s: %v", p, err)
					}
				}
			},
			"freeze": func(rt *rapid.T) {
				c := existing(rt, "ctx")
				_, err := m.FreezeContext(c)
				if md.state[c] == ContextDiscarded {
					if !errors.Is(err, ErrContextDiscarded) {
						rt.Fatalf("freeze of discarded: %v", err)
					}
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				md.state[c] = ContextFrozen
				touched = append(touched, c)
			},
			"discard": func(rt *rapid.T) {
				c := existing(rt, "ctx")
				bound := rapid.IntRange(1, 6).Draw(rt, "max")
				tree := md.subtree(c)
				got, err := m.DiscardContext(c, bound)
				if len(tree) > bound {
					if !errors.Is(err, ErrTraversalLimit) {
						rt.Fatalf("discard %s (%d contexts) with bound %d: %v", c, len(tree), bound, err)
					}
					return
				}
				if err != nil || len(got) != len(tree) {
					rt.Fatalf("discard %s = %d contexts, %v; model %v", c, len(got), err, tree)
				}
				for _, x := range tree {
					md.state[x] = ContextDiscarded
				}
				touched = append(touched, tree...)
			},
		}
		invariant := func(rt *rapid.T) {
			// After every step: the contexts the step touched.
			for _, name := range touched {
				c, err := m.GetContext(name)
				if err != nil {
					rt.Fatal(err)
				}
				if c.State != md.state[name] || c.Parent != md.parent[name] {
					rt.Fatalf("%s: state %s parent %q; model %s %q", name, c.State, c.Parent, md.state[name], md.parent[name])
				}
			}
			touched = touched[:0]
		}
		kinds := []string{"create", "fork", "freeze", "discard"}
		steps := rapid.IntRange(1, 8).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			kind := rapid.SampledFrom(kinds).Draw(rt, "action")
			if kind != "create" && len(names) == 0 {
				kind = "create"
			}
			actions[kind](rt)
			invariant(rt)
		}
		all, err := m.ListContexts()
		if err != nil {
			rt.Fatal(err)
		}
		if len(all) != len(md.state) {
			rt.Fatalf("%d contexts, model %d", len(all), len(md.state))
		}
		for _, c := range all {
			if c.State != md.state[c.Name] || c.Parent != md.parent[c.Name] {
				rt.Fatalf("%s: state %s parent %q; model %s %q", c.Name, c.State, c.Parent, md.state[c.Name], md.parent[c.Name])
			}
		}
	})
}

// TestConcurrentForksOfOneParent forks one context from several goroutines
// at once: the transactions race on the parent's index records, which is
// bookkeeping, so every fork succeeds and the index lists every child.
func TestConcurrentForksOfOneParent(t *testing.T) {
	m := openTest(t)
	if _, _, err := m.Create(context.Background(), "ws", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateContext("p", []ContextRoot{{Workspace: "ws"}}); err != nil {
		t.Fatal(err)
	}
	const n = 6
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := m.ForkContext("p", fmt.Sprintf("k%d", i))
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	kids, err := m.Contexts().Children("p", n)
	if err != nil || len(kids) != n {
		t.Fatalf("children = %v, %v", kids, err)
	}
}

// TestConcurrentLandingsIntoOneParent lands two children at once: the
// parent's claim admits one landing at a time; the other is refused (busy)
// or lands after it, and no record or claim is left behind.
func TestConcurrentLandingsIntoOneParent(t *testing.T) {
	m := openTest(t)
	twoRootContext(t, m)
	if _, err := m.ForkContext("main", "c2"); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "c2")
	write(t, src, map[string]string{"f": "app\n", "c2-only": "x"})
	if _, _, err := m.Commit(context.Background(), "c2.app", src); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, c := range []string{"c1", "c2"} {
		go func() {
			res, err := m.LandContext(c)
			if err == nil && res.Outcome == OutcomeConflicted {
				err = fmt.Errorf("%s conflicted: %+v", c, res)
			}
			errs <- err
		}()
	}
	landed := 0
	for i := 0; i < 2; i++ {
		switch err := <-errs; {
		case err == nil:
			landed++
		case errors.Is(err, ErrBusy):
		default:
			t.Fatal(err)
		}
	}
	if landed == 0 {
		t.Fatal("neither landing succeeded")
	}
	if ops, _ := m.PublicationOperations(); len(ops) != 0 {
		t.Fatalf("publication records left: %q", ops)
	}
	if keys, _ := m.claims().Keys(); len(keys) != 0 {
		t.Fatalf("claims left: %q", keys)
	}
}

// TestForkContextAdoptsForksOfAnInterruptedFork: a fork that crashed after
// forking some roots is retried; an unrelated workspace of the same name
// refuses the fork before anything is created.
func TestForkContextAdoptsForksOfAnInterruptedFork(t *testing.T) {
	m := openTest(t)
	twoRootContext(t, m)
	if _, err := m.Fork("app", "c2.app", ""); err != nil { // as a crash would leave it
		t.Fatal(err)
	}
	c, err := m.ForkContext("main", "c2")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Roots) != 2 || c.Roots[0].Workspace != "c2.app" || c.Roots[1].Workspace != "c2.lib" {
		t.Fatalf("roots = %+v", c.Roots)
	}
	if _, _, err := m.Create(context.Background(), "c3.lib", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ForkContext("main", "c3"); !errors.Is(err, ErrExists) {
		t.Fatalf("fork over an unrelated workspace: %v", err)
	}
	if _, err := m.Get("c3.app"); !errors.Is(err, ErrUnknownWorkspace) {
		t.Fatalf("refused fork created c3.app: %v", err)
	}
}
