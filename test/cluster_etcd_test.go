package test

import (
	"strings"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
)

// etcd members that hang, vanish or require TLS and passwords (issue #38
// item 7).

// timed runs a command and returns it with how long it took.
func (e *env) timed(args ...string) (result, time.Duration) {
	e.t.Helper()
	t0 := time.Now()
	r := e.run(args...)
	return r, time.Since(t0)
}

// slowBound is what a command may take with one member of three paused:
// the client gives up on it within about 2 s; the rest is a loaded CI
// machine's slack.
const slowBound = 8 * time.Second

// TestPausedEtcdMember: one member of three stops answering (a SIGSTOPped
// process: connections open, nothing read; here a proxy that stops
// forwarding) while the quorum stays. Commands through the binary, with a
// daemon and without, still work, each within slowBound and none saying
// the store is locked.
func TestPausedEtcdMember(t *testing.T) {
	c := etcdtest.StartWith(t, etcdtest.Options{Proxy: true})
	e := clusterNode(t, c, "paused-member", "node-a")
	e.ok("create", "main")
	e.ok("fork", "main", "kid")
	e.ok("fork", "main", "kid2")
	mp := e.mountAt("kid")

	c.Pause(0)
	var took []string
	check := func(r result, d time.Duration, args ...string) {
		t.Helper()
		took = append(took, strings.Join(args, " ")+" "+d.Round(time.Millisecond).String())
		if r.code != 0 {
			t.Fatalf("%s with a paused member: %s", strings.Join(args, " "), r)
		}
		if d > slowBound {
			t.Errorf("%s took %v with a paused member, want under %v", strings.Join(args, " "), d, slowBound)
		}
	}
	step := func(args ...string) {
		t.Helper()
		r, d := e.timed(args...)
		check(r, d, args...)
	}
	// The daemon serves kid: commands forward to it.
	step("status")
	step("status")
	t0 := time.Now()
	r := e.execSh(mp, "echo from-exec > f.txt")
	check(r, time.Since(t0), "exec")
	step("land", "kid")
	step("status")
	e.unmount(mp)
	// No daemon: each command opens the node itself.
	step("status")
	step("fork", "main", "kid3")
	step("land", "kid2")
	step("list")
	t.Logf("with member 0 paused: %s", strings.Join(took, "; "))
	c.Resume(0)
}
