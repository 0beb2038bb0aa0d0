package test

import (
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Durability through real mounts: data a tool fsynced survives kill -9 of
// the daemon, and the next mount of the workspace recovers it.

// crashScript writes through the mount with fsync: a new file, a large
// file copied from PAYLOAD, an append to an existing file, a new directory
// tree, a rename across directories and a delete (each directory synced);
// then it kills the daemon with SIGKILL while its own session (and so its
// lease) is still open: nothing can have been captured.
const crashScript = `set -e
printf 'alpha\n' > a.txt && sync a.txt
mkdir -p newdir/sub
dd if="$PAYLOAD" of=newdir/sub/big.bin bs=65536 conv=fsync 2>/dev/null
printf 'more\n' >> base.txt && sync base.txt
mv a.txt newdir/renamed.txt
rm gone.txt
sync newdir newdir/sub .
kill -9 "$DPID"
`

// crashWant is the tree crashScript leaves, given the payload.
func crashWant(payload []byte) map[string]string {
	file := func(s string) string { return "file x=false " + strconv.Quote(s) }
	return map[string]string{
		"base.txt":           file("base\nmore\n"),
		"keep/k.txt":         file("keep\n"),
		"keep":               "dir",
		"newdir":             "dir",
		"newdir/sub":         "dir",
		"newdir/renamed.txt": file("alpha\n"),
		"newdir/sub/big.bin": file(string(payload)),
	}
}

// crashSetup creates main and child, mounts child with flags, runs
// crashScript in a new session and waits until the daemon is gone.
func crashSetup(t *testing.T, flags ...string) (e *env, mp string, want map[string]string) {
	e = newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n", "gone.txt": "bye\n", "keep/k.txt": "keep\n"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "child")
	mp = e.mountAt("child", flags...)
	// On failure a recovered daemon may be wedged (see the BUG tests):
	// abort its mount and kill it so that the env's shutdown cannot hang.
	// Registered after newEnv's cleanup, so it runs first.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		abortFuse(mp)
		if b, err := os.ReadFile(filepath.Join(e.store, "daemon.pid")); err == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
				waitGone(pid, 10*time.Second)
			}
		}
	})
	payload := make([]byte, 3<<20+12345)
	rand.New(rand.NewSource(1)).Read(payload)
	pf := filepath.Join(e.dir, "payload")
	if err := os.WriteFile(pf, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	pid := e.daemonPID()
	cmdEnv := "PAYLOAD=" + pf + " DPID=" + strconv.Itoa(pid)
	r, err := sessionRun(mp, "export "+cmdEnv+"; "+crashScript)
	if err != nil || r.code != 0 {
		t.Fatalf("writer: %v %s\ndaemon log:\n%s", err, r, e.daemonLog())
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatalf("daemon survived kill -9: %v", err)
	}
	return e, mp, crashWant(payload)
}

// waitDead waits until the dead mount answers ENOTCONN to statfs. A stat
// of the mount root may be answered from the kernel's attribute cache for
// as long as it lasts (see TestCrashRemountWhileRootAttrsCached); statfs
// always reaches the connection.
func waitDead(t *testing.T, mp string) {
	t.Helper()
	waitFor(t, 5*time.Second, "the dead mount to answer ENOTCONN", func() bool {
		var st syscall.Statfs_t
		return errors.Is(syscall.Statfs(mp, &st), syscall.ENOTCONN)
	})
}

// waitLeasesExpired waits until every lease of name's window has expired
// (status prints expiry to the second).
func (e *env) waitLeasesExpired(name string) {
	e.t.Helper()
	r := e.run("--json", "status", name)
	var latest time.Time
	for _, f := range strings.Split(r.stdout, "\"expires\": \"")[1:] {
		ts, _, _ := strings.Cut(f, "\"")
		if at, err := time.Parse(time.RFC3339, ts); err == nil && at.After(latest) {
			latest = at
		}
	}
	waitFor(e.t, 15*time.Second, "the dead daemon's leases to expire", func() bool {
		return time.Now().After(latest.Add(1100 * time.Millisecond))
	})
}

