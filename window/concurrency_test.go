package window_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/window/windowtest"
)

// definedErrors are the sentinels a contended caller may see; anything else
// is a bug.
var definedErrors = []error{
	window.ErrContended, window.ErrReconciling, window.ErrLeaseLost,
	window.ErrStaleTicket, window.ErrInvalidExpiry,
}

func TestContendedWorkspaceMemory(t *testing.T) {
	clock := window.NewManualClock(1000)
	contend(t, window.NewMemoryStore(), clock, nil)
}

func TestContendedWorkspaceBolt(t *testing.T) {
	clock := window.NewManualClock(1000)
	st := window.NewMetaStore(openBolt(t, filepath.Join(t.TempDir(), "meta.db"), true), clock)
	contend(t, st, clock, st.CheckPermit)
}

// contend runs rounds of 32 goroutines of random operations on one workspace. Every
// call must return success or a defined sentinel; afterwards the state must
// be valid, each ticket completed at most once, and only live permits
// admitted.
func contend(t *testing.T, st window.Store, clock *window.ManualClock, checkPermit func(store.Permit) error) {
	const (
		workers = 32
		ws      = "hot"
	)
	ops := 60
	if raceEnabled {
		ops = 6
	}
	ctx := context.Background()
	c := window.NewCoordinator(st, clock)
	var (
		mu        sync.Mutex // protects completed and permits
		completed = map[window.Ticket]int{}
		permits   []store.Permit
		outcomes  = map[string]int{} // "op: ok" or "op: sentinel"
	)
	// Rounds repeat until both a lease began and one finished: with few
	// operations per worker (under -race) a round can spend all its time
	// reconciling, which is correct but tests too little.
	const maxRounds = 20
	exercised := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return outcomes["begin: ok"] > 0 && outcomes["finish: ok"] > 0
	}
	for round := 0; round < maxRounds && !exercised(); round++ {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), uint64(7+round)))
				var mine []window.Lease
				var ticket window.Ticket
				check := func(op string, err error) bool {
					mu.Lock()
					defer mu.Unlock()
					if err == nil {
						outcomes[op+": ok"]++
						return true
					}
					for _, d := range definedErrors {
						if errors.Is(err, d) {
							outcomes[op+": "+d.Error()]++
							return false
						}
					}
					t.Errorf("worker %d %s: undefined error %v", w, op, err)
					return false
				}
				for range ops {
					op := rng.IntN(7)
					switch {
					case !ticket.IsZero() && rng.IntN(3) > 0:
						op = 7 // a claimed ticket is usually completed promptly
					case len(mine) >= 2:
						op = 3 // a tool holds few leases at once
					}
					switch op {
					case 0, 1:
						l, err := c.Begin(ctx, ws, windowtest.Gen(1), "w", time.Duration(1+rng.IntN(20))*time.Millisecond)
						if check("begin", err) {
							mine = append(mine, l)
							mu.Lock()
							permits = append(permits, l.Permit)
							mu.Unlock()
						}
					case 2:
						if len(mine) > 0 {
							i := rng.IntN(len(mine))
							l, err := c.Renew(ctx, mine[i], time.Duration(1+rng.IntN(20))*time.Millisecond)
							if check("renew", err) {
								mine[i] = l
								mu.Lock()
								permits = append(permits, l.Permit)
								mu.Unlock()
							}
						}
					case 3:
						if len(mine) > 0 {
							f, err := c.Finish(ctx, mine[0])
							mine = mine[1:]
							if check("finish", err) && f.Outcome == window.FinishReconcile {
								ticket = f.Reconcile.Ticket
							}
						}
					case 4:
						_, err := c.ObserveParent(ctx, ws, windowtest.Gen(byte(2+rng.IntN(200))))
						check("observe", err)
					case 5:
						rc, ok, err := c.ParentAdvanced(ctx, ws, windowtest.Gen(byte(2+rng.IntN(200))))
						if check("parent advanced", err) && ok {
							ticket = rc.Ticket
						}
					case 6:
						rc, ok, err := c.ClaimReconcile(ctx, ws)
						if check("claim", err) && ok {
							ticket = rc.Ticket
						}
					case 7:
						if !ticket.IsZero() {
							next, ok, err := c.CompleteReconcile(ctx, ws, ticket)
							if check("complete", err) {
								mu.Lock()
								completed[ticket]++
								mu.Unlock()
							}
							ticket = window.Ticket{}
							if ok {
								ticket = next.Ticket
							}
						}
						clock.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
	}
	t.Logf("outcomes: %v", outcomes)
	if !exercised() {
		t.Fatalf("contention test exercised too little: %v", outcomes)
	}

	s, err := c.Inspect(ctx, ws)
	if err != nil {
		t.Fatalf("final state: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("final state invalid: %v", err)
	}
	for tk, n := range completed {
		if n != 1 {
			t.Errorf("ticket %s completed %d times", tk, n)
		}
	}
	if checkPermit != nil {
		now := clock.NowMillis()
		for _, p := range permits {
			live := false
			if s.Phase.Kind == window.PhaseActive {
				for _, l := range s.Phase.Leases {
					live = live || (l.Permit == p && l.ExpiresAtMillis > now)
				}
			}
			if err := checkPermit(p); (err == nil) != live {
				t.Errorf("permit %v: live=%v check=%v", p, live, err)
			}
		}
	}
	// Everything left over is recoverable: expire and drain to idle.
	clock.Advance(time.Hour)
	for range 4 {
		rc, ok, err := c.ClaimReconcile(ctx, ws)
		if err != nil {
			t.Fatalf("drain claim: %v", err)
		}
		if !ok {
			break
		}
		if _, _, err := c.CompleteReconcile(ctx, ws, rc.Ticket); err != nil {
			t.Fatalf("drain complete: %v", err)
		}
	}
	if s, err := c.Inspect(ctx, ws); err != nil || s.Phase.Kind != window.PhaseIdle {
		t.Fatalf("not drained: %+v %v", s.Phase, err)
	}
}
