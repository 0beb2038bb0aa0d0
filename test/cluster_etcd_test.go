package test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/internal/lockfile"
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
	var took []string
	for range 3 {
		r, d := e.timed("list")
		took = append(took, "list "+d.Round(time.Millisecond).String())
		if r.code != 0 {
			t.Fatalf("list: %s", r)
		}
	}
	t.Logf("every member answering, no daemon: %s", strings.Join(took, "; "))
	took = nil
	mp := e.mountAt("kid")

	c.Pause(0)
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
	// The daemon serves kid: commands forward to it. The first may send
	// a read to the paused member (2 s), later ones go to the others.
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
	// Another process holds the node (an exiting daemon whose requests
	// went to the paused member, say) for 3 s: a command waits for it
	// rather than say the store is locked after 2 s.
	lock := lockfile.New(filepath.Join(e.store, cluster.LockName), os.O_RDONLY)
	if err := lock.Wait(context.Background(), lockfile.Exclusive, time.Second, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	release := time.AfterFunc(3*time.Second, func() { lock.Unlock() }) // the holder's work
	defer release.Stop()
	step("fork", "main", "kid5")
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
	fails("land", "kid4")
	c.Resume(0)
	c.Resume(2)
	e.unmount(mp)
	c.Pause(0)
	c.Pause(2)
	fails("fork", "main", "kid6")
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

// secureURL is the --meta URL of c (started with TLS) under prefix, as
// user with the given extra options.
func secureURL(c *etcdtest.Cluster, user, prefix, opts string) string {
	var hosts []string
	for _, e := range c.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(e, "https://"))
	}
	u := "etcds://"
	if user != "" {
		u += user + "@"
	}
	return u + strings.Join(hosts, ",") + "/" + prefix + "?ca=" + c.TLS.CA + opts
}

// TestEtcdTLSAndAuth: etcd with client certificate authentication and
// etcd users (the node's role may only touch its prefix): two nodes inited
// over etcds:// as that user, one with a password file, one with
// $ACYCLICFS_ETCD_PASSWORD, create, fork, mount, exec and land. A wrong
// password, no client certificate or one of another CA, a password file
// others may read or a password in the URL are clear errors that write
// nothing.
func TestEtcdTLSAndAuth(t *testing.T) {
	c := etcdtest.StartWith(t, etcdtest.Options{TLS: true, Auth: true, AuthPrefix: "/secure"})
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "etcd-password")
	if err := os.WriteFile(pwFile, []byte(etcdtest.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certs := "&cert=" + c.TLS.ClientCert + "&key=" + c.TLS.ClientKey
	shared := filepath.Join(dir, "blobs")
	a := newMountEnv(t)
	good := secureURL(c, etcdtest.User, "secure", certs+"&password-file="+pwFile)
	if out := a.ok("init", a.store, "--meta", good, "--node", "node-a", "--blobs", shared); !strings.Contains(out, "etcds://acyclicfs@") || strings.Contains(out, etcdtest.Password) {
		t.Fatalf("init printed %q, want the etcds:// URL with the user and no password", out)
	}
	if b, err := os.ReadFile(filepath.Join(a.store, "cluster.json")); err != nil || strings.Contains(string(b), etcdtest.Password) ||
		!strings.Contains(string(b), `"password_file"`) {
		t.Fatalf("cluster.json: %v\n%s", err, b)
	}
	a.ok("create", "main")
	a.ok("fork", "main", "kid")
	mp := a.mountAt("kid")
	a.execOK(mp, "echo secure > s.txt")
	a.unmount(mp)
	a.ok("land", "kid")

	// Node B takes the password from the environment (every command's,
	// from here on: A's password file goes first).
	t.Setenv("ACYCLICFS_ETCD_PASSWORD", etcdtest.Password)
	b := newMountEnv(t)
	b.ok("init", b.store, "--meta", secureURL(c, etcdtest.User, "secure", certs), "--node", "node-b", "--blobs", shared)
	if r := b.run("cat", "main", "s.txt"); r.code != 0 || r.stdout != "secure\n" {
		t.Fatalf("B's cat of A's landed file: %s", r)
	}
	if r, err := runCmd(b.command([]string{"ACYCLICFS_ETCD_PASSWORD="}, "list")); err != nil || r.code != 2 ||
		!strings.Contains(r.stderr, "ACYCLICFS_ETCD_PASSWORD") {
		t.Errorf("list without the password: want exit 2 naming $ACYCLICFS_ETCD_PASSWORD: %v %s", err, r)
	}

	// The errors: nothing is written, each says what is wrong.
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte("not it"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte(etcdtest.Password), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	for _, tc := range []struct {
		url  string
		code int
		want string
	}{
		{secureURL(c, etcdtest.User, "secure", certs+"&password-file="+wrong), 1, "authentication failed"},
		{secureURL(c, etcdtest.User, "secure", "&password-file="+pwFile), 1, "certificate"},
		{secureURL(c, etcdtest.User, "secure", "&cert="+c.TLS.OtherCert+"&key="+c.TLS.OtherKey+"&password-file="+pwFile), 1, "certificate"},
		{secureURL(c, etcdtest.User, "secure", certs+"&password-file="+open), 2, "chmod 600"},
		{secureURL(c, etcdtest.User+":"+etcdtest.Password, "secure", certs), 2, "no password in the URL"},
		{secureURL(c, "", "other", certs), 1, "permission denied"},
	} {
		t0 := time.Now()
		r := e.fails(tc.code, "init", e.store, "--meta", tc.url)
		if !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, etcdtest.Password) {
			t.Errorf("init --meta %s: want %q in the error and no password: %s", tc.url, tc.want, r)
		}
		d := time.Since(t0)
		if d > 10*time.Second {
			t.Errorf("init --meta %s took %v", tc.url, d)
		}
		t.Logf("%v: %s", d.Round(time.Millisecond), strings.TrimSpace(r.stderr))
		if _, err := os.Stat(e.store); err == nil {
			t.Fatalf("init --meta %s: the store directory was created", tc.url)
		}
	}
}
