package sessions

import (
	"sync"
	"testing"
	"time"
)

// TestConcurrentStress races requests from many goroutines against a 1ms
// background sweeper, process churn, Bind/Unbind and a final EndAll; the
// recorder flags any overlapping or unpaired Begin/End, and afterwards
// every implicit lease must have been ended exactly once per Begin.
func TestConcurrentStress(t *testing.T) {
	fp := newFakeProc(t)
	for s := 1; s <= 4; s++ {
		for k := range 3 {
			fp.add(s*100+k, s*100, s*100)
		}
	}
	rec := newRecorder()
	clk := newFakeClock()
	tr, err := New(Config{
		Handler: rec, ProcRoot: fp.root, SweepInterval: time.Millisecond,
		IdleClose: time.Second, MountPoint: "/mnt/ws", Now: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				pid := (g%4+1)*100 + i%3
				_ = tr.Admit(uint32(pid)) // may fail while the churner removed pid
				if i%50 == 0 {
					tr.Sweep()
				}
			}
		})
	}
	wg.Go(func() { // churn: session 400 comes and goes; the clock runs
		for i := 0; time.Now().Before(deadline); i++ {
			if i%2 == 0 {
				fp.remove(400)
				fp.remove(401)
				fp.remove(402)
			} else {
				for k := range 3 {
					fp.addStart(400+k, 400, 400, uint64(i))
				}
			}
			clk.Advance(300 * time.Millisecond)
			time.Sleep(2 * time.Millisecond) // pacing only, not synchronisation
		}
	})
	wg.Go(func() {
		for time.Now().Before(deadline) {
			tr.Bind("sid:300")
			_ = tr.Admit(300)
			tr.Unbind("sid:300")
		}
	})
	wg.Wait()
	tr.Close()
	tr.EndAll()
	rec.check(t)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	total := 0
	for o, b := range rec.begins {
		total += b
		if rec.active[o] || rec.ends[o] != b {
			t.Errorf("%s: begins=%d ends=%d active=%v", o, b, rec.ends[o], rec.active[o])
		}
	}
	if total == 0 {
		t.Fatal("no Begin at all")
	}
	t.Logf("begins per owner: %v", rec.begins)
}
