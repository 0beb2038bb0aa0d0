package test

import (
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
)

// TestSecondSignalDetachesWhenMetadataIsGone: a node's daemon serves a
// mount whose tool holds a lease with an unpublished write; two of the three
// etcd members stop, and the daemon gets SIGTERM. Its shutdown cannot publish
// (the metadata plane is gone), so it waits; a second SIGTERM makes it
// detach every mount and exit at once, as an operator expects of a
// daemon, leaving the overlay for recovery. Once etcd is back, the
// recovery (`unmount` without a daemon) publishes the write: nothing was
// lost.
func TestSecondSignalDetachesWhenMetadataIsGone(t *testing.T) {
	c := etcdtest.Start(t)
	a := clusterNode(t, c, "sigterm", "node-a", "--blobs", filepath.Join(t.TempDir(), "blobs"))
	src := filepath.Join(a.dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n"})
	a.ok("create", "ws", "--from", src)
	mp := a.mountAt("ws")
	hold := a.fifo("hold")
	bg := a.startExec(mp, "echo kept > kept.txt && sync kept.txt && read x < "+hold.path)
	w := hold.opened(30 * time.Second)
	pid := a.daemonPID()

	// Two of three members stop: no quorum, every request waits.
	c.Stop(0)
	c.Stop(1)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The first signal's shutdown ends the lease and tries to publish;
	// the tool is released so that nothing but etcd holds it up.
	w.Write([]byte("go\n"))
	w.Close()
	bg.wait(t)
	if err := waitGone(pid, 2*time.Second); err == nil {
		t.Fatalf("the daemon exited on the first SIGTERM with etcd gone; the test needs a shutdown that waits:\n%s", a.daemonLog())
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatalf("a second SIGTERM did not end the daemon: %v\n%s", err, a.daemonLog())
	}
	if slices.Contains(fuseMounts(), mp) {
		t.Fatalf("%s is still mounted after the daemon exited", mp)
	}
	if !strings.Contains(a.daemonLog(), "second") {
		t.Fatalf("the daemon's log does not say why it stopped waiting:\n%s", a.daemonLog())
	}

	c.Restart(0)
	c.Restart(1)
	r := a.run("unmount", mp)
	if r.code != 0 || !strings.Contains(r.stderr, "recovered unpublished changes of ws") {
		t.Fatalf("recovery after the detach: %s", r)
	}
	if r := a.run("cat", "ws", "kept.txt"); r.code != 0 || r.stdout != "kept\n" {
		t.Fatalf("ws after recovery: %s", r)
	}
	a.fsck()
}