func TestCrashFsyncedDataSurvivesKill(t *testing.T) {
	t.Parallel()
	e, mp, want := crashSetup(t, "--lease-ttl", "1s")
	// The dead daemon's mount and lease are reported as recovery work.
	st := e.status()
	if len(st.Recovery) == 0 || !strings.Contains(strings.Join(st.Recovery, "\n"), mp) {
		t.Fatalf("status after the crash lists no recovery work for %s: %+v", mp, st.Recovery)
	}
	e.waitLeasesExpired("child")
	waitDead(t, mp)
	r := e.run("mount", "child", mp, "--lease-ttl", "1s")
	if r.code != 0 {
		t.Fatalf("remount after kill -9: %s\ndaemon log:\n%s", r, e.daemonLog())
	}
	if !strings.Contains(r.stderr, "recovery:") {
		t.Errorf("remount did not report its recovery: %q", r.stderr)
	}
	if !slices.Contains(fuseMounts(), mp) {
		t.Fatal("remount did not mount")
	}
	// Read everything back from a new session, through the mount.
	got := map[string]string{}
	for _, p := range []string{"base.txt", "newdir/renamed.txt", "keep/k.txt"} {
		got[p] = inSession(t, mp, "cat "+p)
	}
	if got["base.txt"] != "base\nmore\n" || got["newdir/renamed.txt"] != "alpha\n" || got["keep/k.txt"] != "keep\n" {
		t.Fatalf("after recovery the mount reads %q", got)
	}
	cmpOut := inSession(t, mp, "ls -A; cmp newdir/sub/big.bin "+filepath.Join(e.dir, "payload")+" && echo same")
	if cmpOut != "base.txt\nkeep\nnewdir\nsame\n" {
		t.Fatalf("after recovery: ls and cmp of the fsynced payload gave %q", cmpOut)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount after recovery: %q", o)
	}
	e.fsck()
	log := e.log("child")
	if countKind(log, "capture") == 0 {
		t.Fatalf("log child shows no capture of the recovered data: %s", kinds(log))
	}
	sameTree(t, "export after recovery", want, treeList(t, e.exportTo("child", "out")))
	st = e.status()
	if len(st.Recovery) != 0 {
		t.Fatalf("recovery work left after remount and unmount: %q", st.Recovery)
	}
	if w := e.statusOf("child"); w.Window != "idle" || len(w.Leases) != 0 {
		t.Fatalf("child's window after recovery: %+v", w)
	}
}

// The crashed session's lease is still valid when the workspace is mounted
// again: the recovered mount must show the data at once and, once that
// lease expires, keep serving new sessions and reconcile normally.
func TestCrashRemountBeforeLeaseExpiry(t *testing.T) {
	t.Parallel()
	e, mp, want := crashSetup(t, "--lease-ttl", "3s")
	waitDead(t, mp)
	r := e.run("mount", "child", mp, "--lease-ttl", "3s")
	if r.code != 0 {
		t.Fatalf("remount after kill -9: %s", r)
	}
	if got := inSession(t, mp, "cat newdir/renamed.txt base.txt"); got != "alpha\nbase\nmore\n" {
		t.Fatalf("recovered mount reads %q", got)
	}
	e.waitLeasesExpired("child")
	e.advanceMain(map[string]string{"p.txt": "p\n"})
	res, err := sessionRun(mp, "cat p.txt newdir/renamed.txt")
	if err != nil || res.code != 0 || res.stdout != "p\nalpha\n" {
		t.Fatalf("a new session after the dead lease expired: %v %s\nstatus:\n%s\ndaemon log:\n%s", err, res, e.run("status"), e.daemonLog())
	}
	if o, _ := e.unmount(mp); o != "current" && o != "rebased" {
		t.Fatalf("unmount: %q", o)
	}
	if w := e.statusOf("child"); w.Window != "idle" || w.Behind {
		t.Fatalf("window after unmount: %+v", w)
	}
	want["p.txt"] = `file x=false "p\n"`
	sameTree(t, "export", want, treeList(t, e.exportTo("child", "out")))
	e.fsck()
}

// The SPEC: "A mountpoint left dead by a crashed daemon is cleaned up and
// recovered by the next mount of that workspace" — also when the kernel
// still caches the root's attributes (a clean root: one hour).
func TestCrashRemountWhileRootAttrsCached(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"dir/f": "1\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w", "--lease-ttl", "1s")
	pid := e.daemonPID()
	// Only an existing file below the root changes: the root stays clean.
	r, err := sessionRun(mp, "stat . >/dev/null; printf '2\\n' >> dir/f && sync dir/f && kill -9 "+strconv.Itoa(pid))
	if err != nil || r.code != 0 {
		t.Fatalf("writer: %v %s", err, r)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitLeasesExpired("w")
	if r := e.run("mount", "w", mp); r.code != 0 {
		t.Fatalf("remount of a dead mount: %s", r)
	}
	if got := inSession(t, mp, "cat dir/f"); got != "1\n2\n" {
		t.Fatalf("recovered mount reads %q", got)
	}
	e.unmount(mp)
	e.fsck()
}

