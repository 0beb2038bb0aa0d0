package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SPEC semantics of operation windows through real mounts: a session's
// view is pinned, the last close captures and rebases exactly once, an
// idle mount follows its parent at once, conflicts are reported and keep
// the mount's data.

// forkMounted creates main from files, forks child and mounts it.
func forkMounted(t *testing.T, files map[string]string, flags ...string) (*env, string) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, files)
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "child")
	return e, e.mountAt("child", flags...)
}

// advanceMain commits main's head plus files (and minus remove) as main's
// next generation, through an export outside any mount.
func (e *env) advanceMain(files map[string]string, remove ...string) string {
	e.t.Helper()
	dir, err := os.MkdirTemp(e.dir, "main-")
	if err != nil {
		e.t.Fatal(err)
	}
	e.ok("export", "main", dir, "--force")
	writeTree(e.t, dir, files)
	for _, r := range remove {
		os.Remove(filepath.Join(dir, r))
	}
	return e.ok("commit", "main", dir)
}

// rebasesAfter counts rebase entries in log newer than generation gen.
func rebasesAfter(log []logEntry, gen string) int {
	n := 0
	for _, l := range log {
		if l.gen == gen {
			break
		}
		if l.kind == "rebase" {
			n++
		}
	}
	return n
}

func TestWindowPinnedViewThenOneRebase(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base.txt": "base\n"})
	forkGen := e.head("child")
	gate := e.fifo("gate")
	seenBefore, seenAfter := filepath.Join(e.dir, "before"), filepath.Join(e.dir, "after")
	run := e.startExec(mp, `set -e
echo mine > own.txt
ls > "$BEFORE"
read x < "$GATE"
ls > "$AFTER"
test ! -e parent.txt
cat base.txt own.txt
`, "GATE="+gate.path, "BEFORE="+seenBefore, "AFTER="+seenAfter)
	w := gate.opened(30 * time.Second)
	st := e.statusOf("child")
	if st.Window != "active" || len(st.Leases) != 1 {
		t.Fatalf("while exec runs: window %q with %d leases, want active with 1", st.Window, len(st.Leases))
	}
	parentGen := e.advanceMain(map[string]string{"parent.txt": "from parent\n"})
	st = e.statusOf("child")
	if !strings.HasPrefix(parentGen, st.PendingParent) || st.PendingParent == "" || !st.Behind {
		t.Fatalf("after the parent advanced: pending parent %q behind %v, want %s", st.PendingParent, st.Behind, parentGen)
	}
	release(t, w)
	r := run.wait(t)
	if r.code != 0 {
		t.Fatalf("the running session saw the parent's change or failed: %s", r)
	}
	if r.stdout != "base\nmine\n" {
		t.Fatalf("session output %q", r.stdout)
	}
	if before, after := readFile(t, seenBefore), readFile(t, seenAfter); before != after || strings.Contains(after, "parent.txt") {
		t.Fatalf("the view changed under a running session:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if o, _ := parseOutcome(r.stderr); o != "rebased" {
		t.Fatalf("exec outcome %q, want rebased: %s", o, r)
	}
	// A new session sees both sides.
	if got := inSession(t, mp, `cat parent.txt own.txt base.txt`); got != "from parent\nmine\nbase\n" {
		t.Fatalf("after the rebase a new session reads %q", got)
	}
	e.waitIdle("child")
	log := e.log("child")
	if n := rebasesAfter(log, forkGen); n != 1 {
		t.Fatalf("log child has %d rebase entries for one window, want 1: %s", n, kinds(log))
	}
	if log[0].kind != "rebase" || countKind(log, "capture") != 1 {
		t.Fatalf("log child = %s, want rebase on top of one capture", kinds(log))
	}
	if st := e.statusOf("child"); st.Behind || st.PendingParent != "" {
		t.Fatalf("child still behind after the rebase: %+v", st)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount after the rebase: %q, want current", o)
	}
	e.fsck()
}

func TestWindowOverlappingSessionsRebaseOnce(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base.txt": "base\n"})
	forkGen := e.head("child")
	g1, g2 := e.fifo("g1"), e.fifo("g2")
	first := e.startExec(mp, `echo one > one.txt; read x < "$G"; test ! -e parent.txt`, "G="+g1.path)
	w1 := g1.opened(30 * time.Second)
	second := e.startExec(mp, `echo two > two.txt; read x < "$G"; test ! -e parent.txt`, "G="+g2.path)
	w2 := g2.opened(30 * time.Second)
	if st := e.statusOf("child"); len(st.Leases) != 2 {
		t.Fatalf("two sessions: %d leases in status, want 2", len(st.Leases))
	}
	e.advanceMain(map[string]string{"parent.txt": "p\n"})
	release(t, w1)
	r1 := first.wait(t)
	if o, _ := parseOutcome(r1.stderr); r1.code != 0 || o != "still-active" {
		t.Fatalf("first session to end: want exit 0 and still-active, got %s", r1)
	}
	if log := e.log("child"); rebasesAfter(log, forkGen) != 0 {
		t.Fatalf("rebased while a session was still open: %s", kinds(log))
	}
	release(t, w2)
	r2 := second.wait(t)
	if o, _ := parseOutcome(r2.stderr); r2.code != 0 || o != "rebased" {
		t.Fatalf("last session to end: want exit 0 and rebased, got %s", r2)
	}
	if got := inSession(t, mp, `cat one.txt two.txt parent.txt`); got != "one\ntwo\np\n" {
		t.Fatalf("after both sessions: %q", got)
	}
	e.waitIdle("child")
	if log := e.log("child"); rebasesAfter(log, forkGen) != 1 {
		t.Fatalf("want exactly one rebase for the window, log: %s", kinds(log))
	}
	e.unmount(mp)
}

func TestWindowIdleMountFollowsParent(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f.txt": "v1\n"})
	// One finished session so the mount has been used (and its window
	// closed) before the parent moves.
	if o, _ := e.execOK(mp, `cat f.txt >/dev/null`); o != "current" {
		t.Fatalf("exec outcome %q", o)
	}
	if st := e.statusOf("child"); st.Window != "idle" {
		t.Fatalf("after exec the window is %q, want idle", st.Window)
	}
	for i, v := range []string{"v2\n", "v3\n"} {
		// The previous reader's lease ends when the sweeper sees its session
		// gone; until then the window is active and would (rightly) pin
		// the old view for the next session too.
		e.waitIdle("child")
		e.advanceMain(map[string]string{"f.txt": v, "added.txt": v})
		// No session is open: the very next session sees the parent's head.
		got := inSession(t, mp, `cat f.txt added.txt`)
		if got != v+v {
			t.Fatalf("round %d: the idle mount shows %q, want the parent's %q twice\ndaemon log:\n%s", i, got, v, e.daemonLog())
		}
	}
	if st := e.statusOf("child"); st.Behind {
		t.Fatalf("child still behind its parent: %+v", st)
	}
	if n := countKind(e.log("child"), "rebase"); n != 2 {
		t.Fatalf("want one rebase per parent advance (2), got %d", n)
	}
	e.unmount(mp)
}

func TestWindowConflictAtFinalClose(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "base\n", "g": "untouched\n"})
	gate := e.fifo("gate")
	run := e.startExec(mp, `echo child > f; echo new > mine.txt; read x < "$G"; exit 7`, "G="+gate.path)
	w := gate.opened(30 * time.Second)
	e.advanceMain(map[string]string{"f": "parent\n"})
	release(t, w)
	r := run.wait(t)
	if r.code != 7 {
		t.Fatalf("exec must exit with CMD's status 7 even on conflict: %s", r)
	}
	o, paths := parseOutcome(r.stderr)
	if o != "conflicted" || !slices.Contains(paths, "f") {
		t.Fatalf("exec outcome %q paths %q, want conflicted listing f: %s", o, paths, r)
	}
	if got := inSession(t, mp, `cat f mine.txt g`); got != "child\nnew\nuntouched\n" {
		t.Fatalf("after a conflict the mount must keep the child's data, read %q", got)
	}
	st := e.statusOf("child")
	if !slices.ContainsFunc(st.Conflicts, func(c struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	}) bool {
		return c.Path == "f"
	}) {
		t.Fatalf("status --json lists conflicts %+v, want f", st.Conflicts)
	}
	if txt := e.run("status"); !strings.Contains(txt.stdout, "conflict child f") {
		t.Fatalf("status table does not list the conflict:\n%s", txt)
	}
	// Rebased once, onto the parent's head, with the conflict recorded:
	// the child's version stands at f until resolved.
	if log := e.log("child"); countKind(log, "rebase") != 1 {
		t.Fatalf("want one rebase at the final close: %s", kinds(log))
	}
	// The captured head has the child's work; the parent keeps its own.
	e.waitIdle("child")
	if r := e.run("land", "child"); r.code != 3 || e.head("main") == e.head("child") {
		t.Fatalf("land of a child with a recorded conflict: %s", r)
	}
	o, paths = e.unmount(mp)
	if o != "conflicted" && o != "current" {
		t.Fatalf("unmount outcome %q %q", o, paths)
	}
	out := e.exportTo("child", "out")
	if got := readFile(t, filepath.Join(out, "f")); got != "child\n" {
		t.Fatalf("exported child f = %q, want the child's version", got)
	}
	pm := e.exportTo("main", "pm")
	if got := readFile(t, filepath.Join(pm, "f")); got != "parent\n" {
		t.Fatalf("main f = %q", got)
	}
	e.fsck()
}

