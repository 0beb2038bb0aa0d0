package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runLimit bounds each `acyclicfs run` of these tests.
const runLimit = 2 * time.Minute

// runAt is `acyclicfs run ARGS…` started in dir, in a session of its own
// (so that runLimited can end it), bounded.
func (e *env) runAt(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := e.command(nil, append([]string{"run"}, args...)...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	r, err := runLimited(cmd, runLimit)
	if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// startRun starts `acyclicfs run ARGS…` in dir, leading a session of its
// own as a terminal's foreground job does; wait returns its result, or
// fails the test if run does not return within runLimit.
func (e *env) startRun(t *testing.T, dir string, args ...string) (cmd *exec.Cmd, wait func() result) {
	t.Helper()
	cmd = e.command(nil, append([]string{"run"}, args...)...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	waitRun, err := startLimited(cmd, runLimit)
	if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	done := make(chan result, 1)
	go func() {
		r, err := waitRun()
		if err != nil {
			r.stderr += err.Error()
		}
		done <- r
	}()
	return cmd, func() result {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(runLimit + 10*time.Second):
			t.Fatalf("run %v did not return within %v", args, runLimit)
			return result{}
		}
	}
}

// runMounts are the mounts run left in this process's view (its private
// mountpoints are named acyclicfs-run-WS-…).
func runMounts() []string {
	var out []string
	for _, m := range fuseMounts() {
		if strings.Contains(filepath.Base(m), "acyclicfs-run-") {
			out = append(out, m)
		}
	}
	return out
}

// TestRunGivesTheCommandItsFork: `run --fork-of main -- CMD` forks main,
// and CMD sees the fork at the project's own path while the rest of the
// system sees the original; the summary names what changed and how to
// land it; the mount is gone afterwards; --land lands; a run inside a run
// is refused.
func TestRunGivesTheCommandItsFork(t *testing.T) {
	e := newMountEnv(t)
	proj := filepath.Join(e.dir, "proj")
	writeTree(t, proj, map[string]string{"a.txt": "alpha\n", "sub/s.txt": "s\n"})
	e.ok("create", "main", "--from", proj)

	// CMD runs in proj/sub: its working directory is the fork's sub.
	// While it runs, the original stays as it was for everyone else: CMD
	// reports the original's listing through a file outside proj, read
	// by a process that is not in its namespace (the test, afterwards).
	outside := filepath.Join(e.dir, "outside.txt")
	r := e.runAt(t, filepath.Join(proj, "sub"), "--fork-of", "main", "--at", proj, "--",
		"sh", "-c", `pwd; cat ../a.txt; echo beta > ../b.txt; echo changed > s.txt; echo "$ACYCLICFS_RUN"; ls .. > `+outside)
	if r.code != 0 {
		t.Fatalf("run: %s", r)
	}
	wantOut := filepath.Join(proj, "sub") + "\nalpha\nmain-run-1\n"
	if r.stdout != wantOut {
		t.Fatalf("CMD printed %q, want %q", r.stdout, wantOut)
	}
	if b, _ := os.ReadFile(outside); !strings.Contains(string(b), "b.txt") {
		t.Errorf("CMD did not see its own write in the fork at %s: ls gave %q", proj, b)
	}
	// The original directory never saw the fork's writes.
	if _, err := os.Stat(filepath.Join(proj, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("the fork's b.txt is in the original directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(proj, "sub", "s.txt")); string(b) != "s\n" {
		t.Fatalf("the original's sub/s.txt is %q", b)
	}
	for _, want := range []string{"workspace main-run-1", "changed: 2 path(s)", "b.txt", "sub/s.txt", "land it: acyclicfs land main-run-1"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stderr)
		}
	}
	if m := runMounts(); len(m) != 0 {
		t.Fatalf("run left mounts: %v", m)
	}
	if got := e.ok("cat", "main-run-1", "b.txt"); strings.TrimSpace(got) != "beta" {
		t.Fatalf("the fork's b.txt: %q", got)
	}
	if r := e.run("cat", "main", "b.txt"); r.code == 0 {
		t.Fatal("main has b.txt before any land")
	}

	// --land: the fork lands once CMD exits 0; a failing CMD's fork does not.
	r = e.runAt(t, proj, "--fork-of", "main", "--name", "lander", "--land", "--", "sh", "-c", "echo gamma > c.txt")
	if r.code != 0 || !strings.Contains(r.stderr, "landed lander") {
		t.Fatalf("run --land: %s", r)
	}
	if got := e.ok("cat", "main", "c.txt"); strings.TrimSpace(got) != "gamma" {
		t.Fatalf("main after run --land: c.txt %q", got)
	}
	r = e.runAt(t, proj, "--fork-of", "main", "--name", "failer", "--land", "--", "sh", "-c", "echo delta > d.txt; exit 5")
	if r.code != 5 || strings.Contains(r.stderr, "landed") || !strings.Contains(r.stderr, "land it: acyclicfs land failer") {
		t.Fatalf("run --land of a failing CMD: %s", r)
	}
	if r := e.run("cat", "main", "d.txt"); r.code == 0 {
		t.Fatal("a failing CMD's fork landed")
	}

	// CMD's hooks reach the mount through ACYCLICFS_RUN_MOUNT (the
	// private mountpoint): a lease around a tool call.
	r = e.runAt(t, proj, "--fork-of", "main", "--name", "leaser", "--", "sh", "-c",
		`l=$("$0" --store "$1" lease begin "$ACYCLICFS_RUN_MOUNT" --owner call-1) && "$0" --store "$1" lease end "$ACYCLICFS_RUN_MOUNT" "$l"`, bin, e.store)
	if r.code != 0 {
		t.Fatalf("lease begin/end at $ACYCLICFS_RUN_MOUNT inside run: %s", r)
	}

	// A run inside a run is refused, clearly, and changes nothing.
	r = e.runAt(t, proj, "--fork-of", "main", "--name", "outer", "--", bin, "--store", e.store, "run", "--fork-of", "main", "--", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "run inside a run") {
		t.Fatalf("run inside run: %s", r)
	}
	if r := e.run("cat", "main-run-2", "a.txt"); r.code == 0 {
		t.Fatal("the refused inner run made a fork")
	}

	// Bad uses: no command, both a workspace and --fork-of, an unknown parent.
	for _, args := range [][]string{{"--fork-of", "main"}, {"main", "--fork-of", "main", "--", "true"}, {"--fork-of", "nope", "--", "true"}, {"--fork-of", "main", "--land", "--keep", "--", "true"}} {
		if r := e.runAt(t, proj, args...); r.code != 2 || !strings.HasPrefix(r.stderr, "acyclicfs: ") {
			t.Errorf("run %v: want exit 2 with a message, got %s", args, r)
		}
	}
	if m := runMounts(); len(m) != 0 {
		t.Fatalf("run left mounts: %v", m)
	}
	e.fsck()
}

// TestRunKilledCommandLosesNothing: CMD killed with SIGKILL: run exits
// 137 after unmounting; what CMD wrote is in the fork, no mount or lease
// is left.
func TestRunKilledCommandLosesNothing(t *testing.T) {
	e := newMountEnv(t)
	proj := filepath.Join(e.dir, "proj")
	writeTree(t, proj, map[string]string{"a.txt": "alpha\n"})
	e.ok("create", "main", "--from", proj)
	pidFile := filepath.Join(e.dir, "cmd.pid")
	ready := e.fifo("ready")
	_, wait := e.startRun(t, proj, "--fork-of", "main", "--name", "victim", "--", "sh", "-c",
		"echo kept > k.txt && sync k.txt && echo $$ > "+pidFile+" && read x < "+ready.path)
	// The command blocks reading the fifo once it wrote and synced k.txt.
	f := ready.opened(runLimit)
	defer f.Close()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := wait()
	if r.code != 128+int(syscall.SIGKILL) {
		t.Fatalf("run of a killed command: %s", r)
	}
	if m := runMounts(); len(m) != 0 {
		t.Fatalf("run left mounts: %v", m)
	}
	if got := e.ok("cat", "victim", "k.txt"); strings.TrimSpace(got) != "kept" {
		t.Fatalf("what the killed command wrote: %q", got)
	}
	if st := e.statusOf("victim"); len(st.Leases) != 0 || st.State == "mounted" {
		t.Fatalf("victim after run: %+v", st)
	}
}

// TestRunAsNonRoot: an unprivileged user's `run --fork-of main -- CMD`
// (its mount through fusermount3, CMD in a user namespace): CMD sees the
// fork at the project's own path (reads main's file, writes one there),
// the original directory is untouched, the summary is printed, and no
// mount is left; CMD holds no capability.
func TestRunAsNonRoot(t *testing.T) {
	nr := newNonRoot(t)
	proj := filepath.Join(nr.root, "src")
	nr.must(t, "create", "main", "--from", proj)
	r := nr.run(t, proj, "run", "--fork-of", "main", "--", "sh", "-c", `pwd; cat a; echo fork > b; id -u; ls; grep -E '^Cap(Eff|Amb)' /proc/self/status`)
	if r.code != 0 {
		t.Fatalf("run as %s: %s", nonRootUser, r)
	}
	// CMD keeps its user id and holds no capability (not even the
	// namespace's own, which run's child used for its mounts).
	want := fmt.Sprintf("%s\nhi\n%d\na\nb\nCapEff:\t0000000000000000\nCapAmb:\t0000000000000000\n", proj, nr.uid)
	if r.stdout != want {
		t.Fatalf("CMD printed %q, want %q (stderr %s)", r.stdout, want, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(proj, "b")); !os.IsNotExist(err) {
		t.Fatalf("the fork's b is in the original directory: %v", err)
	}
	for _, want := range []string{"workspace main-run-1", "changed: 1 path(s)", "land it: acyclicfs land main-run-1"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stderr)
		}
	}
	if m := runMounts(); len(m) != 0 {
		t.Fatalf("run left mounts: %v", m)
	}
	if got := nr.must(t, "cat", "main-run-1", "b"); got != "fork\n" {
		t.Fatalf("the fork's b: %q", got)
	}
	nr.must(t, "fsck")
}

// TestRunCtrlCReachesTheCommand: a terminal's Ctrl-C (SIGINT to the
// foreground process group, run and CMD alike) is CMD's: CMD handles it,
// and run still captures, prints its summary and unmounts, exiting with
// CMD's status.
func TestRunCtrlCReachesTheCommand(t *testing.T) {
	e := newMountEnv(t)
	proj := filepath.Join(e.dir, "proj")
	writeTree(t, proj, map[string]string{"a.txt": "alpha\n"})
	e.ok("create", "main", "--from", proj)
	ready := e.fifo("ready")
	cmd, wait := e.startRun(t, proj, "--fork-of", "main", "--name", "agent", "--", "sh", "-c",
		`trap 'echo interrupted > i.txt; exit 0' INT; echo kept > k.txt; read x < `+ready.path+`; while :; do sleep 0.05; done`)
	f := ready.opened(runLimit)
	f.Close()
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	r := wait()
	if r.code != 0 || strings.Contains(r.stderr, "interrupted") || !strings.Contains(r.stderr, "changed: 2 path(s)") {
		t.Fatalf("run after Ctrl-C: %s", r)
	}
	if m := runMounts(); len(m) != 0 {
		t.Fatalf("run left mounts: %v", m)
	}
	if got := e.ok("cat", "agent", "i.txt"); strings.TrimSpace(got) != "interrupted" {
		t.Fatalf("what CMD wrote on Ctrl-C: %q", got)
	}
}
