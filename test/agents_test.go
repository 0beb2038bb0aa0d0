package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Coding agents' harnesses (docs/windows.md "Harnesses"): one long-lived
// process with its working directory in the project that reads and edits
// files itself and runs a tool process per turn. Each harness here is a
// real interpreter driven through its stdin, one line per turn:
// "turn N CMD" makes it read f itself, rewrite notes itself ("turn N"),
// run CMD through the shell (child_process / subprocess) and print
// {"own": f as it read it, "tool": CMD's output} as one JSON line.

const nodeHarness = `
const fs = require('fs'), cp = require('child_process'), readline = require('readline');
const rl = readline.createInterface({input: process.stdin});
rl.on('line', (line) => {
  const m = /^turn (\S+) (.*)$/.exec(line);
  if (!m) return;
  const own = fs.readFileSync('f', 'utf8');
  fs.writeFileSync('notes', 'turn ' + m[1] + '\n');
  const tool = cp.execSync(m[2], {encoding: 'utf8'});
  console.log(JSON.stringify({own: own, tool: tool}));
});
rl.on('close', () => process.exit(0));
`

const pythonHarness = `
import json, subprocess, sys
held = open("f")  # kept open for the harness's whole life
while True:
    line = sys.stdin.readline()
    if not line:
        break
    _, n, cmd = line.rstrip("\n").split(" ", 2)
    with open("f") as fh:
        own = fh.read()
    with open("notes", "w") as fh:
        fh.write("turn %s\n" % n)
    tool = subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout
    held.seek(0)
    print(json.dumps({"own": own, "tool": tool, "held": held.read()}), flush=True)
`

// harness is a running harness process.
type harness struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out chan string // its output lines
}

// startHarness runs interp with script (written outside the mount), its
// working directory the mountpoint, in a session of its own.
func startHarness(t *testing.T, e *env, mp, interp, script string) *harness {
	t.Helper()
	needTool(t, interp)
	p := filepath.Join(e.dir, "harness-"+interp)
	if err := os.WriteFile(p, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `cd "$0" && exec "$1" "$2"`, mp, interp, p)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, cmd: cmd, in: in, out: make(chan string, 16)}
	go func() {
		defer close(h.out)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			h.out <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		in.Close() // EOF: the harness exits
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	return h
}

// turnResult is what a harness printed for one turn.
type turnResult struct {
	Own  string `json:"own"`
	Tool string `json:"tool"`
	// Held: what the python harness reads through a descriptor of f it
	// opened at its start (a view switch under it must not break it).
	Held *string `json:"held"`
}

// send starts turn n running cmd as its tool.
func (h *harness) send(n int, cmd string) {
	h.t.Helper()
	if _, err := fmt.Fprintf(h.in, "turn %d %s\n", n, cmd); err != nil {
		h.t.Fatal(err)
	}
}

// result waits (bounded) for the current turn's output.
func (h *harness) result() turnResult {
	h.t.Helper()
	select {
	case l, ok := <-h.out:
		if !ok {
			h.t.Fatalf("the harness exited before it answered its turn")
		}
		var r turnResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			h.t.Fatalf("harness printed %q: %v", l, err)
		}
		return r
	case <-time.After(sessionLimit):
		h.t.Fatalf("no answer from the harness within %v", sessionLimit)
		return turnResult{}
	}
}

func (h *harness) turn(n int, cmd string) turnResult {
	h.t.Helper()
	h.send(n, cmd)
	return h.result()
}

// landSibling changes f in sib and lands sib into main (rebasing it first
// if main moved), as a sibling agent's finished task does.
func (e *env) landSibling(content string) {
	e.t.Helper()
	dir, err := os.MkdirTemp(e.dir, "sib-")
	if err != nil {
		e.t.Fatal(err)
	}
	e.ok("rebase", "sib")
	e.ok("export", "sib", dir, "--force")
	writeTree(e.t, dir, map[string]string{"f": content})
	e.ok("commit", "sib", dir)
	e.ok("land", "sib")
}