func TestWindowExplicitLease(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "1\n"})
	id := e.ok("lease", "begin", mp, "--owner", "agent1")
	if len(id) < 8 || strings.ContainsAny(id, " \t") {
		t.Fatalf("lease begin printed %q", id)
	}
	st := e.statusOf("child")
	if st.Window != "active" || len(st.Leases) != 1 || st.Leases[0].ID != id || !strings.Contains(st.Leases[0].Owner, "agent1") {
		t.Fatalf("status after lease begin: %+v", st)
	}
	e.advanceMain(map[string]string{"p": "p\n"})
	e.fails(2, "lease", "end", mp, "not-a-lease")
	e.fails(2, "lease", "end", mp, strings.Repeat("0", len(id)))
	e.fails(2, "lease", "begin", mp) // no --owner
	e.fails(2, "lease", "begin", filepath.Join(e.dir, "elsewhere"), "--owner", "x")
	r := e.run("lease", "end", mp, id)
	if r.code != 0 {
		t.Fatalf("lease end: %s", r)
	}
	if o, _ := parseOutcome(r.stdout); o != "rebased" {
		t.Fatalf("lease end outcome %q, want rebased (the parent advanced while it was open)", o)
	}
	if st := e.statusOf("child"); st.Window != "idle" || len(st.Leases) != 0 {
		t.Fatalf("after lease end: %+v", st)
	}
	e.fails(2, "lease", "end", mp, id) // already ended
	e.unmount(mp)
}

