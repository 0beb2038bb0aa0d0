package etcdmeta_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

// The head of one workspace as a register with compare-and-append, checked
// for linearizability (porcupine) over a history in which two stores (two
// clients) append, each under a permit of its own session-bound gate, and
// read concurrently while the etcd leader is stopped and restarted. An append that returned nil happened, one that returned
// ErrHeadMoved did not, and one that failed otherwise may have happened
// or not (its return is taken as "never", so it may take effect at any
// time after its call); every generation is in the head log at most once,
// and exactly once if its append returned nil.

type headInput struct {
	read         bool
	expect, next store.ID
}

type headOutput struct {
	head    store.ID // a read's result
	ok      bool     // the append returned nil
	moved   bool     // the append returned ErrHeadMoved
	unknown bool     // the append failed otherwise
}

var headModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{store.ID{}} },
	Step: func(state, input, output any) []any {
		h, in, out := state.(store.ID), input.(headInput), output.(headOutput)
		switch {
		case in.read:
			if out.head == h {
				return []any{h}
			}
		case out.ok:
			if h == in.expect {
				return []any{in.next}
			}
		case out.moved:
			if h != in.expect {
				return []any{h}
			}
		default: // unknown: applied or not
			if h == in.expect {
				return []any{h, in.next}
			}
			return []any{h}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(headInput), output.(headOutput)
		if in.read {
			return "read -> " + out.head.Short()
		}
		return fmt.Sprintf("append %s after %s -> %+v", in.next.Short(), in.expect.Short(), out)
	},
}

func TestHeadsLinearizableAcrossLeaderRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts an etcd member")
	}
	c := etcdtest.Start(t)
	nodes := []*store.Store{
		storetest.MustOpenWith(t, store.Options{Meta: etcdmeta.New(c.Client(), "linearizable")}),
		storetest.MustOpenWith(t, store.Options{Meta: etcdmeta.New(c.Client(), "linearizable")}),
	}
	g0, err := nodes[0].PutGeneration(&store.Generation{Root: store.EmptyTreeID(), Workspace: "ws", Kind: store.GenCreate})
	if err != nil {
		t.Fatal(err)
	}
	storetest.MustCreate(t, nodes[0], "ws", "", g0, store.ID{})
	// Each node publishes under a permit of its own gate (bound to its
	// session lease), as a mount's final close does.
	permits := make([]store.Permit, len(nodes))
	for i, st := range nodes {
		err := st.Meta().Update(context.Background(), func(tx meta.Tx) (err error) {
			permits[i], err = store.OpenGateTx(tx, fmt.Sprintf("node-%d", i), math.MaxInt64)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu      sync.Mutex
		history = []porcupine.Operation{{Input: headInput{next: g0}, Output: headOutput{ok: true}, Call: 0, Return: 0}}
		outcome = map[store.ID]headOutput{}
		okCount atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
		clock   atomic.Int64
	)
	clock.Store(1)
	now := func() int64 { return clock.Add(1) }
	progress := make(chan struct{}, 1)
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	const workers = 2 // per node
	for ni, st := range nodes {
		permit := permits[ni]
		for w := range workers {
			client := ni*workers + w
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					call := now()
					ws, err := st.GetWorkspace("ws")
					if err != nil {
						continue // a failed read says nothing
					}
					record(porcupine.Operation{ClientId: client, Input: headInput{read: true}, Output: headOutput{head: ws.Head}, Call: call, Return: now()})
					gen, err := st.PutGeneration(&store.Generation{Root: store.EmptyTreeID(), Parents: []store.ID{ws.Head}, Workspace: "ws",
						Kind: store.GenCapture, Operation: fmt.Sprintf("c%d-%d", client, i)})
					if err != nil {
						continue
					}
					call = now()
					_, err = st.CompareAndAppend("ws", ws.Head, store.HeadEntry{Gen: gen, Kind: store.GenCapture}, &permit)
					ret := now()
					out := headOutput{ok: err == nil, moved: errors.Is(err, store.ErrHeadMoved)}
					if !out.ok && !out.moved {
						out.unknown = true
						ret = math.MaxInt64 // may take effect any time after its call
						t.Logf("client %d: append failed: %v", client, err)
					}
					mu.Lock()
					outcome[gen] = out
					mu.Unlock()
					record(porcupine.Operation{ClientId: client, Input: headInput{expect: ws.Head, next: gen}, Output: out, Call: call, Return: ret})
					if out.ok {
						okCount.Add(1)
						select {
						case progress <- struct{}{}:
						default:
						}
					}
				}
			}()
		}
	}
	waitFor := func(n int64, what string) {
		t.Helper()
		target := okCount.Load() + n
		deadline := time.After(60 * time.Second)
		for okCount.Load() < target {
			select {
			case <-progress:
			case <-deadline:
				stop.Store(true)
				wg.Wait()
				t.Fatalf("%s: no progress (%d of %d appends)", what, okCount.Load(), target)
			}
		}
	}
	waitFor(15, "before the stop")
	victim := c.Leader()
	if victim < 0 {
		t.Fatal("no leader")
	}
	c.Stop(victim)
	waitFor(15, "with the leader stopped")
	c.Restart(victim)
	waitFor(15, "after the restart")
	stop.Store(true)
	wg.Wait()

	if res := porcupine.CheckOperationsTimeout(headModel.ToModel(), history, time.Minute); res != porcupine.Ok {
		t.Errorf("head history not linearizable (%v) over %d operations", res, len(history))
	}
	log, err := nodes[1].HeadLog("ws", 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[store.ID]int{}
	for _, e := range log {
		seen[e.Gen]++
	}
	unknown := 0
	for gen, out := range outcome {
		switch {
		case out.ok && seen[gen] != 1:
			t.Errorf("append of %s returned nil; in the log %d times", gen.Short(), seen[gen])
		case out.moved && seen[gen] != 0:
			t.Errorf("append of %s returned ErrHeadMoved; in the log %d times", gen.Short(), seen[gen])
		case out.unknown:
			unknown++
			if seen[gen] > 1 {
				t.Errorf("append of %s (failed) in the log %d times", gen.Short(), seen[gen])
			}
		}
	}
	t.Logf("%d operations, %d appends, %d landed, %d failed otherwise; member %d (the leader) stopped and restarted",
		len(history), len(outcome), len(log)-1, unknown, victim)
}

