package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
)

// Failure cases of two nodes through the binary (issue #28 "Tests"): a
// node paused past its TTL and a node that died, each finding another
// node holding its workspace. Neither publishes anything to it, and what
// it had not published is kept as a fork (daemon/fenced.go,
// docs/scale-out.md "Failure model").

// fencedRow is the part of a `status --json` row this file reads.
type fencedRow struct {
	Workspace string `json:"workspace"`
	Fenced    *struct {
		Node   string `json:"node"`
		Pinned string `json:"pinned"`
		Fork   string `json:"fork"`
	} `json:"fenced"`
}

// fencedOf returns the fork status names for e's fenced mount of ws
// ("" while it is not fenced).
func (e *env) fencedOf(ws string) (node, fork string) {
	e.t.Helper()
	r := e.run("--json", "status")
	if r.code != 0 {
		e.t.Fatalf("status --json: %s", r)
	}
	var s struct {
		Workspaces []fencedRow `json:"workspaces"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		e.t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	for _, w := range s.Workspaces {
		if w.Workspace == ws && w.Fenced != nil {
			return w.Fenced.Node, w.Fenced.Fork
		}
	}
	return "", ""
}

// mountWhenFree mounts ws at a fresh mountpoint of e once no other node's
// claim holds it (exit 4 until then). The expiry of a stopped or dead
// node's claim lease has no event the binary reports: polled, with a
// deadline well past the 2s TTL.
func (e *env) mountWhenFree(ws string) string {
	e.t.Helper()
	mp := filepath.Join(e.dir, "mnt-"+ws)
	if err := os.MkdirAll(mp, 0o755); err != nil {
		e.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := e.run("mount", ws, mp)
		if r.code == 0 {
			return mp
		}
		if r.code != 4 || time.Now().After(deadline) {
			e.t.Fatalf("mount %s once the other node's claim expired: %s", ws, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logGens is ws's head history as e's `log` prints it, newest first.
func (e *env) logGens(ws string) []string {
	e.t.Helper()
	var out []string
	for _, l := range e.log(ws) {
		out = append(out, l.gen+" "+l.kind+" "+l.op)
	}
	return out
}

// TestFencedNodeLosesNothing: node A mounts ws, a tool writes and holds
// its session; A's daemon is stopped (SIGSTOP) past the claim TTL; node B
// claims ws, sees the last published head, writes, lands (unmounts). A
// continued (SIGCONT) publishes nothing to ws: its mount goes read-only
// and its unpublished write becomes the workspace ws.fenced-node-a-1,
// forked from the generation A's view was pinned to, which lands like any
// fork. fsck is clean on both nodes.
//
// Without the claim history check (cluster.Claims.claimed) A, finding no
// claim once B unmounted, claims ws again and publishes its write onto B's
// head: the test times out waiting for the fence.
func TestFencedNodeLosesNothing(t *testing.T) {
	c := etcdtest.Start(t)
	shared := filepath.Join(t.TempDir(), "blobs")
	a := clusterNode(t, c, "fence", "node-a", "--claim-ttl", "2s", "--blobs", shared)
	b := clusterNode(t, c, "fence", "node-b", "--claim-ttl", "2s", "--blobs", shared)
	src := filepath.Join(a.dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n"})
	a.ok("create", "ws", "--from", src)
	pinned := a.head("ws")

	mpA := a.mountAt("ws", "--lease-ttl", "2s")
	hold := a.fifo("hold")
	tool := a.startExec(mpA, "echo 'from A' > a.txt && read x < "+hold.path+" && echo late > late.txt")
	w := hold.opened(30 * time.Second) // the tool wrote and waits, its session open
	before := a.logGens("ws")

	pid := a.daemonPID()
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

	// B takes ws over: its view is the last published head (no a.txt).
	mpB := b.mountWhenFree("ws")
	if node, mp := b.clusterStatus().holder("ws"); node != "node-b" || mp != mpB {
		t.Fatalf("B's status: ws held by %q at %q, want node-b", node, mp)
	}
	b.execOK(mpB, "test ! -e a.txt && test \"$(cat base.txt)\" = base && echo 'from B' > b.txt")
	b.unmount(mpB)
	afterB := b.logGens("ws")
	if len(afterB) != len(before)+1 || strings.Join(afterB[1:], "\n") != strings.Join(before, "\n") {
		t.Fatalf("ws's log after B's landing:\n%s\nbefore:\n%s", strings.Join(afterB, "\n"), strings.Join(before, "\n"))
	}

	// A continues: it finds ws claimed by B since it lost its claim.
	cont()
	var fork string
	waitFor(t, 30*time.Second, "A to report its mount of ws fenced", func() bool {
		_, fork = a.fencedOf("ws")
		return fork != ""
	})
	if node, _ := a.fencedOf("ws"); node != "node-b" || fork != "ws.fenced-node-a-1" {
		t.Fatalf("A's status: ws fenced by %q into %q, want node-b and ws.fenced-node-a-1", node, fork)
	}
	if r := a.run("status"); !strings.Contains(r.stdout, "fenced ws "+mpA+": node node-b claimed ws") ||
		!strings.Contains(r.stdout, "unpublished changes are workspace "+fork) {
		t.Errorf("A's status does not say the mount is fenced: %s", r)
	}
	// The mount is read-only: the tool's next write fails.
	release(t, w)
	if r := tool.wait(t); r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("the tool's write after the fence: %s", r)
	}
	if _, err := os.Stat(filepath.Join(mpA, "a.txt")); err != nil {
		t.Errorf("A's mount no longer shows the tool's file: %v", err)
	}
	a.unmount(mpA)
	if !strings.Contains(a.daemonLog(), "ws at "+mpA+": fenced: node node-b claimed ws") {
		t.Errorf("A's daemon log does not say ws was fenced:\n%s", a.daemonLog())
	}

	// Nothing of A reached ws, on either node.
	for _, e := range []*env{a, b} {
		if got := e.logGens("ws"); strings.Join(got, "\n") != strings.Join(afterB, "\n") {
			t.Fatalf("ws's log changed after B's landing (A published):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(afterB, "\n"))
		}
		if r := e.run("cat", "ws", "a.txt"); r.code == 0 {
			t.Fatalf("ws has A's file: %s", r)
		}
	}
	// A's write is in the fork, made from the generation A's view showed.
	if r := b.run("cat", fork, "a.txt"); r.code != 0 || r.stdout != "from A\n" {
		t.Fatalf("cat %s a.txt on B: %s", fork, r)
	}
	if r := b.run("cat", fork, "b.txt"); r.code == 0 {
		t.Fatalf("the fork has B's file: it was not made from A's pinned view: %s", r)
	}
	if fl := b.log(fork); fl[len(fl)-1].gen != pinned {
		t.Fatalf("%s starts at %s, want A's pinned %s", fork, fl[len(fl)-1].gen, pinned)
	}
	if r := a.run("list"); !strings.Contains(r.stdout, fork) {
		t.Fatalf("list does not show %s: %s", fork, r)
	}
	a.fsck()
	b.fsck()
	// Landable like any fork: ws then has both writes.
	b.ok("land", fork)
	for f, want := range map[string]string{"a.txt": "from A\n", "b.txt": "from B\n"} {
		if r := a.run("cat", "ws", f); r.code != 0 || r.stdout != want {
			t.Fatalf("cat ws %s after landing the fork: %s", f, r)
		}
	}
}

// TestRecoveryTakesClaim: node A's daemon dies (SIGKILL) with a tool's
// write in its mount's overlay; node B claims ws after the TTL and mounts
// it. A's recovery of the dead mount (its `unmount`, run without a daemon)
// claims ws first, finds B holding it, and keeps the dead mount's write as
// a fork instead of publishing it; ws's history is B's alone. Once B
// unmounts, a recovery on A publishes as on one machine.
//
// Without the claim in RecoverMount A's recovery publishes a.txt onto ws
// under B's mount and the log check fails.
func TestRecoveryTakesClaim(t *testing.T) {
	c := etcdtest.Start(t)
	shared := filepath.Join(t.TempDir(), "blobs")
	a := clusterNode(t, c, "recover", "node-a", "--claim-ttl", "2s", "--blobs", shared)
	b := clusterNode(t, c, "recover", "node-b", "--claim-ttl", "2s", "--blobs", shared)
	src := filepath.Join(a.dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n"})
	a.ok("create", "ws", "--from", src)
	a.ok("create", "other", "--from", src)

	for _, ws := range []string{"ws", "other"} {
		mp := a.mountAt(ws, "--lease-ttl", "2s")
		hold := a.fifo("hold-" + ws)
		a.startExec(mp, "echo 'from A' > a.txt && sync a.txt && read x < "+hold.path)
		hold.opened(30 * time.Second)
	}
	before := a.logGens("ws")
	pid := a.daemonPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	mpB := b.mountWhenFree("ws")
	b.execOK(mpB, "test ! -e a.txt && echo 'from B' > b.txt")
	afterB := b.logGens("ws")

	mpA := filepath.Join(a.dir, "mnt-ws")
	r := a.run("unmount", mpA)
	if r.code != 0 || !strings.Contains(r.stderr, "ws is mounted on node node-b at "+mpB) ||
		!strings.Contains(r.stderr, "as workspace ws.fenced-node-a-1") {
		t.Fatalf("A's recovery of its dead mount of ws while B mounts it: %s", r)
	}
	if got := b.logGens("ws"); strings.Join(got, "\n") != strings.Join(afterB, "\n") {
		t.Fatalf("A's recovery published to ws under B's mount:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(afterB, "\n"))
	}
	if len(afterB) != len(before)+1 {
		t.Fatalf("ws's log on B: %d entries, want %d (B's capture only)", len(afterB), len(before)+1)
	}
	if r := b.run("cat", "ws.fenced-node-a-1", "a.txt"); r.code != 0 || r.stdout != "from A\n" {
		t.Fatalf("the fork of A's dead mount: %s", r)
	}
	if node, _ := a.clusterStatus().holder("ws"); node != "node-b" {
		t.Fatalf("after A's recovery ws is held by %q, want node-b still", node)
	}
	// Nobody holds "other": A's recovery claims it, publishes as on one
	// machine, and releases the claim.
	r = a.run("unmount", filepath.Join(a.dir, "mnt-other"))
	if r.code != 0 || !strings.Contains(r.stderr, "recovered unpublished changes of other") {
		t.Fatalf("A's recovery of other, claimed by nobody: %s", r)
	}
	if r := b.run("cat", "other", "a.txt"); r.code != 0 || r.stdout != "from A\n" {
		t.Fatalf("other after A's recovery: %s", r)
	}
	if node, _ := b.clusterStatus().holder("other"); node != "" {
		t.Fatalf("A's recovery left a claim on other by %q", node)
	}
	b.unmount(mpB)
	a.fsck()
	b.fsck()
}

// TestRecoveryForksAfterAClaimMadeAndReleased: node A mounts ws and a tool
// writes; A's daemon is killed. Node B mounts ws once A's claim expired,
// writes, and unmounts: ws moved on and nobody holds its claim any more.
// A's recovery (its `unmount`, run without a daemon) claims ws, finds in
// the claim's history since the revision its mount record kept that B
// claimed ws meanwhile, and keeps the dead mount's write as the fork
// ws.fenced-node-a-1 instead of publishing it; ws's history is B's alone.
//
// Without the claim revision in the mount record A's recovery, finding no
// claim, publishes a.txt onto B's head and the log check fails.
func TestRecoveryForksAfterAClaimMadeAndReleased(t *testing.T) {
	c := etcdtest.Start(t)
	shared := filepath.Join(t.TempDir(), "blobs")
	a := clusterNode(t, c, "recover2", "node-a", "--claim-ttl", "2s", "--blobs", shared)
	b := clusterNode(t, c, "recover2", "node-b", "--claim-ttl", "2s", "--blobs", shared)
	src := filepath.Join(a.dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n"})
	a.ok("create", "ws", "--from", src)

	mp := a.mountAt("ws", "--lease-ttl", "2s")
	hold := a.fifo("hold-ws")
	a.startExec(mp, "echo 'from A' > a.txt && sync a.txt && read x < "+hold.path)
	hold.opened(30 * time.Second)
	pid := a.daemonPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	mpB := b.mountWhenFree("ws")
	b.execOK(mpB, "test ! -e a.txt && echo 'from B' > b.txt")
	b.unmount(mpB)
	afterB := b.logGens("ws")
	if node, _ := b.clusterStatus().holder("ws"); node != "" {
		t.Fatalf("after B's unmount ws is held by %q, want nobody", node)
	}

	r := a.run("unmount", mp)
	if r.code != 0 || !strings.Contains(r.stderr, "node-b") || !strings.Contains(r.stderr, "as workspace ws.fenced-node-a-1") {
		t.Fatalf("A's recovery of its dead mount of ws after B claimed and released it: %s", r)
	}
	if got := b.logGens("ws"); strings.Join(got, "\n") != strings.Join(afterB, "\n") {
		t.Fatalf("A's recovery published to ws after B's claim:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(afterB, "\n"))
	}
	if r := b.run("cat", "ws.fenced-node-a-1", "a.txt"); r.code != 0 || r.stdout != "from A\n" {
		t.Fatalf("the fork of A's dead mount: %s", r)
	}
	if node, _ := a.clusterStatus().holder("ws"); node != "" {
		t.Fatalf("A's recovery left a claim on ws by %q", node)
	}
	a.fsck()
	b.fsck()
}
