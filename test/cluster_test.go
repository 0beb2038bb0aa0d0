package test

import (
	"encoding/json"
	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/internal/weedtest"
	"github.com/minio/minio-go/v7"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/internal/testport"
)

// Two nodes of one store on etcd (issue #28 items 3-4): two store
// directories inited against one etcd prefix, each served by its own
// daemon (the binary's), mounts in different directories. The etcd
// cluster runs inside the test process (internal/etcdtest): it is started
// before the nodes' envs, so their cleanups (shutdown, which recovers dead
// mounts) run while it still serves.

// metaURL is the --meta URL of c's members under prefix.
func metaURL(c *etcdtest.Cluster, prefix string) string {
	var hosts []string
	for _, e := range c.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(e, "http://"))
	}
	return "etcd://" + strings.Join(hosts, ",") + "/" + prefix
}

// clusterNode is a mount env whose store is node `node` of the store on c
// under prefix.
func clusterNode(t *testing.T, c *etcdtest.Cluster, prefix, node string, extra ...string) *env {
	t.Helper()
	e := newMountEnv(t)
	out := e.ok(append([]string{"init", e.store, "--meta", metaURL(c, prefix), "--node", node}, extra...)...)
	if !strings.Contains(out, "node "+node) {
		t.Fatalf("init printed %q, want it to name node %s", out, node)
	}
	return e
}

type clusterStatus struct {
	Node       string `json:"node"`
	Meta       string `json:"meta"`
	Workspaces []struct {
		Workspace  string `json:"workspace"`
		State      string `json:"state"`
		Mountpoint string `json:"mountpoint"`
		Node       string `json:"node"`
		Behind     bool   `json:"behind_parent"`
	} `json:"workspaces"`
}

func (e *env) clusterStatus() clusterStatus {
	e.t.Helper()
	r := e.run("--json", "status")
	if r.code != 0 {
		e.t.Fatalf("status --json: %s", r)
	}
	var s clusterStatus
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		e.t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return s
}

// holder returns the node status shows holding ws's mount, and where.
func (s clusterStatus) holder(ws string) (node, mountpoint string) {
	for _, w := range s.Workspaces {
		if w.Workspace == ws {
			return w.Node, w.Mountpoint
		}
	}
	return "", ""
}