func TestHarnessNode(t *testing.T) {
	t.Parallel()
	testDeclaredHarness(t, "node", nodeHarness)
}

func TestHarnessPython(t *testing.T) {
	t.Parallel()
	testDeclaredHarness(t, "python3", pythonHarness)
}

// testDeclaredHarness: a harness declared with `lease harness` holds no
// lease of its own. Between turns the mount follows a sibling's landing
// at once and its workspace lands (exit 0) with the harness's own edits;
// a tool call that spans a sibling's landing sees its starting view
// throughout, and the next turn the new one.
func testDeclaredHarness(t *testing.T, interp, script string) {
	e, mp := forkMounted(t, map[string]string{"f": "v1\n"})
	e.ok("fork", "main", "sib")
	h := startHarness(t, e, mp, interp, script)
	if got := e.ok("lease", "harness", strconv.Itoa(h.cmd.Process.Pid), "--mount", mp); got != mp {
		t.Fatalf("lease harness printed %q, want %s", got, mp)
	}
	if r := h.turn(1, "cat f"); r.Own != "v1\n" || r.Tool != "v1\n" {
		t.Fatalf("turn 1: %+v", r)
	}
	// Between turns nothing is held: the harness is alive, its working
	// directory in the mount.
	e.waitIdle("child")

	// A sibling lands between two turns: the child follows at once.
	e.landSibling("v2\n")
	waitFor(t, 10*time.Second, "the child to follow main", func() bool {
		st := e.statusOf("child")
		return st.Window == "idle" && st.PendingParent == "" && !st.Behind
	})
	if r := h.turn(2, "cat f"); r.Own != "v2\n" || r.Tool != "v2\n" {
		t.Fatalf("turn 2 after a sibling landed: %+v, want v2 for the harness and its tool\ndaemon log:\n%s", r, e.daemonLog())
	}
	// And the harness's workspace lands between turns, its own edit in.
	e.waitIdle("child")
	e.ok("land", "child")
	if got := readFile(t, filepath.Join(e.exportTo("main", "main-after-land"), "notes")); got != "turn 2\n" {
		t.Fatalf("main's notes after the child landed: %q, want the harness's own edit", got)
	}

	// A tool call running while a sibling lands sees its starting view
	// throughout; the harness's next turn sees the new one.
	gate := e.fifo("gate")
	h.send(3, `cat f; read x < "`+gate.path+`"; cat f`)
	w := gate.opened(sessionLimit)
	if st := e.statusOf("child"); len(st.Leases) != 1 || !strings.HasPrefix(st.Leases[0].Owner, "harness-child:") {
		t.Fatalf("a running tool call: leases %+v, want its tree's one", st.Leases)
	}
	e.landSibling("v3\n")
	if st := e.statusOf("child"); st.PendingParent == "" {
		t.Fatalf("the landing did not wait for the tool call: %+v", st)
	}
	release(t, w)
	if r := h.result(); r.Own != "v2\n" || r.Tool != "v2\nv2\n" {
		t.Fatalf("turn 3 (a sibling landed mid-tool): %+v, want v2 throughout", r)
	}
	e.waitIdle("child")
	r := h.turn(4, "cat f")
	if r.Own != "v3\n" || r.Tool != "v3\n" {
		t.Fatalf("turn 4: %+v, want v3", r)
	}
	if r.Held != nil && *r.Held != "v1\n" && *r.Held != "v2\n" && *r.Held != "v3\n" {
		t.Fatalf("through the descriptor it kept open the harness reads %q, not a version of f", *r.Held)
	} else if r.Held != nil {
		t.Logf("the descriptor opened at the start reads %q after three view switches", *r.Held)
	}
	e.waitIdle("child")
	e.ok("land", "child")
	h.in.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	e.unmount(mp)
}

