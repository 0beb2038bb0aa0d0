package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
)

// waitEndpoints waits until c sends its requests to want, within limit.
func waitEndpoints(t *testing.T, c *Conn, want []string, limit time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	tick := time.NewTicker(20 * time.Millisecond) // Conn has no event for this; poll, bounded
	defer tick.Stop()
	for !slices.Equal(c.Endpoints(), want) {
		if time.Since(t0) > limit {
			t.Fatalf("after %v the client's endpoints are %v, want %v", limit, c.Endpoints(), want)
		}
		<-tick.C
	}
	return time.Since(t0)
}

// TestConnFollowsMemberHealth: a member that hangs leaves the client's
// endpoints within about probeEvery+probeTimeout and comes back once it
// answers again; reads go on meanwhile, each within a read attempt or
// two.
func TestConnFollowsMemberHealth(t *testing.T) {
	ec := etcdtest.StartWith(t, etcdtest.Options{Proxy: true})
	all := ec.Endpoints()
	cfg := Config{Version: ConfigVersion, Endpoints: all, Prefix: "/health", Node: "n"}
	conn, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.Endpoints(); !slices.Equal(got, all) {
		t.Fatalf("endpoints %v, want all of %v", got, all)
	}
	ec.Pause(1)
	gone := waitEndpoints(t, conn, []string{all[0], all[2]}, 10*time.Second)
	for i := range 5 {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
		_, err := get(ctx, conn.Client, "/health\x00")
		cancel()
		if err != nil || time.Since(t0) > 2*ReadAttempt+time.Second {
			t.Fatalf("read %d with member 1 paused: %v after %v", i, err, time.Since(t0))
		}
	}
	if s := conn.Slow(); !slices.Equal(s, []string{all[1]}) {
		t.Errorf("Slow() = %v, want %v", s, all[1:2])
	}
	ec.Resume(1)
	back := waitEndpoints(t, conn, all, 10*time.Second)
	t.Logf("paused member left the endpoints after %v, came back %v after its resume", gone.Round(time.Millisecond), back.Round(time.Millisecond))

	// A second Dial while it hangs starts without it, in about dialGrace.
	ec.Pause(2)
	t0 := time.Now()
	c2, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	d := time.Since(t0)
	if got := c2.Endpoints(); !slices.Equal(got, all[:2]) || d > 3*time.Second {
		t.Errorf("Dial with member 2 paused: endpoints %v after %v, want %v", got, d, all[:2])
	}
	t.Logf("Dial with a paused member: %v", d.Round(time.Millisecond))
	ec.Resume(2)
}