// TestTwoNodes: create and fork on A, mount the fork on B, a tool writes,
// land from B; A sees the parent moved to B's change and the unmounted
// sibling followed it. While B mounts a workspace, A's mount of it exits 4
// naming B; once B's daemon is killed with SIGKILL, A can claim it after
// the claim TTL.
func TestTwoNodes(t *testing.T) {
	c := etcdtest.Start(t)
	a := clusterNode(t, c, "two", "node-a", "--claim-ttl", "2s")
	b := clusterNode(t, c, "two", "node-b", "--claim-ttl", "2s")

	a.ok("create", "main")
	a.ok("fork", "main", "kid")
	a.ok("fork", "main", "sib")
	if out := b.run("list"); out.code != 0 || !strings.Contains(out.stdout, "sib") {
		t.Fatalf("B does not list A's workspaces: %s", out)
	}

	mpB := b.mountAt("kid")
	if node, mp := a.clusterStatus().holder("kid"); node != "node-b" || mp != mpB {
		t.Fatalf("A's status: kid held by %q at %q, want node-b at %s", node, mp, mpB)
	}
	if r := a.run("status"); r.code != 0 || !strings.Contains(r.stdout, "node node-a of etcd://") ||
		!strings.Contains(r.stdout, "claim kid "+mpB+" on node node-b") {
		t.Fatalf("A's status does not show the node and B's claim: %s", r)
	}
	if r := a.run("list"); r.code != 0 || !strings.Contains(r.stdout, "mounted  node-b:"+mpB) {
		t.Fatalf("A's list does not show kid mounted on node-b: %s", r)
	}
	b.execOK(mpB, "mkdir -p src && echo 'from B' > src/b.txt")
	b.unmount(mpB)
	b.ok("land", "kid")

	// On A: main is at kid's head, its last change adds B's file, and the
	// unmounted sibling followed main.
	if ha, hb := a.head("main"), b.head("kid"); ha != hb {
		t.Fatalf("A sees main at %s, B landed kid at %s", ha, hb)
	}
	if r := a.run("log", "main", "-n", "1", "--paths"); r.code != 0 || !strings.Contains(r.stdout, "src/b.txt") {
		t.Fatalf("A's log of main does not show B's change: %s", r)
	}
	for _, w := range a.clusterStatus().Workspaces {
		if w.Workspace == "sib" && w.Behind {
			t.Fatalf("sib is behind main on A after B's landing")
		}
	}
	if r := a.run("diff", "sib", "main"); r.code != 0 || strings.TrimSpace(r.stdout) != "" {
		t.Fatalf("sib differs from main after B's landing: %s", r)
	}

	// B mounts kid: A's mount of it exits 4 naming B.
	mpB = b.mountAt("kid")
	mpA := filepath.Join(a.dir, "mnt-kid")
	if err := os.MkdirAll(mpA, 0o755); err != nil {
		t.Fatal(err)
	}
	r := a.fails(4, "mount", "kid", mpA)
	if !strings.Contains(r.stderr, "node-b") || !strings.Contains(r.stderr, mpB) {
		t.Fatalf("A's refused mount does not name node-b and its mountpoint: %s", r)
	}
	// init through B's running daemon: the same configuration is a no-op,
	// another one refused.
	b.ok("init", b.store, "--meta", metaURL(c, "two"))
	if r := b.fails(2, "init", b.store, "--meta", metaURL(c, "elsewhere")); !strings.Contains(r.stderr, "node node-b of") {
		t.Errorf("init of B's running node with another prefix: %s", r)
	}
	// Nor may A move or remove what B mounts.
	empty := filepath.Join(a.dir, "empty")
	os.MkdirAll(empty, 0o755)
	for _, args := range [][]string{{"rm", "kid"}, {"commit", "kid", empty}, {"undo", "kid"}} {
		if r := a.fails(4, args...); !strings.Contains(r.stderr, "on node node-b") {
			t.Errorf("A's %v of a workspace B mounts: %s", args, r)
		}
	}
	if st := a.clusterStatus(); st.Node != "node-a" {
		t.Fatalf("A's status names node %q", st.Node)
	}

	// B's daemon dies: its claim stays until its lease expires.
	pid := b.daemonPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	a.fails(4, "mount", "kid", mpA)
	// The claim's lease expiring has no event the binary reports: poll
	// the mount itself, with a deadline well past the 2s TTL.
	deadline := killed.Add(20 * time.Second)
	for {
		r := a.run("mount", "kid", mpA)
		if r.code == 0 {
			break
		}
		if r.code != 4 || time.Now().After(deadline) {
			t.Fatalf("A's mount after B's daemon died: %s", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if time.Since(killed) < time.Second {
		t.Fatalf("A claimed kid %v after B died, before the claim's TTL", time.Since(killed))
	}
	if node, mp := b.clusterStatus().holder("kid"); node != "node-a" || mp != mpA {
		t.Fatalf("B's status: kid held by %q at %q, want node-a at %s", node, mp, mpA)
	}
	a.unmount(mpA)
	// B's dead mount is recovered by the env's shutdown.
}

// TestClusterInitErrors: every bad init is refused with a clear error and
// changes nothing.
func TestClusterInitErrors(t *testing.T) {
	c := etcdtest.Start(t)
	e := newEnv(t)
	good := metaURL(c, "errs")

	gone := func(what string) {
		t.Helper()
		if _, err := os.Stat(e.store); err == nil {
			t.Fatalf("%s: the store directory was created", what)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--meta", "http://127.0.0.1:2379/p"}, "etcd://"},
		{[]string{"--meta", strings.TrimSuffix(good, "errs")}, "PREFIX is empty"},
		{[]string{"--meta", "etcd://127.0.0.1:notaport/p"}, "port"},
		{[]string{"--blobs", e.dir}, "--blobs needs --meta"},
		{[]string{"--node", "x"}, "--node needs --meta"},
		{[]string{"--meta", good, "--node", "bad name"}, "node name"},
		{[]string{"--meta", good, "--claim-ttl", "1500ms"}, "whole seconds"},
		{[]string{"--meta", good, "--blobs", "s3://bucket/p?endpoint=http://127.0.0.1:9000"}, "bad s3 blob store spec"},
		{[]string{"--meta", good, "--blobs", "s3://bucket/p"}, "endpoint"},
		{[]string{"--meta", good, "--blobs", "ftp://host/p"}, "want a directory or s3://"},
		{[]string{"--meta", good, "--blobs", filepath.Join(e.store, "blobs")}, "outside the store"},
		{[]string{"--cache-size", "10M"}, "--cache-size needs --meta"},
		{[]string{"--meta", good, "--cache-size", "10M"}, "--cache-size needs --blobs"},
		{[]string{"--meta", good, "--blobs", filepath.Join(e.dir, "shared"), "--cache-size", "ten"}, "not a positive size"},
	} {
		r := e.fails(2, append([]string{"init", e.store}, tc.args...)...)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("init %v: stderr %q does not say %q", tc.args, r.stderr, tc.want)
		}
		gone(strings.Join(tc.args, " "))
	}

	// Nothing listens: a bounded wait, an error naming the endpoint.
	// A reserved port nothing listens on (testport: no other test or
	// client connection is handed it meanwhile).
	dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(testport.One(t)))
	start := time.Now()
	r := e.fails(1, "init", e.store, "--meta", "etcd://"+dead+"/p")
	if !strings.Contains(r.stderr, dead) || !strings.Contains(r.stderr, "unreachable") {
		t.Errorf("init against a dead endpoint: %s", r)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("init against a dead endpoint took %v", time.Since(start))
	}
	gone("dead endpoint")

	// An S3 server that does not answer: the same, for the blobs.
	r = e.fails(1, "init", e.store, "--meta", good, "--blobs", "s3://bucket/p?insecure=1&endpoint="+dead)
	if !strings.Contains(r.stderr, dead) {
		t.Errorf("init against a dead S3 endpoint: %s", r)
	}
	gone("dead S3 endpoint")

	// A node: cluster.json 0600; init again with the same config is a
	// no-op; another config is refused and changes nothing.
	e.ok("init", e.store, "--meta", good, "--node", "n1")
	cfgPath := filepath.Join(e.store, "cluster.json")
	before, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(cfgPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("cluster.json mode %v, want 0600", fi.Mode().Perm())
	}
	e.ok("init", e.store, "--meta", good, "--node", "n1")
	e.ok("init", e.store, "--meta", good) // the node keeps its name
	for _, args := range [][]string{
		{"--meta", metaURL(c, "other"), "--node", "n1"},
		{"--meta", good, "--node", "n2"},
	} {
		r := e.fails(2, append([]string{"init", e.store}, args...)...)
		if !strings.Contains(r.stderr, "configured differently") {
			t.Errorf("init %v on a configured node: %s", args, r)
		}
		if after, _ := os.ReadFile(cfgPath); string(after) != string(before) {
			t.Fatalf("refused init changed cluster.json:\n%s", after)
		}
	}
	e.ok("create", "w") // the node works

	// etcd without a quorum: a command on the node fails within the dial
	// bound, naming the endpoints, and works again once it is back.
	c.Stop(0)
	c.Stop(1)
	start = time.Now()
	r = e.fails(1, "list")
	if !strings.Contains(r.stderr, "etcd unreachable") || !strings.Contains(r.stderr, c.Endpoints(2)[0]) {
		t.Errorf("list without an etcd quorum: %s", r)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("list without an etcd quorum took %v", time.Since(start))
	}
	c.Restart(0)
	c.Restart(1)
	if r := e.run("list"); r.code != 0 || !strings.Contains(r.stdout, "w") {
		t.Fatalf("list once etcd is back: %s", r)
	}

	// --meta on a local store is refused.
	local := newEnv(t)
	local.ok("init")
	r = local.fails(2, "init", local.store, "--meta", good)
	if !strings.Contains(r.stderr, "local store") {
		t.Errorf("init --meta on a local store: %s", r)
	}
	if _, err := os.Stat(filepath.Join(local.store, "cluster.json")); err == nil {
		t.Errorf("init --meta on a local store wrote cluster.json")
	}
}

// TestPausedNodeClaimsAgain: a node's daemon stopped (SIGSTOP) past the
// claim TTL loses its claim, so that another node could mount the
// workspace; continued (SIGCONT) while it still serves the mount and
// nobody else took it, it claims it again, and the other node's mount
// exits 4 once more.
func TestPausedNodeClaimsAgain(t *testing.T) {
	c := etcdtest.Start(t)
	a := clusterNode(t, c, "paused", "node-a", "--claim-ttl", "2s")
	b := clusterNode(t, c, "paused", "node-b", "--claim-ttl", "2s")
	a.ok("create", "main")
	mpB := b.mountAt("main")
	pid := b.daemonPID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	cont := func() {
		if !continued {
			continued = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer cont()
	// Neither the lease's expiry nor the claim coming back has an event
	// the binary reports: poll A's status, with deadlines well past the
	// 2s TTL.
	holder := func() string { n, _ := a.clusterStatus().holder("main"); return n }
	waitFor(t, 20*time.Second, "B's claim to expire while B is stopped", func() bool { return holder() == "" })
	cont()
	waitFor(t, 20*time.Second, "B to claim main again after SIGCONT", func() bool { return holder() == "node-b" })
	mpA := filepath.Join(a.dir, "mnt-main")
	if err := os.MkdirAll(mpA, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := a.fails(4, "mount", "main", mpA); !strings.Contains(r.stderr, "node-b") {
		t.Fatalf("A's mount after B claimed again: %s", r)
	}
	b.unmount(mpB)
	if !strings.Contains(b.daemonLog(), "main claimed again") {
		t.Errorf("B's daemon log does not say it claimed main again:\n%s", b.daemonLog())
	}
}

// TestTwoNodesSharedBlobs: with --blobs DIR (a shared directory, the
// remote tier of both nodes), content stored on one node is read on the
// other: B's mount reads the file A imported, and A reads what B's tool
// wrote once B landed it, in the parent and in the sibling that followed.
// (Without --blobs A's `cat` of B's file fails: "blob …: not found".)
func TestTwoNodesSharedBlobs(t *testing.T) {
	twoNodesOneBlobPlane(t, filepath.Join(t.TempDir(), "blobs"))
}

// TestTwoNodesS3 is TestTwoNodesSharedBlobs with the blobs in an S3
// bucket on a real S3 server (SeaweedFS, internal/weedtest), which init
// makes: the nodes' commands and daemons take the credentials from the
// AWS environment variables.
func TestTwoNodesS3(t *testing.T) {
	w := weedtest.Start(t)
	w.SetEnv(t)
	twoNodesOneBlobPlane(t, "s3://team-blobs/acyclicfs/one?endpoint="+w.Endpoint+"&insecure=1")
	// The objects are in the bucket, under the prefix.
	n := 0
	for o := range w.Client().ListObjects(t.Context(), "team-blobs", minio.ListObjectsOptions{Prefix: "acyclicfs/one/objects/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no object in the bucket under acyclicfs/one/objects/")
	}
}

// twoNodesOneBlobPlane: content made on node A is read by a tool on node
// B and B's landing on A, both nodes keeping their blobs on shared (a
// directory or an S3 spec).
func twoNodesOneBlobPlane(t *testing.T, shared string) {
	c := etcdtest.Start(t)
	a := clusterNode(t, c, "shared", "node-a", "--blobs", shared)
	b := clusterNode(t, c, "shared", "node-b", "--blobs", shared, "--cache-size", "64M")
	src := filepath.Join(a.dir, "src")
	writeTree(t, src, map[string]string{"a.txt": "from A\n", "dir/big.bin": strings.Repeat("0123456789abcdef", 1<<14)})
	a.ok("create", "main", "--from", src)
	a.ok("fork", "main", "kid")
	a.ok("fork", "main", "sib")

	mpB := b.mountAt("kid")
	_, r := b.execOK(mpB, "cat a.txt && wc -c < dir/big.bin && echo 'from B' > b.txt")
	if want := "from A\n262144\n"; r.stdout != want {
		t.Fatalf("B's tool read %q from A's content, want %q", r.stdout, want)
	}
	b.unmount(mpB)
	b.ok("land", "kid")

	for _, ws := range []string{"main", "sib"} {
		if r := a.run("cat", ws, "b.txt"); r.code != 0 || r.stdout != "from B\n" {
			t.Fatalf("A's cat %s b.txt: %s", ws, r)
		}
	}
	if got := readFile(t, filepath.Join(a.exportTo("main", "out"), "dir/big.bin")); got != strings.Repeat("0123456789abcdef", 1<<14) {
		t.Fatalf("A's export of main: big.bin differs (%d bytes)", len(got))
	}
	canon := shared
	if cfg, _, err := cluster.Load(b.store); err == nil {
		canon = cfg.Blobs // an S3 spec as cluster.json spells it
	}
	if r := b.run("status"); r.code != 0 || !strings.Contains(r.stdout, "node node-b of etcd://") || !strings.Contains(r.stdout, ", blobs in "+canon) {
		t.Errorf("B's status does not name its node and blobs: %s", r)
	}
	a.fsck()
	b.fsck()
	if r := a.run("init", a.store, "--meta", metaURL(c, "shared"), "--blobs", filepath.Join(a.dir, "other")); r.code != 2 || !strings.Contains(r.stderr, "blobs in "+canon) {
		t.Fatalf("init of node-a with other blobs: %s", r)
	}
}

// TestTwoNodesPinnedChildRebasedOnce: a child mounted on node A, a tool
// session open in it; node B lands a change into the parent. A's daemon
// hears of it through etcd's watch (the child shows behind its parent
// while the session runs), the session's view stays pinned, and at its
// end the child is rebased exactly once and sees B's change with its own.
func TestTwoNodesPinnedChildRebasedOnce(t *testing.T) {
	c := etcdtest.Start(t)
	shared := filepath.Join(t.TempDir(), "blobs")
	a := clusterNode(t, c, "pinned", "node-a", "--blobs", shared)
	b := clusterNode(t, c, "pinned", "node-b", "--blobs", shared)
	src := filepath.Join(a.dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n"})
	a.ok("create", "main", "--from", src)
	a.ok("fork", "main", "child")
	a.ok("fork", "main", "other")
	forkGen := a.head("child")

	mpA := a.mountAt("child")
	gate := a.fifo("gate")
	before, after := filepath.Join(a.dir, "before"), filepath.Join(a.dir, "after")
	run := a.startExec(mpA, `set -e
echo mine > own.txt
ls > "$BEFORE"
read x < "$GATE"
ls > "$AFTER"
test ! -e parent.txt
cat base.txt own.txt
`, "GATE="+gate.path, "BEFORE="+before, "AFTER="+after)
	w := gate.opened(30 * time.Second)

	// Node B lands a change into main.
	mpB := b.mountAt("other")
	b.execOK(mpB, "echo 'from B' > parent.txt")
	b.unmount(mpB)
	b.ok("land", "other")
	landed := b.head("main")

	// A's status has no event to subscribe to: poll it. The watch makes
	// the child behind with B's head pending while the session runs.
	waitFor(t, 10*time.Second, "A's child to learn of B's landing", func() bool {
		st := a.statusOf("child")
		return st.Behind && st.PendingParent != "" && strings.HasPrefix(landed, st.PendingParent)
	})
	release(t, w)
	r := run.wait(t)
	if r.code != 0 || r.stdout != "base\nmine\n" {
		t.Fatalf("the session on A saw B's change or failed: %s", r)
	}
	if bf, af := readFile(t, before), readFile(t, after); bf != af {
		t.Fatalf("the view changed under A's running session:\nbefore:\n%s\nafter:\n%s", bf, af)
	}
	if o, _ := parseOutcome(r.stderr); o != "rebased" {
		t.Fatalf("A's exec outcome %q, want rebased: %s", o, r)
	}
	if got := inSession(t, mpA, `cat parent.txt own.txt base.txt`); got != "from B\nmine\nbase\n" {
		t.Fatalf("after the rebase A's mount reads %q", got)
	}
	a.waitIdle("child")
	if log := a.log("child"); rebasesAfter(log, forkGen) != 1 {
		t.Fatalf("child on A has %d rebases for one window, want 1: %s", rebasesAfter(log, forkGen), kinds(log))
	}
	// Node B sees the child's result too.
	if r := b.run("cat", "child", "own.txt"); r.code != 0 || r.stdout != "mine\n" {
		t.Fatalf("B's cat child own.txt: %s", r)
	}
	a.unmount(mpA)
	a.fsck()
	b.fsck()
}

// TestNodeS3OutageCaptureWaits: with its blobs on S3, a node whose S3
// server is down cannot publish a capture (its objects are not in the
// bucket): the session's end reports the failure, the head does not move,
// the data stays in the mount; once S3 is back the capture is retried and
// published, and fsck from the other node (an empty cache) is clean.
func TestNodeS3OutageCaptureWaits(t *testing.T) {
	w := weedtest.Start(t)
	w.SetEnv(t)
	c := etcdtest.Start(t)
	spec := "s3://outage/p?endpoint=" + w.Endpoint + "&insecure=1"
	a := clusterNode(t, c, "outage", "node-a", "--blobs", spec)
	b := clusterNode(t, c, "outage", "node-b", "--blobs", spec)
	a.ok("create", "main")
	a.ok("fork", "main", "kid")
	mp := a.mountAt("kid")
	headBefore := a.head("kid")

	w.Stop()
	r := a.execSh(mp, "echo 'written while S3 was down' > during.txt")
	if r.code != 0 {
		t.Logf("exec while S3 is down: %s", r) // the tool itself succeeded; the outcome says the capture failed
	}
	if h := a.head("kid"); h != headBefore {
		t.Fatalf("kid's head moved to %s while S3 was down", h)
	}
	if got := inSession(t, mp, "cat during.txt"); got != "written while S3 was down\n" {
		t.Fatalf("the mount lost the write: %q", got)
	}
	w.Restart()
	// The daemon retries the capture with a back-off; no event tells the
	// test when: poll the head.
	deadline := time.Now().Add(90 * time.Second)
	for a.head("kid") == headBefore {
		if time.Now().After(deadline) {
			t.Fatalf("the capture was not published 90s after S3 came back; A's daemon log:\n%s", a.daemonLog())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := b.run("cat", "kid", "during.txt"); r.code != 0 || r.stdout != "written while S3 was down\n" {
		t.Fatalf("B's cat of the retried capture: %s", r)
	}
	a.unmount(mp)
	a.fsck()
	b.fsck()
}