func TestWindowUnmountCapturesOwnSession(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "1\n"})
	before := e.head("child")
	// The test's own session: its lease lasts until unmount.
	if err := os.WriteFile(filepath.Join(mp, "direct.txt"), []byte("direct\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mp, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mp, "f"), filepath.Join(mp, "d", "moved")); err != nil {
		t.Fatal(err)
	}
	if st := e.statusOf("child"); len(st.Leases) != 1 {
		t.Fatalf("the test's session should hold one lease, status: %+v", st)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: %q, want current", o)
	}
	if slices.Contains(fuseMounts(), mp) {
		t.Fatal("still mounted after unmount")
	}
	log := e.log("child")
	if log[0].gen == before || log[0].kind != "capture" {
		t.Fatalf("unmount did not capture the session's writes: %s", kinds(log))
	}
	out := e.exportTo("child", "out")
	sameTree(t, "export after unmount", map[string]string{
		"direct.txt": `file x=false "direct\n"`, "d": "dir", "d/moved": `file x=false "1\n"`,
	}, treeList(t, out))
	e.fails(2, "unmount", mp) // no longer a mount
	e.fsck()
}

func TestWindowCommitWhileMountedIsBusy(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "1\n"})
	dir := filepath.Join(e.dir, "d")
	writeTree(t, dir, map[string]string{"x": "x"})
	head := e.head("child")
	r := e.fails(4, "commit", "child", dir)
	if !strings.Contains(r.stderr, "mount") {
		t.Errorf("busy error should say the workspace is mounted: %q", r.stderr)
	}
	if e.head("child") != head {
		t.Fatal("a refused commit moved the head")
	}
	e.unmount(mp)
	e.ok("commit", "child", dir)
}

