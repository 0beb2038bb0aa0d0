package daemon

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// fakeClock is a clock whose sleeps advance it and deliver the accepts
// scheduled meanwhile.
type fakeClock struct {
	t       time.Time
	accepts []time.Duration // offsets from the start, ascending
	start   time.Time
	l       *acceptClock
}

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) sleep(d time.Duration) {
	c.t = c.t.Add(d)
	for len(c.accepts) > 0 && !c.start.Add(c.accepts[0]).After(c.t) {
		c.l.last.Store(c.start.Add(c.accepts[0]).UnixNano())
		c.accepts = c.accepts[1:]
	}
}

func TestAcceptClockDrain(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name    string
		accepts []time.Duration
		want    time.Duration // when drain returns, from its start
	}{
		{"nothing queued: the quiet period", nil, 10 * ms},
		{"an accept extends it", []time.Duration{4 * ms}, 14 * ms},
		{"accepts in a row", []time.Duration{4 * ms, 12 * ms, 21 * ms}, 31 * ms},
		{"a late accept after quiet is not waited for", []time.Duration{15 * ms}, 10 * ms},
		{"accepts that never stop: the limit", []time.Duration{5 * ms, 10 * ms, 15 * ms, 20 * ms, 25 * ms, 30 * ms, 35 * ms, 40 * ms, 45 * ms, 50 * ms, 55 * ms, 60 * ms}, 50 * ms},
	} {
		t.Run(c.name, func(t *testing.T) {
			acc := &acceptClock{}
			start := time.Unix(1000, 0)
			clk := &fakeClock{t: start, start: start, accepts: c.accepts, l: acc}
			acc.drainWith(start, 10*ms, 50*ms, clk.now, clk.sleep)
			if got := clk.t.Sub(start); got != c.want {
				t.Errorf("drain returned at %v, want %v", got, c.want)
			}
		})
	}
	// An accept from before the drain began does not extend it.
	acc := &acceptClock{}
	start := time.Unix(1000, 0)
	acc.last.Store(start.Add(-time.Millisecond).UnixNano())
	clk := &fakeClock{t: start, start: start, l: acc}
	acc.drainWith(start, 10*ms, 50*ms, clk.now, clk.sleep)
	if got := clk.t.Sub(start); got != 10*ms {
		t.Errorf("with an earlier accept drain returned at %v, want 10ms", got)
	}
}

// TestAcceptClockRecords: Accept notes when it accepted.
func TestAcceptClockRecords(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	acc := &acceptClock{Listener: ln}
	defer acc.Close()
	go func() {
		if c, err := net.Dial("unix", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	before := time.Now()
	c, err := acc.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := time.Unix(0, acc.last.Load()); got.Before(before) {
		t.Errorf("Accept recorded %v, before the accept began (%v)", got, before)
	}
}
