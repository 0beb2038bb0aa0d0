package store_test

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
	"pgregory.net/rapid"
)

// modelWS is the reference model of one workspace.
type modelWS struct {
	parent string
	log    []store.ID // gens, oldest first
	bases  []store.ID
}

// TestWorkspaceModel drives random creates, appends (single and multi,
// with right and wrong expectations) and deletes against the store and a
// plain in-memory model, and checks they agree after every step.
func TestWorkspaceModel(t *testing.T) {
	t.Run("bolt", func(t *testing.T) { testWorkspaceModel(t, store.Options{}) })
	t.Run("memory", func(t *testing.T) { testWorkspaceModel(t, store.Options{Meta: meta.NewMemory()}) })
}

// testWorkspaceModel is TestWorkspaceModel on a store opened with opt.
func testWorkspaceModel(t *testing.T, opt store.Options) {
	// One store serves every run (opening one per run dominates the
	// cost); each run starts by deleting what the previous one left.
	s := storetest.MustOpenWith(t, opt)
	var gens []store.ID
	for i := range 6 {
		gens = append(gens, storetest.PutGen(t, s, "m", store.GenCommit, map[string]string{"f": fmt.Sprint(i)}))
	}
	names := []string{"a", "b", "c", "d"}
	rapid.Check(t, func(rt *rapid.T) {
		clearWorkspaces(rt, s)
		model := map[string]*modelWS{}
		head := func(n string) store.ID {
			if w, ok := model[n]; ok {
				return w.log[len(w.log)-1]
			}
			return store.ID{}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"create": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				parent := rapid.SampledFrom(append([]string{""}, names...)).Draw(rt, "parent")
				gen := rapid.SampledFrom(gens).Draw(rt, "gen")
				if parent == name {
					parent = ""
				}
				_, err := s.CreateWorkspace(store.Workspace{Name: name, Parent: parent}, store.HeadEntry{Gen: gen, Base: head(parent), Kind: store.GenCreate})
				switch {
				case model[name] != nil:
					if !errors.Is(err, store.ErrExists) {
						rt.Fatalf("create existing %s: %v", name, err)
					}
				case parent != "" && model[parent] == nil:
					if !errors.Is(err, store.ErrNotFound) {
						rt.Fatalf("create %s under missing %s: %v", name, parent, err)
					}
				case err != nil:
					rt.Fatalf("create %s: %v", name, err)
				default:
					model[name] = &modelWS{parent: parent, log: []store.ID{gen}, bases: []store.ID{head(parent)}}
				}
			},
			"append": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				expect := head(name)
				if rapid.Bool().Draw(rt, "stale") {
					expect = rapid.SampledFrom(gens).Draw(rt, "expect")
				}
				gen := rapid.SampledFrom(gens).Draw(rt, "gen")
				w, err := s.CompareAndAppend(name, expect, store.HeadEntry{Gen: gen, Kind: store.GenCommit}, nil)
				m := model[name]
				switch {
				case m == nil:
					if !errors.Is(err, store.ErrNotFound) {
						rt.Fatalf("append to missing %s: %v", name, err)
					}
				case expect != head(name):
					if !errors.Is(err, store.ErrHeadMoved) {
						rt.Fatalf("stale append to %s: %v", name, err)
					}
				case err != nil:
					rt.Fatalf("append to %s: %v", name, err)
				default:
					m.log = append(m.log, gen)
					m.bases = append(m.bases, store.ID{})
					if w.Seq != uint64(len(m.log)) {
						rt.Fatalf("seq %d, model has %d entries", w.Seq, len(m.log))
					}
				}
			},
			"appendMany": func(rt *rapid.T) {
				n1 := rapid.SampledFrom(names).Draw(rt, "n1")
				n2 := rapid.SampledFrom(names).Draw(rt, "n2")
				gen := rapid.SampledFrom(gens).Draw(rt, "gen")
				e2 := head(n2)
				if n1 == n2 {
					e2 = gen // the second append sees the first one's head
				}
				if rapid.Bool().Draw(rt, "stale") {
					e2 = rapid.SampledFrom(gens).Draw(rt, "expect")
				}
				_, err := s.CompareAndAppendMany([]store.Append{
					{Workspace: n1, ExpectHead: head(n1), Entry: store.HeadEntry{Gen: gen, Base: gen, Kind: store.GenLand}},
					{Workspace: n2, ExpectHead: e2, Entry: store.HeadEntry{Gen: gen, Base: gen, Kind: store.GenRebase}},
				}, nil)
				ok := model[n1] != nil && model[n2] != nil
				if ok {
					want2 := head(n2)
					if n1 == n2 {
						want2 = gen
					}
					ok = e2 == want2
				}
				if ok != (err == nil) {
					rt.Fatalf("appendMany(%s,%s) err %v, model says ok=%v", n1, n2, err, ok)
				}
				if ok {
					for _, n := range []string{n1, n2} {
						model[n].log = append(model[n].log, gen)
						model[n].bases = append(model[n].bases, gen)
					}
				}
			},
			"delete": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				err := s.DeleteWorkspace(name)
				hasKids := false
				for _, w := range model {
					hasKids = hasKids || w.parent == name
				}
				switch {
				case model[name] == nil:
					if !errors.Is(err, store.ErrNotFound) {
						rt.Fatalf("delete missing %s: %v", name, err)
					}
				case hasKids:
					if !errors.Is(err, store.ErrHasChildren) {
						rt.Fatalf("delete parent %s: %v", name, err)
					}
				case err != nil:
					rt.Fatalf("delete %s: %v", name, err)
				default:
					delete(model, name)
				}
			},
			"": func(rt *rapid.T) {
				ws, err := s.ListWorkspaces()
				if err != nil {
					rt.Fatal(err)
				}
				var got, want []string
				for _, w := range ws {
					got = append(got, w.Name)
				}
				for n := range model {
					want = append(want, n)
				}
				sort.Strings(want)
				if !slices.Equal(got, want) {
					rt.Fatalf("workspaces %v, model %v", got, want)
				}
				for _, w := range ws {
					m := model[w.Name]
					if w.Head != head(w.Name) || w.Seq != uint64(len(m.log)) || w.Base != m.bases[len(m.bases)-1] || w.Parent != m.parent {
						rt.Fatalf("workspace %+v disagrees with model %+v", w, m)
					}
					log, err := s.HeadLog(w.Name, 0)
					if err != nil {
						rt.Fatal(err)
					}
					if len(log) != len(m.log) {
						rt.Fatalf("%s log has %d entries, model %d", w.Name, len(log), len(m.log))
					}
					for i, e := range log {
						j := len(m.log) - 1 - i
						if e.Gen != m.log[j] || e.Seq != uint64(j+1) || e.Base != m.bases[j] {
							rt.Fatalf("%s log[%d] = %+v, model gen %s", w.Name, i, e, m.log[j].Short())
						}
					}
					var kids []string
					for n, c := range model {
						if c.parent == w.Name {
							kids = append(kids, n)
						}
					}
					sort.Strings(kids)
					got, err := s.Children(w.Name)
					if err != nil {
						rt.Fatal(err)
					}
					if !slices.Equal(got, kids) {
						rt.Fatalf("children of %s = %v, model %v", w.Name, got, kids)
					}
				}
			},
		})
		ps, err := s.Check()
		if err != nil {
			rt.Fatal(err)
		}
		if len(ps) != 0 {
			rt.Fatalf("check: %v", ps)
		}
	})
	clearWorkspaces(t, s)
}

// clearWorkspaces deletes every workspace, leaves first.
func clearWorkspaces(t interface{ Fatal(...any) }, s *store.Store) {
	for {
		ws, err := s.ListWorkspaces()
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 0 {
			return
		}
		for _, w := range ws {
			if err := s.DeleteWorkspace(w.Name); err != nil && !errors.Is(err, store.ErrHasChildren) {
				t.Fatal(err)
			}
		}
	}
}