func TestWindowIdleCloseEndsALingeringSession(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "data\n"}, "--idle-close", "300ms")
	gate := e.fifo("gate")
	out := filepath.Join(e.dir, "out")
	// A session that reads from the mount, then lingers outside it (cwd,
	// open files and requests all gone) until the test releases it.
	cmd := exec.Command("sh", "-c", `cat "$MP/f" > "$OUT"; read x < "$G"`)
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), "MP="+mp, "OUT="+out, "G="+gate.path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := gate.opened(30 * time.Second)
	if got := readFile(t, out); got != "data\n" {
		t.Fatalf("read %q through the mount", got)
	}
	before := e.head("child")
	e.advanceMain(map[string]string{"p": "p\n"})
	// Idle-close ends the lease although the session is alive; the final
	// close then rebases onto the advanced parent.
	e.waitIdle("child")
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		t.Fatalf("the lingering session ended early: %v", err)
	}
	if n := rebasesAfter(e.log("child"), before); n != 1 {
		t.Fatalf("want one rebase after idle-close, log: %s", kinds(e.log("child")))
	}
	release(t, w)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := inSession(t, mp, "cat p"); got != "p\n" {
		t.Fatalf("after idle-close a new session reads %q", got)
	}
	e.unmount(mp)
}

func TestWindowMountAndExecErrors(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "1\n"})
	other := filepath.Join(e.dir, "other")
	writeTree(t, e.dir, map[string]string{"other/": "", "file": "x"})
	e.fails(2, "mount", "nope", other)
	e.fails(2, "mount", "bad name", other)
	e.fails(2, "mount", "main", filepath.Join(e.dir, "file"))
	e.fails(2, "mount", "main", filepath.Join(e.dir, "missing"))
	e.fails(2, "mount", "main", other, "--lease-ttl", "1ms")
	e.fails(2, "mount", "main", other, "--lease-by", "foo")
	e.fails(4, "mount", "child", other) // already mounted elsewhere
	e.fails(4, "mount", "main", mp)     // mountpoint in use
	// Nested mounts of one store, and mounts over the store itself, are
	// refused before anything is mounted (the daemon would serve its own
	// store through its own mount, or lose track of the inner mount).
	inSession(t, mp, "mkdir sub")
	// That session's lease ends when the sweeper finds it gone; the execs
	// below must find the window idle to print "current".
	e.waitIdle("child")
	storeSub := filepath.Join(e.store, "x")
	if err := os.Mkdir(storeSub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ mp, want string }{
		{filepath.Join(mp, "sub"), "nested"},
		{e.store, "is the store"},
		{storeSub, "inside the store"},
	} {
		if r := e.fails(2, "mount", "main", c.mp); !strings.Contains(r.stderr, c.want) {
			t.Errorf("mount main %s: %s", c.mp, r)
		}
	}
	if st := e.statusOf("main"); st.State == "mounted" {
		t.Fatalf("a refused mount left main %s", st.State)
	}
	e.fails(4, "rm", "child")
	e.fails(2, "exec", other, "--", "true")
	// exec exits with CMD's status; a signal gives 128+N; a missing
	// command 127. The lease still ends and prints its outcome.
	missing := filepath.Join(e.dir, "no-such-file")
	for _, c := range []struct {
		argv []string
		code int
	}{{[]string{"sh", "-c", "exit 5"}, 5}, {[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15}, {[]string{missing}, 127}, {[]string{"no-such-command-anywhere"}, 127}, {[]string{"./f"}, 126}} {
		r, err := runCmd(e.command(nil, append([]string{"exec", mp, "--"}, c.argv...)...))
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := parseOutcome(r.stderr); r.code != c.code || o != "current" {
			t.Errorf("exec %q: want exit %d and outcome current, got %s", c.argv, c.code, r)
		}
	}
	// CMD runs in the mountpoint ($PWD too), with the caller's stdin and
	// without the gate's pipe (descriptor 3) left open.
	cmd := e.command(nil, "exec", mp, "--", "sh", "-c", `pwd -P; echo "$PWD"; read -r l; echo "$l"; if [ -e /proc/$$/fd/3 ]; then echo fd 3 open; fi`)
	cmd.Stdin = strings.NewReader("from stdin\n")
	r, err := runCmd(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if want := mp + "\n" + mp + "\nfrom stdin\n"; r.code != 0 || r.stdout != want {
		t.Errorf("exec in the mount: want stdout %q, got %s", want, r)
	}
	if st := e.statusOf("child"); st.Window != "idle" || len(st.Leases) != 0 {
		t.Fatalf("failed commands left the window %+v", st)
	}
	if slices.Contains(fuseMounts(), other) {
		t.Fatal("a refused mount mounted")
	}
	e.unmount(mp)
}

// After the last unmount the on-demand daemon exits; a command racing that
// exit must still work (run locally or by a new daemon), never fail with
// "daemon unreachable". Seen under load (parallel tests) as `export` or
// `shutdown` failing with exit 1 right after an unmount.
func TestDaemonExitAfterLastUnmountRace(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	e.ok("create", "w")
	mp := filepath.Join(e.dir, "mnt")
	os.Mkdir(mp, 0o755)
	for i := 0; i < 30; i++ {
		e.ok("mount", "w", mp)
		e.ok("unmount", mp)
		if r := e.run("log", "w"); r.code != 0 {
			t.Fatalf("round %d: log right after the last unmount: %s", i, r)
		}
	}
}

// TestMountRightAfterLastUnmount: a mount sent the moment the last unmount
// returns must end up served — not accepted by the daemon that is exiting
// and then torn down with it.
func TestMountRightAfterLastUnmount(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	e.ok("create", "w")
	mp := filepath.Join(e.dir, "mnt")
	os.Mkdir(mp, 0o755)
	e.ok("mount", "w", mp)
	for i := 0; i < 15; i++ {
		e.ok("unmount", mp)
		e.ok("mount", "w", mp)
		if r := e.run("exec", mp, "--", "true"); r.code != 0 {
			t.Fatalf("round %d: exec right after unmount+mount: %s", i, r)
		}
	}
	e.ok("unmount", mp)
}

// TestExecBackgroundKeepsLease: a command that leaves a process behind in
// its session (`cmd &`) does not end the session's lease when it exits:
// the window stays open (exec prints still-active) while that process
// still works in the mount, so nothing is captured or switched under it,
// and the sweeper ends the lease — one final close capturing both writes —
// once the process is gone.
func TestExecBackgroundKeepsLease(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base.txt": "base\n"})
	gate := e.fifo("gate")
	head := e.head("child")
	r := e.execSh(mp, `echo early > early.txt; (read x < "$G"; echo late > late.txt; cat early.txt > copy.txt) >/dev/null 2>&1 &`, "G="+gate.path)
	if o, _ := parseOutcome(r.stderr); r.code != 0 || o != "still-active" {
		t.Fatalf("exec whose command left a process behind: %s, want exit 0 and still-active", r)
	}
	w := gate.opened(30 * time.Second)
	if st := e.statusOf("child"); e.head("child") != head || st.Window != "active" || len(st.Leases) != 1 {
		t.Fatalf("after exec: head %s (was %s), window %s, leases %+v: want nothing captured and the session's lease open", e.head("child"), head, st.Window, st.Leases)
	}
	release(t, w)
	e.waitIdle("child")
	got := e.exportTo("child", "after")
	for name, want := range map[string]string{"early.txt": "early\n", "late.txt": "late\n", "copy.txt": "early\n"} {
		if b := readFile(t, filepath.Join(got, name)); b != want {
			t.Fatalf("%s: %q, want %q", name, b, want)
		}
	}
	if l := e.log("child"); len(l) < 2 || l[0].kind != "capture" || l[1].gen != head {
		t.Fatalf("log %s: want one capture on top of %s", kinds(l), head)
	}
}

// TestStatusNamesLeaseHolders: who holds a window is visible — a process
// whose working directory is in the mount and one with a file open there
// are listed under their leases by status (JSON and text).
func TestStatusNamesLeaseHolders(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"log": "1\n"})
	cwd := exec.Command("setsid", "sh", "-c", "cd "+mp+" && cat log >/dev/null && exec sleep 60")
	tail := exec.Command("setsid", "tail", "-f", filepath.Join(mp, "log"))
	for _, c := range []*exec.Cmd{cwd, tail} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	var sleepSeen, tailSeen bool
	waitFor(t, 20*time.Second, "status to name both holders", func() bool {
		sleepSeen, tailSeen = false, false
		for _, l := range e.statusOf("child").Leases {
			for _, p := range l.Processes {
				sleepSeen = sleepSeen || p.PID == cwd.Process.Pid && p.Command == "sleep" && p.CwdInside
				tailSeen = tailSeen || p.PID == tail.Process.Pid && p.Command == "tail" && p.OpenFiles >= 1 && !p.CwdInside
			}
		}
		return sleepSeen && tailSeen
	})
	txt := e.run("status", "child").stdout
	if !strings.Contains(txt, fmt.Sprintf("pid %d sleep (cwd inside)", cwd.Process.Pid)) || !strings.Contains(txt, fmt.Sprintf("pid %d tail (", tail.Process.Pid)) {
		t.Fatalf("status text does not name the holders:\n%s", txt)
	}
	for _, c := range []*exec.Cmd{cwd, tail} {
		c.Process.Kill()
		c.Wait()
	}
	e.waitIdle("child")
	e.unmount(mp)
}