// TestHeadModelRejectsLostUpdate: the model is not vacuous: two appends
// that both returned nil after the same head (a lost update), or a read
// of a head that was replaced before the read began, are not linearizable.
func TestHeadModelRejectsLostUpdate(t *testing.T) {
	g0, a, b := store.BlobID([]byte("0")), store.BlobID([]byte("a")), store.BlobID([]byte("b"))
	create := porcupine.Operation{Input: headInput{next: g0}, Output: headOutput{ok: true}, Call: 0, Return: 0}
	for name, h := range map[string][]porcupine.Operation{
		"lost update": {create,
			{Input: headInput{expect: g0, next: a}, Output: headOutput{ok: true}, Call: 1, Return: 3},
			{Input: headInput{expect: g0, next: b}, Output: headOutput{ok: true}, Call: 2, Return: 4}},
		"stale read": {create,
			{Input: headInput{expect: g0, next: a}, Output: headOutput{ok: true}, Call: 1, Return: 2},
			{Input: headInput{read: true}, Output: headOutput{head: g0}, Call: 3, Return: 4}},
	} {
		if porcupine.CheckOperations(headModel.ToModel(), h) {
			t.Errorf("%s: accepted as linearizable", name)
		}
	}
	ok := []porcupine.Operation{create,
		{Input: headInput{expect: g0, next: a}, Output: headOutput{unknown: true}, Call: 1, Return: math.MaxInt64},
		{Input: headInput{read: true}, Output: headOutput{head: a}, Call: 3, Return: 4}}
	if !porcupine.CheckOperations(headModel.ToModel(), ok) {
		t.Error("an append of unknown outcome seen by a later read: rejected")
	}
}
