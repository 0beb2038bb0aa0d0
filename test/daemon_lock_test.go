package test

import (
	"strings"
	"testing"
)

// One daemon per store (its flock on STORE/daemon.lock): a second
// `acyclicfs daemon` while one serves waits for the lock, bounded, and
// gives up naming the store; the first daemon keeps serving its mount.
func TestSecondDaemonRefused(t *testing.T) {
	t.Parallel()
	e, mp := toolMount(t)
	pid := e.daemonPID()
	r := e.run("daemon")
	if r.code != 1 || !strings.Contains(r.stderr, "another daemon already serves "+e.store) {
		t.Fatalf("a second daemon on a served store: %s; want exit 1 and \"another daemon already serves %s\"", r, e.store)
	}
	if got := e.daemonPID(); got != pid {
		t.Fatalf("daemon.pid names %d after the refused daemon, want the serving %d", got, pid)
	}
	if _, r := e.execOK(mp, "echo after > f; cat f"); r.stdout != "after\n" {
		t.Fatalf("the first daemon's mount after the refused daemon: %q", r.stdout)
	}
	e.unmountAndExport(mp)
}