// A crash with no session open loses nothing either: the last close had
// already captured, and the remount serves the same head.
func TestCrashWhileIdle(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	e.ok("create", "w")
	mp := e.mountAt("w")
	inSession(t, mp, "mkdir d && printf 'x\\n' > d/x && sync d/x")
	e.waitIdle("w")
	head := e.head("w")
	if countKind(e.log("w"), "capture") != 1 {
		t.Fatalf("the closed session was not captured: %s", kinds(e.log("w")))
	}
	pid := e.daemonPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitDead(t, mp)
	// With the daemon gone, exec and lease at the dead mount say so and
	// name the workspace to mount again (exit 1); a directory that never
	// was a mount of this store is a usage error (exit 2).
	r := e.fails(1, "exec", mp, "--", "true")
	if !strings.Contains(r.stderr, "the daemon that served this mount is gone (workspace w)") || !strings.Contains(r.stderr, "hint: 'acyclicfs mount WORKSPACE'") {
		t.Errorf("exec at a dead mount: %s", r)
	}
	e.fails(1, "lease", "begin", mp, "--owner", "o")
	other := t.TempDir()
	r = e.fails(2, "exec", other, "--", "true")
	if !strings.Contains(r.stderr, "not an acyclicfs mount of this store (and no daemon is running)") || !strings.Contains(r.stderr, "hint: mount a workspace there first") {
		t.Errorf("exec at a plain directory: %s", r)
	}
	if r := e.run("mount", "w", mp); r.code != 0 {
		t.Fatalf("remount: %s", r)
	}
	r = e.fails(2, "exec", other, "--", "true")
	if !strings.Contains(r.stderr, "not an acyclicfs mount of this store") || strings.Contains(r.stderr, "no daemon") {
		t.Errorf("exec at a plain directory, daemon running: %s", r)
	}
	if got := inSession(t, mp, "cat d/x"); got != "x\n" {
		t.Fatalf("after remount: %q", got)
	}
	e.waitIdle("w")
	if e.head("w") != head {
		t.Fatalf("head moved from %s to %s without changes: %s", head, e.head("w"), kinds(e.log("w")))
	}
	e.unmount(mp)
	e.fsck()
}

