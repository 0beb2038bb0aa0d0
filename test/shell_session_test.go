package test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// agentShell is a long-lived bash reading its commands from a FIFO, its
// working directory in a mount, in its own session: how agent harnesses
// keep one shell per agent.
type agentShell struct {
	t   *testing.T
	cmd *exec.Cmd
	in  *os.File // the FIFO's write end: each command is a line
	out *bufio.Reader
}

func startAgentShell(t *testing.T, e *env, mp string) *agentShell {
	t.Helper()
	fifo := filepath.Join(e.dir, "shell-in")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `exec bash --noprofile --norc < "$0" 2>&1`, fifo)
	cmd.Dir = mp
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once bash has it open
	if err != nil {
		t.Fatal(err)
	}
	s := &agentShell{t: t, cmd: cmd, in: in, out: bufio.NewReader(r)}
	t.Cleanup(func() {
		in.Close() // EOF: bash exits
		if cmd.ProcessState != nil {
			return
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return s
}

// send writes one command line.
func (s *agentShell) send(line string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatal(err)
	}
}

// run sends a command and returns its output up to a marker line.
func (s *agentShell) run(line string) string {
	s.t.Helper()
	s.send(line + "; echo @@done")
	return s.until("@@done")
}

// until reads output lines up to marker (bounded by sessionLimit).
func (s *agentShell) until(marker string) string {
	s.t.Helper()
	type res struct {
		out string
		err error
	}
	c := make(chan res, 1)
	go func() {
		var b strings.Builder
		for {
			l, err := s.out.ReadString('\n')
			if err != nil {
				c <- res{b.String(), err}
				return
			}
			if strings.TrimSpace(l) == marker {
				c <- res{b.String(), nil}
				return
			}
			b.WriteString(l)
		}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			s.t.Fatalf("shell output ended before %s: %v (%q)", marker, r.err, r.out)
		}
		return r.out
	case <-time.After(sessionLimit):
		s.t.Fatalf("no %s from the shell within %v", marker, sessionLimit)
		return ""
	}
}

// TestPersistentShellHoldsNoLeaseWhileWaiting: a shell waiting for its
// next command holds no lease, so the parent's landing reaches the
// workspace while it waits and the workspace lands; each command it runs
// holds one for its duration, pinned while it runs.
func TestPersistentShellHoldsNoLeaseWhileWaiting(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "v1\n"})
	sh := startAgentShell(t, e, mp)
	if got := sh.run("echo one > a; cat f"); got != "v1\n" {
		t.Fatalf("first command: %q", got)
	}
	// At its prompt the shell holds nothing: the window goes idle with the
	// shell alive (its working directory is in the mount).
	e.waitIdle("child")
	if err := syscall.Kill(sh.cmd.Process.Pid, 0); err != nil {
		t.Fatalf("the shell is gone: %v", err)
	}
	if got := readFile(t, filepath.Join(e.exportTo("child", "export-1"), "a")); got != "one\n" {
		t.Fatalf("the command's write was not captured when the shell went idle: %q", got)
	}

	// The parent moves while the shell waits: the next command sees it.
	e.advanceMain(map[string]string{"b": "from the parent\n"})
	if got := sh.run("cat b"); got != "from the parent\n" {
		t.Fatalf("the next command sees %q, want the parent's b\ndaemon log:\n%s", got, e.daemonLog())
	}
	// And the workspace lands while the shell waits.
	e.waitIdle("child")
	e.ok("land", "child")
	if got := readFile(t, filepath.Join(e.exportTo("main", "export-2"), "a")); got != "one\n" {
		t.Fatalf("main after land: a = %q", got)
	}

	// A command that runs while the parent advances keeps its view from
	// start to end: it holds a lease for its whole duration.
	gate := e.fifo("gate")
	// (It holds f open while it waits, as a tool at work holds its files:
	// one that only waited for input would let its lease go after
	// --idle-close, docs/windows.md "Idle sessions".)
	sh.send(`cat f; cat "` + gate.path + `" >/dev/null 3<f; cat c 2>/dev/null || echo no-c; echo @@done`)
	w := gate.opened(sessionLimit) // the command is at its wait point, mid-command
	if st := e.statusOf("child"); len(st.Leases) == 0 {
		t.Fatalf("a running command holds no lease: %+v", st)
	}
	e.advanceMain(map[string]string{"c": "new\n"})
	release(t, w)
	if got := sh.until("@@done"); got != "v1\nno-c\n" {
		t.Fatalf("the command saw %q; want the view it started with throughout", got)
	}
	// Back at its prompt the shell's lease ends (the sweep sees it waiting),
	// and the final close takes the parent's advance.
	e.waitIdle("child")
	if got := sh.run("cat c"); got != "new\n" {
		t.Fatalf("after the command the shell sees %q", got)
	}
	e.waitIdle("child")
	sh.in.Close() // EOF: the shell exits
	if err := sh.cmd.Wait(); err != nil {
		t.Fatalf("shell: %v", err)
	}
	e.unmount(mp)
}
