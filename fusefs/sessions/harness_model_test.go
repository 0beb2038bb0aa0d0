package sessions

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// addP creates process pid with parent ppid (addStart's ppid is 1).
func (f *fakeProc) addP(pid, ppid, pgid, sid int, start uint64) {
	f.t.Helper()
	f.addStart(pid, pgid, sid, start)
	line := fmt.Sprintf("%d (tool) S %d %d %d 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 %d 123456 789 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
		pid, ppid, pgid, sid, start)
	if err := os.WriteFile(filepath.Join(f.root, strconv.Itoa(pid), "stat"), []byte(line), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// TestHarnessModel drives the tracker with a harness (pid 50, session 50)
// and its tool trees — direct children 60 (same session) and 61 (its own
// session 61), grandchildren 70 (of 60) and 71 (of 61, session 61) — beside
// an ordinary session (100, 101), with random declarations, births and
// deaths (a dead parent's children are reparented to init), requests and
// sweeps, and compares every Begin/End and the owner table with a model:
//   - a declared harness's requests open no lease;
//   - a process whose parent chain reaches the harness through its direct
//     child C is owned by harness-child:C; so is one that was seen so
//     (by a request or a sweep) before its parent exited;
//   - everything else is owned by its session, which counts only its
//     processes that are neither the harness nor in a tree;
//   - a lease ends at the first sweep that finds no process of its owner.
//
// Pids are not reused before a sweep ran (see killed below).
func TestHarnessModel(t *testing.T) {
	base := t.TempDir()
	const h = 50
	parent := map[int]int{60: h, 61: h, 70: 60, 71: 61, 100: 1, 101: 100}
	sidOf := map[int]int{h: h, 60: h, 70: h, 61: 61, 71: 61, 100: 100, 101: 100}
	pids := []int{60, 61, 70, 71, 100, 101}

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

		gen := uint64(1)
		alive := map[int]bool{}
		ppid := map[int]int{}
		remembered := map[int]bool{}
		// killed: pids that exited since the last sweep. They are not
		// reused before a sweep ran: a pid reused within one sweep is
		// attributed to its old entry (the package's pid-reuse caveat),
		// which the kernel's cycling through the pid space makes rare.
		killed := map[int]bool{}
		declared := false
		spawn := func(p int) {
			gen++
			ppid[p] = parent[p]
			fp.addP(p, parent[p], p, sidOf[p], gen)
			alive[p] = true
		}
		spawn(h)
		active := map[Owner]bool{}
		begins, ends := map[Owner]int{}, map[Owner]int{}

		// treeOf is the tree p belongs to now (0: none).
		treeOf := func(p int) int {
			if !declared || p == h {
				return 0
			}
			switch {
			case ppid[p] == h:
				return p
			case ppid[p] > 1 && alive[ppid[p]] && ppid[ppid[p]] == h:
				return ppid[p]
			case remembered[p]:
				return parent[p]
			}
			return 0
		}
		ownerOf := func(p int) Owner {
			if c := treeOf(p); c > 0 {
				return HarnessChildOwner(c)
			}
			return MakeOwner(BySID, sidOf[p])
		}
		remember := func(p int) {
			if c := treeOf(p); c > 0 && c != p {
				remembered[p] = true
			}
		}

		rt.Repeat(map[string]func(*rapid.T){
			"declare": func(rt *rapid.T) {
				if err := tr.DeclareHarness(h); err != nil {
					rt.Fatalf("DeclareHarness: %v", err)
				}
				declared = true
			},
			"spawn": func(rt *rapid.T) {
				p := rapid.SampledFrom(pids).Draw(rt, "pid")
				if alive[p] || killed[p] || parent[p] != 1 && !alive[parent[p]] {
					rt.Skip("alive, reused before a sweep, or its parent is not alive")
				}
				remembered[p] = false
				spawn(p)
			},
			"kill": func(rt *rapid.T) {
				p := rapid.SampledFrom(pids).Draw(rt, "pid")
				if !alive[p] {
					rt.Skip("dead")
				}
				fp.remove(p)
				alive[p] = false
				killed[p] = true
				for _, c := range pids {
					if alive[c] && ppid[c] == p { // reparented to init
						ppid[c] = 1
						fp.addP(c, 1, c, sidOf[c], startOf(rt, root, c))
					}
				}
			},
			"admit": func(rt *rapid.T) {
				p := rapid.SampledFrom(append([]int{h}, pids...)).Draw(rt, "pid")
				if !alive[p] {
					rt.Skip("dead processes make no requests")
				}
				if err := tr.Admit(uint32(p)); err != nil {
					rt.Fatalf("Admit(%d): %v", p, err)
				}
				if declared && p == h {
					return
				}
				remember(p)
				if o := ownerOf(p); !active[o] {
					active[o] = true
					begins[o]++
				}
			},
			"sweep": func(rt *rapid.T) {
				tr.Sweep()
				clear(killed)
				for _, p := range pids {
					if alive[p] {
						remember(p)
					}
				}
				live := map[Owner]bool{}
				for _, p := range append([]int{h}, pids...) {
					if alive[p] && !(declared && p == h) {
						live[ownerOf(p)] = true
					}
				}
				for o, a := range active {
					if a && !live[o] {
						active[o] = false
						ends[o]++
					}
				}
			},
			"": func(rt *rapid.T) {
				for o := range begins {
					b, e := rec.counts(o)
					if b != begins[o] || e != ends[o] {
						rt.Fatalf("%s: begins=%d ends=%d, model %d %d", o, b, e, begins[o], ends[o])
					}
				}
				rec.mu.Lock()
				nb := len(rec.begins)
				v := rec.violations
				rec.mu.Unlock()
				if nb != len(begins) {
					rt.Fatalf("the tracker began leases for %d owners, the model for %d (%v)", nb, len(begins), begins)
				}
				if len(v) > 0 {
					rt.Fatalf("handler contract violated: %v", v)
				}
				var want []string
				for o, a := range active {
					if a {
						want = append(want, string(o))
					}
				}
				var got []string
				for _, oi := range tr.Owners() {
					got = append(got, string(oi.Owner))
				}
				if fmt.Sprint(sortStrings(got)) != fmt.Sprint(sortStrings(want)) {
					rt.Fatalf("owners = %v, model %v", got, want)
				}
			},
		})
	})
}

// startOf reads pid's start time from the fake tree.
func startOf(rt *rapid.T, root string, pid int) uint64 {
	var buf [statBufSize]byte
	si, err := readStat(root, pid, buf[:])
	if err != nil {
		rt.Fatalf("stat of %d: %v", pid, err)
	}
	return si.start
}

func sortStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
