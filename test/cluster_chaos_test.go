package test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
)

// Landings while etcd members die (issue #28 "Tests"): two nodes run
// streams of `land` into one parent while the test stops and restarts
// etcd members, the leader among them, and for a while two of the three
// (no quorum). Every landing either happened exactly once (its file in
// the parent, brought by one entry of the parent's head log) or failed
// with a clear error (naming etcd, or the head that the other node's
// landing moved under it: exit 4, retry) and changed nothing. The calls, returns
// and outcomes, with reads of the parent's head, are checked with
// porcupine against a register of heads whose writes are the parent's
// head log.

// chaosIn is a land of kid (a write of the register) or a read of the
// parent's head.
type chaosIn struct {
	read bool
	kid  string
}

// chaosOut: a read's head; a land's outcome and, for one that landed, the
// head before its log entry and the head it made.
type chaosOut struct {
	head       string
	ok         bool
	prev, next string
}

var chaosModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		h, in, out := state.(string), input.(chaosIn), output.(chaosOut)
		switch {
		case in.read:
			return out.head == h, h
		case out.ok:
			return h == out.prev, out.next
		default: // failed: changed nothing
			return true, h
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(chaosIn), output.(chaosOut)
		if in.read {
			return "read -> " + out.head
		}
		return fmt.Sprintf("land %s -> %+v", in.kid, out)
	},
}

type chaosEntry struct {
	Gen   string   `json:"gen"`
	Kind  string   `json:"kind"`
	Paths []string `json:"paths"`
}

// headLog is ws's head log with changed paths, oldest first.
func (e *env) headLog(ws string) []chaosEntry {
	e.t.Helper()
	r := e.run("--json", "log", ws, "--paths")
	if r.code != 0 {
		e.t.Fatalf("log --json --paths %s: %s", ws, r)
	}
	var l []chaosEntry
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		e.t.Fatalf("log --json: %v\n%s", err, r.stdout)
	}
	slices.Reverse(l)
	return l
}

