package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
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

	// A member that died (its port closed): no wait at all to speak of.
	took = nil
	c.Stop(1)
	step("fork", "main", "kid4")
	step("land", "kid3")
	mp = e.mountAt("kid4")
	step("land", "kid4")
	t.Logf("with member 1 stopped: %s", strings.Join(took, "; "))

	// Every member hangs: a clear error naming etcd, exit 1, within
	// etcd's request timeout (10 s) and some slack, with the daemon and
	// without.
	const noneBound = 16 * time.Second
	c.Pause(0)
	c.Pause(2)
	took = nil
	fails := func(args ...string) {
		t.Helper()
		r, d := e.timed(args...)
		took = append(took, strings.Join(args, " ")+" "+d.Round(time.Millisecond).String()+" ("+strings.TrimSpace(r.stderr)+")")
		if r.code != 1 || !strings.Contains(r.stderr, "etcd") || strings.Contains(r.stderr, "locked") {
			t.Errorf("%s with no member answering: want exit 1 naming etcd, got %s", strings.Join(args, " "), r)
		}
		if d > noneBound {
			t.Errorf("%s took %v with no member answering, want under %v", strings.Join(args, " "), d, noneBound)
		}
	}
	fails("status")
	fails("land", "kid4")
	c.Resume(0)
	c.Resume(2)
	e.unmount(mp)
	c.Pause(0)
	c.Pause(2)
	fails("status")
	fails("fork", "main", "kid5")
	t.Logf("with no member answering: %s", strings.Join(took, "; "))
	c.Resume(0)
	c.Resume(2)
}

// TestFsckMissingEtcdStore: the store's keys deleted from etcd, fsck (and
// every other command) says the store is missing and exits 1, with a
// daemon serving a mount and without; no command makes an empty store in
// its place.
func TestFsckMissingEtcdStore(t *testing.T) {
	c := etcdtest.Start(t)
	e := clusterNode(t, c, "gone", "node-a")
	e.ok("create", "main")
	e.ok("fork", "main", "kid")
	mp := e.mountAt("kid")
	e.fsck()

	del := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Client().Delete(ctx, "/gone", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	del()
	// The daemon has the store open.
	r := e.run("fsck")
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, "format") {
		t.Errorf("fsck with the daemon does not report the missing format record: %s", r)
	}
	e.unmount(mp)
	del() // what the unmount wrote
	for _, args := range [][]string{{"fsck"}, {"list"}, {"create", "other"}} {
		r := e.fails(1, args...)
		if !strings.Contains(r.stderr, "store missing") || !strings.Contains(r.stderr, "etcd://") {
			t.Errorf("%v on a deleted store: want it to say the store is missing from etcd: %s", args, r)
		}
	}
	resp, err := c.Client().Get(context.Background(), "/gone", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("a command wrote %d keys under the deleted store's prefix", resp.Count)
	}
	// init, as the hint says, starts a new, empty store there.
	e.ok("init", e.store, "--meta", metaURL(c, "gone"))
	if r := e.run("list"); r.code != 0 || strings.Contains(r.stdout, "main") {
		t.Errorf("list after init over the deleted store: %s", r)
	}
	e.fsck()
}
