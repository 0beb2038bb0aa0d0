package sessions

import (
	"fmt"
	"os"
	"testing"

	"pgregory.net/rapid"
)

// TestTrackerModel drives the tracker with random process births and
// deaths, requests, sweeps, Bind/Unbind and EndAll, and compares every
// Begin/End and the owner table with a simple model.
func TestTrackerModel(t *testing.T) {
	base := t.TempDir()
	sessions := []int{100, 200, 300}
	pidsOf := func(sid int) []int { return []int{sid, sid + 1, sid + 2} }
	var allPIDs []int
	for _, s := range sessions {
		allPIDs = append(allPIDs, pidsOf(s)...)
	}
	owner := func(sid int) Owner { return MakeOwner(BySID, sid) }

	rapid.Check(t, func(rt *rapid.T) {
		root, err := os.MkdirTemp(base, "proc")
		if err != nil {
			rt.Fatal(err)
		}
		fp := &fakeProc{t: t, root: root}
		rec := newRecorder()
		tr, err := New(Config{Handler: rec, ProcRoot: root, SweepInterval: -1})
		if err != nil {
			rt.Fatal(err)
		}
		defer tr.Close()

		alive := map[int]bool{}
		active := map[Owner]bool{} // implicit lease held
		bound := map[Owner]int{}
		begins := map[Owner]int{}
		ends := map[Owner]int{}
		gen := uint64(1)
		sidOf := func(pid int) int { return pid - pid%100 }
		endOwner := func(o Owner) { active[o] = false; ends[o]++ }

		rt.Repeat(map[string]func(*rapid.T){
			"spawn": func(rt *rapid.T) {
				p := rapid.SampledFrom(allPIDs).Draw(rt, "pid")
				if alive[p] {
					rt.Skip("alive")
				}
				gen++
				fp.addStart(p, p, sidOf(p), gen)
				alive[p] = true
			},
			"kill": func(rt *rapid.T) {
				p := rapid.SampledFrom(allPIDs).Draw(rt, "pid")
				if !alive[p] {
					rt.Skip("dead")
				}
				fp.remove(p)
				alive[p] = false
			},
			"admit": func(rt *rapid.T) {
				p := rapid.SampledFrom(allPIDs).Draw(rt, "pid")
				if !alive[p] {
					rt.Skip("dead processes make no requests")
				}
				if err := tr.Admit(uint32(p)); err != nil {
					rt.Fatalf("Admit(%d): %v", p, err)
				}
				o := owner(sidOf(p))
				if bound[o] == 0 && !active[o] {
					active[o] = true
					begins[o]++
				}
			},
			"sweep": func(rt *rapid.T) {
				tr.Sweep()
				for _, s := range sessions {
					o := owner(s)
					if !active[o] {
						continue
					}
					live := false
					for _, p := range pidsOf(s) {
						live = live || alive[p]
					}
					if !live {
						endOwner(o)
					}
				}
			},
			"bind": func(rt *rapid.T) {
				o := owner(rapid.SampledFrom(sessions).Draw(rt, "sid"))
				tr.Bind(o)
				if bound[o] == 0 && active[o] {
					endOwner(o)
				}
				bound[o]++
			},
			"unbind": func(rt *rapid.T) {
				o := owner(rapid.SampledFrom(sessions).Draw(rt, "sid"))
				tr.Unbind(o)
				if bound[o] > 0 {
					bound[o]--
				}
			},
			"endAll": func(rt *rapid.T) {
				tr.EndAll()
				for o, a := range active {
					if a {
						endOwner(o)
					}
				}
			},
			"": func(rt *rapid.T) { // invariants, checked after every action
				for _, s := range sessions {
					o := owner(s)
					b, e := rec.counts(o)
					if b != begins[o] || e != ends[o] {
						rt.Fatalf("%s: begins=%d ends=%d, model %d %d", o, b, e, begins[o], ends[o])
					}
				}
				var want []string
				for _, s := range sessions {
					o := owner(s)
					if bound[o] > 0 {
						want = append(want, fmt.Sprintf("%s explicit", o))
					} else if active[o] {
						want = append(want, fmt.Sprintf("%s implicit", o))
					}
				}
				var got []string
				for _, oi := range tr.Owners() {
					kind := "implicit"
					if oi.Explicit {
						kind = "explicit"
					}
					got = append(got, fmt.Sprintf("%s %s", oi.Owner, kind))
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					rt.Fatalf("owners = %v, model %v", got, want)
				}
				rec.mu.Lock()
				v := rec.violations
				rec.mu.Unlock()
				if len(v) > 0 {
					rt.Fatalf("handler contract violated: %v", v)
				}
			},
		})
	})
}