func TestLandingsWhileEtcdMembersDie(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts etcd members")
	}
	c := etcdtest.Start(t)
	shared := filepath.Join(t.TempDir(), "blobs")
	nodes := []*env{
		clusterNode(t, c, "chaos", "node-a", "--blobs", shared),
		clusterNode(t, c, "chaos", "node-b", "--blobs", shared),
	}
	src := filepath.Join(nodes[0].dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n"})
	nodes[0].ok("create", "p", "--from", src)

	// Each node's kids: forks of p that wrote one file each.
	const perNode = 10
	kids := make([][]string, len(nodes))
	for n, e := range nodes {
		for i := range perNode {
			kid := fmt.Sprintf("k%d-%02d", n, i)
			dir := filepath.Join(e.dir, "c-"+kid)
			writeTree(t, dir, map[string]string{"base.txt": "base\n", kid + ".txt": kid + "\n"})
			e.ok("fork", "p", kid)
			e.ok("commit", kid, dir)
			kids[n] = append(kids[n], kid)
		}
	}
	start := nodes[0].headLog("p")
	first := start[len(start)-1].Gen

	var (
		mu      sync.Mutex
		history []porcupine.Operation
		failed  = map[string]string{} // kid -> stderr
		landed  = map[string]bool{}
		done    atomic.Int64 // landings returned
	)
	t0 := time.Now()
	now := func() int64 { return int64(time.Since(t0)) }
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for n, e := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, kid := range kids[n] {
				call := now()
				r := e.run("land", kid)
				ret := now()
				mu.Lock()
				if r.code == 0 {
					landed[kid] = true
				} else {
					failed[kid] = fmt.Sprintf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
				}
				mu.Unlock()
				record(porcupine.Operation{ClientId: n, Input: chaosIn{kid: kid}, Output: chaosOut{ok: r.code == 0}, Call: call, Return: ret})
				done.Add(1)
				// A read of p's head (its newest log entry).
				call = now()
				if r := e.run("log", "p", "-n", "1"); r.code == 0 {
					gen, _, _ := strings.Cut(r.stdout, "\t")
					record(porcupine.Operation{ClientId: n, Input: chaosIn{read: true}, Output: chaosOut{head: gen}, Call: call, Return: now()})
				}
			}
		}()
	}

	// The faults, each after a few more landings returned: the leader
	// stopped and restarted, a follower stopped and restarted, the leader
	// and a follower stopped (no quorum), both restarted.
	after := func(k int64) {
		target := done.Load() + k
		waitFor(t, 60*time.Second, fmt.Sprintf("%d landings to return", target), func() bool { return done.Load() >= target || done.Load() == 2*perNode })
	}
	leader := func() int {
		l := -1
		waitFor(t, 20*time.Second, "an etcd leader", func() bool { l = c.Leader(); return l >= 0 })
		return l
	}
	var faults []string
	after(2)
	l := leader()
	c.Stop(l)
	faults = append(faults, fmt.Sprintf("stopped leader m%d at %v", l, time.Since(t0).Round(time.Millisecond)))
	after(3)
	c.Restart(l)
	f := (leader() + 1) % 3
	c.Stop(f)
	faults = append(faults, fmt.Sprintf("restarted m%d, stopped follower m%d at %v", l, f, time.Since(t0).Round(time.Millisecond)))
	after(3)
	c.Restart(f)
	l = leader()
	f = (l + 1) % 3
	c.Stop(l)
	c.Stop(f)
	faults = append(faults, fmt.Sprintf("restarted m%d, stopped leader m%d and m%d (no quorum) at %v", f, l, f, time.Since(t0).Round(time.Millisecond)))
	after(2)
	c.Restart(l)
	c.Restart(f)
	faults = append(faults, fmt.Sprintf("restarted m%d and m%d at %v", l, f, time.Since(t0).Round(time.Millisecond)))
	wg.Wait()
	t.Logf("faults: %s", strings.Join(faults, "; "))
	t.Logf("%d landed, %d failed, in %v", len(landed), len(failed), time.Since(t0).Round(time.Millisecond))

	// p's history: every entry after the start is one landing's, naming
	// its kid's file; each kid's file is brought by at most one entry.
	hist := nodes[1].headLog("p")
	if len(hist) < len(start) || hist[len(start)-1].Gen != first {
		t.Fatalf("p's history does not continue from its start")
	}
	by := map[string]int{} // kid -> index of the entry that brought its file
	for i, e := range hist[len(start):] {
		var brought []string
		for _, p := range e.Paths {
			for _, ks := range kids {
				for _, kid := range ks {
					if strings.Contains(p, kid+".txt") {
						brought = append(brought, kid)
					}
				}
			}
		}
		if len(brought) != 1 {
			t.Fatalf("p's entry %s (%s) brings %v, want one kid's file", e.Gen, e.Kind, brought)
		}
		if _, twice := by[brought[0]]; twice {
			t.Fatalf("%s landed twice in p", brought[0])
		}
		by[brought[0]] = len(start) + i
	}
	for kid, why := range failed {
		if _, ok := by[kid]; ok {
			t.Errorf("land %s failed (%s) but p has its file", kid, why)
		}
		// Clear: it names etcd, or the other node's landing that moved
		// a head under it (a compare-and-append that lost, exit 4).
		if !strings.Contains(why, "etcd") && !strings.Contains(why, "moved") {
			t.Errorf("land %s failed without naming etcd or what moved: %s", kid, why)
		}
		t.Logf("land %s failed: %s", kid, why)
	}
	for kid := range landed {
		if _, ok := by[kid]; !ok {
			t.Errorf("land %s succeeded but p does not have its file", kid)
		}
	}
	if len(by) != len(landed) {
		t.Errorf("p's history brings %d kids' files, %d landings succeeded", len(by), len(landed))
	}
	if t.Failed() {
		t.FailNow()
	}
	// The register: p's head starts at first; a landing's write is its
	// entry of the log.
	for i, op := range history {
		in := op.Input.(chaosIn)
		if in.read || !op.Output.(chaosOut).ok {
			continue
		}
		j := by[in.kid]
		history[i].Output = chaosOut{ok: true, prev: hist[j-1].Gen, next: hist[j].Gen}
	}
	history = append([]porcupine.Operation{{ClientId: 2, Input: chaosIn{kid: "start"}, Output: chaosOut{ok: true, prev: "", next: first}, Call: -2, Return: -1}}, history...)
	if res := porcupine.CheckOperationsTimeout(chaosModel, history, time.Minute); res != porcupine.Ok {
		t.Fatalf("p's head history is not linearizable with the landings' calls and returns (%v): %d operations", res, len(history))
	}
	// Every kid that failed lands once etcd is whole again; then p holds
	// every file once, and fsck is clean on both nodes.
	for n, e := range nodes {
		for _, kid := range kids[n] {
			if _, ok := failed[kid]; ok {
				e.ok("land", kid)
			}
		}
	}
	exp := nodes[0].exportTo("p", "out")
	for _, ks := range kids {
		for _, kid := range ks {
			if got := readFile(t, filepath.Join(exp, kid+".txt")); got != kid+"\n" {
				t.Errorf("p's %s.txt: %q", kid, got)
			}
		}
	}
	nodes[0].fsck()
	nodes[1].fsck()
}

// TestChaosModelRejects: the register model of TestLandingsWhileEtcdMembersDie
// rejects two landings made after the same head (a lost update), a read of
// a head older than a landing that returned before it, and a landing whose
// entry comes before one that returned before it was called.
func TestChaosModelRejects(t *testing.T) {
	start := porcupine.Operation{ClientId: 2, Input: chaosIn{kid: "start"}, Output: chaosOut{ok: true, next: "g0"}, Call: 0, Return: 1}
	land := func(c int, kid, prev, next string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: chaosIn{kid: kid}, Output: chaosOut{ok: true, prev: prev, next: next}, Call: call, Return: ret}
	}
	read := func(c int, head string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: chaosIn{read: true}, Output: chaosOut{head: head}, Call: call, Return: ret}
	}
	for name, h := range map[string][]porcupine.Operation{
		"lost update":  {start, land(0, "a", "g0", "g1", 2, 5), land(1, "b", "g0", "g2", 3, 6)},
		"stale read":   {start, land(0, "a", "g0", "g1", 2, 3), read(1, "g0", 4, 5)},
		"out of order": {start, land(0, "a", "g1", "g2", 2, 3), land(1, "b", "g0", "g1", 4, 5)},
	} {
		if porcupine.CheckOperations(chaosModel, h) {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := []porcupine.Operation{start, land(0, "a", "g0", "g1", 2, 5), land(1, "b", "g1", "g2", 3, 6), read(0, "g2", 7, 8),
		{ClientId: 1, Input: chaosIn{kid: "c"}, Output: chaosOut{}, Call: 7, Return: 9}}
	if !porcupine.CheckOperations(chaosModel, ok) {
		t.Errorf("a linearizable history was rejected")
	}
}
