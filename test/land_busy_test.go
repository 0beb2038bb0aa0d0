package test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// "No spurious busy": land and rebase right after a tool session ended
// succeed on the first try (the daemon sweeps at once and waits for the
// session's final close), and a session that really still runs is
// refused at once with exit 4 and a message naming its processes.

// busyLimit bounds how long a refused land or rebase may take: it sweeps
// the proc tree and finds live processes, which takes milliseconds; the
// bound only keeps a loaded CI machine from failing the test.
const busyLimit = 5 * time.Second

// setsidWrite is `setsid -w sh -c 'cd MP && echo V > NAME'`: a tool
// session that chdirs into the mount itself, writes a file and ends.
func setsidWrite(t *testing.T, mp, name, v string) {
	t.Helper()
	cmd := exec.Command("setsid", "-w", "sh", "-c", `cd "$MP" && echo "$V" > "$N"`)
	cmd.Env = append(os.Environ(), "MP="+mp, "V="+v, "N="+name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("setsid -w sh -c 'cd %s && echo %s > %s': %v: %s", mp, v, name, err, out)
	}
}

func TestLandRightAfterSessionEnds(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base": "base\n"})
	const n = 100
	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		setsidWrite(t, mp, name, strconv.Itoa(i))
		if r := e.run("land", "child"); r.code != 0 {
			t.Fatalf("iteration %d: land right after the session that wrote %s ended: %s", i, name, r)
		}
	}
	t.Logf("%d × (session writes a file, land): %v", n, time.Since(start))
	got := e.exportTo("main", "main-out")
	for i := range n {
		if b := readFile(t, filepath.Join(got, fmt.Sprintf("f%03d", i))); b != strconv.Itoa(i)+"\n" {
			t.Fatalf("main's f%03d = %q after the lands", i, b)
		}
	}
	e.unmount(mp)
}

func TestRebaseRightAfterSessionEnds(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base": "base\n"})
	for i := range 20 {
		setsidWrite(t, mp, fmt.Sprintf("r%02d", i), strconv.Itoa(i))
		if r := e.run("rebase", "child"); r.code != 0 {
			t.Fatalf("iteration %d: rebase right after a session ended: %s", i, r)
		}
	}
	if b := readFile(t, filepath.Join(e.exportTo("child", "child-out"), "r19")); b != "19\n" {
		t.Fatalf("child's r19 = %q: the session's write was not captured before the rebase", b)
	}
	e.unmount(mp)
}

// runningSession starts script in a new session (its pid is the session
// id) with MP and G (a fifo) in its environment, and returns once the
// script has written a line to G — its signal that it holds its lease —
// and that line.
func (e *env) runningSession(mp, script string) (*exec.Cmd, string) {
	e.t.Helper()
	g := filepath.Join(e.dir, "ready")
	if err := syscall.Mkfifo(g, 0o600); err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "MP="+mp, "G="+g)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	type res struct {
		line string
		err  error
	}
	c := make(chan res, 1)
	go func() {
		f, err := os.Open(g) // blocks until the script opens it to write
		if err != nil {
			c <- res{"", err}
			return
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		c <- res{strings.TrimSpace(string(b)), err}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			e.t.Fatal(r.err)
		}
		return cmd, r.line
	case <-time.After(sessionLimit):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		e.t.Fatalf("the session never signalled that it runs in %s", mp)
		return nil, ""
	}
}

// refusedFast runs args, which must exit 4 within busyLimit, and returns
// the result.
func (e *env) refusedFast(args ...string) result {
	e.t.Helper()
	start := time.Now()
	r := e.fails(4, args...)
	took := time.Since(start)
	if took > busyLimit {
		e.t.Fatalf("%s took %v to refuse, want under %v", strings.Join(args, " "), took, busyLimit)
	}
	e.t.Logf("%s refused in %v", strings.Join(args, " "), took)
	if !strings.Contains(r.stderr, "\nhint: ") {
		e.t.Errorf("%s: no hint line: %q", strings.Join(args, " "), r.stderr)
	}
	return r
}

func TestLandRefusesARunningSession(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base": "base\n"})
	// A shell with its working directory in the mount and a sleep it
	// waits for: two processes of one session.
	cmd, sleepPID := e.runningSession(mp, `cd "$MP" && echo x > f || exit 1; sleep 30 & echo $! > "$G"; wait`)
	sid := cmd.Process.Pid
	head, mainHead := e.head("child"), e.head("main")
	r := e.refusedFast("land", "child")
	want := fmt.Sprintf("acyclicfs: land child: busy: child has open leases: sid:%d (pid %d sh: cwd inside, pid %s sleep: cwd inside)\n", sid, sid, sleepPID)
	if !strings.HasPrefix(r.stderr, want) {
		t.Fatalf("land with a running session said %q, want it to start %q", r.stderr, want)
	}
	if e.head("child") != head || e.head("main") != mainHead {
		t.Fatal("a refused land moved a head")
	}
	// End the session: kill its sleep; the shell's wait returns and it
	// exits; Wait reaps it. The next land must not need a retry.
	pid, err := strconv.Atoi(sleepPID)
	if err != nil {
		t.Fatalf("the session sent %q, not a pid", sleepPID)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	e.ok("land", "child")
	if b := readFile(t, filepath.Join(e.exportTo("main", "main-out"), "f")); b != "x\n" {
		t.Fatalf("main's f = %q after the land", b)
	}
	e.unmount(mp)
}

func TestRebaseRefusesARunningSessionAndAnExplicitLease(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base": "base\n"})
	// One process holding a file of the mount open, its cwd elsewhere.
	cmd, _ := e.runningSession(mp, `exec 3< "$MP/base"; cd /; echo ready > "$G"; exec sleep 30`)
	sid := cmd.Process.Pid
	lease := e.ok("lease", "begin", mp, "--owner", "agent-7")
	r := e.refusedFast("rebase", "child")
	want := fmt.Sprintf("acyclicfs: rebase child: busy: child has open leases: explicit:agent-7 (lease %s); sid:%d (pid %d sleep: 1 open)\n", lease, sid, sid)
	if !strings.HasPrefix(r.stderr, want) {
		t.Fatalf("rebase said %q, want it to start %q", r.stderr, want)
	}
	if err := syscall.Kill(sid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	r = e.refusedFast("rebase", "child")
	if strings.Contains(r.stderr, "sid:") || !strings.Contains(r.stderr, "explicit:agent-7") {
		t.Fatalf("after the session was killed, rebase said %q: want only the explicit lease named", r.stderr)
	}
	e.ok("lease", "end", mp, lease)
	e.ok("rebase", "child")
	e.unmount(mp)
}

func TestLandRefusesARunningExec(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base": "base\n"})
	gate := e.fifo("gate")
	b := e.startExec(mp, `echo x > f; read x < "$G"`, "G="+gate.path)
	w := gate.opened(30 * time.Second)
	r := e.refusedFast("land", "child")
	if !regexp.MustCompile(`: busy: child has open leases: sid:[0-9]+ \(exec, pid [0-9]+ sh: cwd inside\)\n`).MatchString(r.stderr) {
		t.Fatalf("land during exec said %q, want the exec's session named", r.stderr)
	}
	release(t, w)
	if res := b.wait(t); res.code != 0 {
		t.Fatalf("exec: %s", res)
	}
	e.ok("land", "child")
	e.unmount(mp)
}