// TestShutdownRecoversEveryDeadMount: after the daemon is killed with
// two mounts, one shutdown detaches both dead mountpoints and recovers
// their workspaces (fsynced data kept), with a daemon serving a third
// mount meanwhile and without one.
func TestShutdownRecoversEveryDeadMount(t *testing.T) {
	t.Parallel()
	for _, withDaemon := range []bool{false, true} {
		e := newMountEnv(t)
		e.ok("create", "main")
		var mps []string
		for _, ws := range []string{"a", "b"} {
			e.ok("fork", "main", ws)
			mp := e.mountAt(ws)
			inSession(t, mp, "echo "+ws+" > f && sync f")
			mps = append(mps, mp)
		}
		pid := e.daemonPID()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := waitGone(pid, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, mp := range mps {
			waitDead(t, mp)
		}
		if withDaemon {
			e.ok("fork", "main", "c")
			e.mountAt("c")
		}
		r := e.run("shutdown")
		if r.code != 0 || strings.Count(r.stdout, "recovered from a dead daemon") != 2 {
			t.Fatalf("shutdown (daemon running: %v): %s", withDaemon, r)
		}
		for i, ws := range []string{"a", "b"} {
			if st := e.statusOf(ws); st.State != "idle" {
				t.Errorf("%s after shutdown: %s", ws, st.State)
			}
			if slices.Contains(fuseMounts(), mps[i]) {
				t.Errorf("%s still mounted at %s", ws, mps[i])
			}
			if got := e.content(ws, "f"); got != ws+"\n" {
				t.Errorf("%s's fsynced file after recovery: %q", ws, got)
			}
		}
		e.fsck()
	}
}

// syncScript copies a tree into the mount with cp -r (no fsync anywhere),
// runs SYNC, then kills the daemon with SIGKILL while its session is open.
const syncScript = `set -e
mkdir -p src/sub
printf 'one\n' > src/a.txt
dd if="$PAYLOAD" of=src/sub/big.bin bs=65536 2>/dev/null
cp -r src copy
printf 'more\n' >> base.txt
mv keep moved
$SYNC
kill -9 "$DPID"
`

// TestCrashAfterSync: a finished cp -r followed by sync(1) — syncfs of a
// file in the mount (sync -f) or the global sync — is intact after the
// daemon is killed with SIGKILL and the workspace mounted again. The kernel
// sends nothing to a FUSE daemon on sync or syncfs; the overlay log written
// before each request's reply is what keeps it.
func TestCrashAfterSync(t *testing.T) {
	for _, c := range []struct{ name, sync string }{
		{"syncfs", "sync -f copy/a.txt"},
		{"sync", "sync"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newMountEnv(t)
			src := filepath.Join(e.dir, "src")
			writeTree(t, src, map[string]string{"base.txt": "base\n", "keep/k.txt": "keep\n"})
			e.ok("create", "main", "--from", src)
			e.ok("fork", "main", "child")
			mp := e.mountAt("child", "--lease-ttl", "1s")
			t.Cleanup(func() {
				if t.Failed() {
					abortFuse(mp)
				}
			})
			payload := make([]byte, 1<<20+777)
			rand.New(rand.NewSource(2)).Read(payload)
			pf := filepath.Join(e.dir, "payload")
			if err := os.WriteFile(pf, payload, 0o644); err != nil {
				t.Fatal(err)
			}
			pid := e.daemonPID()
			env := "PAYLOAD=" + pf + " DPID=" + strconv.Itoa(pid) + " SYNC='" + c.sync + "'"
			r, err := sessionRun(mp, "export "+env+"; "+syncScript)
			if err != nil || r.code != 0 {
				t.Fatalf("writer: %v %s", err, r)
			}
			if err := waitGone(pid, 10*time.Second); err != nil {
				t.Fatalf("daemon survived kill -9: %v", err)
			}
			e.waitLeasesExpired("child")
			waitDead(t, mp)
			r = e.run("mount", "child", mp, "--lease-ttl", "1s")
			if r.code != 0 {
				t.Fatalf("remount after kill -9: %s\ndaemon log:\n%s", r, e.daemonLog())
			}
			if strings.Contains(r.stderr, "dropped") || strings.Contains(r.stderr, "not replayed") {
				t.Errorf("recovery reports a loss: %q", r.stderr)
			}
			got := inSession(t, mp, "cat src/a.txt copy/a.txt base.txt moved/k.txt; cmp src/sub/big.bin "+pf+" && cmp copy/sub/big.bin "+pf+" && echo same; ls keep 2>&1 >/dev/null | wc -l")
			if want := "one\none\nbase\nmore\nkeep\nsame\n1\n"; got != want {
				t.Fatalf("after kill -9 and remount the mount reads %q, want %q\ndaemon log:\n%s", got, want, e.daemonLog())
			}
			if o, _ := e.unmount(mp); o != "current" {
				t.Fatalf("unmount after recovery: %q", o)
			}
			e.fsck()
		})
	}
}

// TestCrashRecoveryReportsDroppedData: after kill -9 the dead mount's state
// holds an upper file with data that no record names (as a create the
// crash interrupted leaves); the remount deletes it and says so — count and
// bytes — on its stderr, in status and in the daemon log, and keeps
// everything else.
func TestCrashRecoveryReportsDroppedData(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "child")
	mp := e.mountAt("child", "--lease-ttl", "1s")
	pid := e.daemonPID()
	r, err := sessionRun(mp, `printf 'kept\n' > kept.txt && kill -9 `+strconv.Itoa(pid))
	if err != nil || r.code != 0 {
		t.Fatalf("writer: %v %s", err, r)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatalf("daemon survived kill -9: %v", err)
	}
	if err := os.WriteFile(filepath.Join(e.store, "mounts", "child", "upper", "999999"), []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.waitLeasesExpired("child")
	waitDead(t, mp)
	r = e.run("mount", "child", mp, "--lease-ttl", "1s")
	if r.code != 0 {
		t.Fatalf("remount after kill -9: %s", r)
	}
	const lost = "dropped 1 upper file (5 bytes)"
	if !strings.Contains(r.stderr, "recovery: child: "+lost) {
		t.Errorf("remount does not report the dropped data: %q", r.stderr)
	}
	if st := e.status(); !strings.Contains(strings.Join(st.Recovery, "\n"), lost) {
		t.Errorf("status does not report the dropped data: %q", st.Recovery)
	}
	if !strings.Contains(e.daemonLog(), lost) {
		t.Errorf("daemon log does not report the dropped data:\n%s", e.daemonLog())
	}
	if got := inSession(t, mp, "cat kept.txt base.txt"); got != "kept\nbase\n" {
		t.Fatalf("after recovery the mount reads %q", got)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount after recovery: %q", o)
	}
}