// TestHarnessUndeclaredLetsGoBetweenTurns: the same node harness started
// by hand in the mount, not declared: its session waits for input (stdin)
// between turns with only its working directory in the mount, so once
// --idle-close (default 1 s) passed it holds no lease and its workspace
// lands.
func TestHarnessUndeclaredLetsGoBetweenTurns(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "v1\n"})
	e.ok("fork", "main", "sib")
	h := startHarness(t, e, mp, "node", nodeHarness)
	if r := h.turn(1, "cat f"); r.Own != "v1\n" || r.Tool != "v1\n" {
		t.Fatalf("turn 1: %+v", r)
	}
	e.waitIdle("child")
	e.landSibling("v2\n")
	waitFor(t, 10*time.Second, "the child to follow main", func() bool {
		st := e.statusOf("child")
		return st.Window == "idle" && st.PendingParent == "" && !st.Behind
	})
	if r := h.turn(2, "cat f"); r.Own != "v2\n" || r.Tool != "v2\n" {
		t.Fatalf("turn 2: %+v, want v2", r)
	}
	e.waitIdle("child")
	e.ok("land", "child")
	h.in.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	e.unmount(mp)
}

// TestIdleSessionOutsideMountLetsGo: a session that listed the mount and
// then left it (cwd elsewhere, nothing open) while it goes on sleeping
// holds no lease after --idle-close: land succeeds.
func TestIdleSessionOutsideMountLetsGo(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "v1\n"})
	e.ok("fork", "main", "sib")
	g := e.fifo("listed")
	// (ls alone may be answered from the kernel's caches; cat's open is not.)
	cmd := exec.Command("setsid", "bash", "-c", `{ ls "$0"; cat "$0/f"; } > "$1"; cd /; sleep 30`, mp, g.path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	if r := g.reader(sessionLimit); r != "f\nv1\n" {
		t.Fatalf("ls and cat in the mount printed %q", r)
	}
	e.waitIdle("child")
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		t.Fatalf("the session ended early: %v", err)
	}
	// The session did hold a lease (it is in the session log).
	if log := e.sessions("child"); len(log) != 1 || log[0].Owner != "sid:"+strconv.Itoa(cmd.Process.Pid) {
		t.Fatalf("session log %+v, want one lease of sid:%d", log, cmd.Process.Pid)
	}
	e.landSibling("v2\n")
	e.ok("land", "child")
}

// reader reads the pipe to its end (a writer opened and closed it),
// bounded by limit.
func (f *fifo) reader(limit time.Duration) string {
	f.t.Helper()
	type res struct {
		b   []byte
		err error
	}
	c := make(chan res, 1)
	go func() {
		r, err := os.Open(f.path)
		if err != nil {
			c <- res{nil, err}
			return
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		c <- res{b, err}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			f.t.Fatal(r.err)
		}
		return string(r.b)
	case <-time.After(limit):
		if w, err := os.OpenFile(f.path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		f.t.Fatalf("nobody wrote %s within %v", f.path, limit)
		return ""
	}
}

// TestLeaseHarnessErrors: lease harness refuses what cannot be a harness
// (exit 2) and, without --mount, applies to every mount of the daemon.
func TestLeaseHarnessErrors(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"f": "v1\n"})
	for _, args := range [][]string{
		{"lease", "harness", "x"},
		{"lease", "harness", "1"},
		{"lease", "harness", "0"},
		{"lease", "harness", strconv.Itoa(e.daemonPID())},
		{"lease", "harness", "2147483646"}, // no such process
		{"lease", "harness", strconv.Itoa(os.Getpid()), "--mount", filepath.Join(e.dir, "nowhere")},
	} {
		if r := e.run(args...); r.code != 2 || !strings.HasPrefix(r.stderr, "acyclicfs: lease harness") {
			t.Errorf("%s: %s, want exit 2 naming the command", strings.Join(args, " "), r)
		}
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	if got := e.ok("lease", "harness", strconv.Itoa(sleeper.Process.Pid)); got != mp {
		t.Fatalf("lease harness without --mount printed %q, want %s", got, mp)
	}
	e.unmount(mp)
}
