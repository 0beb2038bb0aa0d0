package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/fusectl"
)

// Helpers shared by the mount_* end-to-end tests: mounting, running tools
// inside a mount as `acyclicfs exec` leases or as fresh process sessions,
// reading `status --json` and `log`, and comparing trees.

func init() {
	// A -race binary's runtime sleeps atexit_sleep_ms (1s by default) before
	// every exit; these tests run the binary hundreds of times. Races are
	// still reported (exit 66, and daemonRaces checks the daemon's log).
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
}

// newMountEnv is newEnv plus a check, after the daemon has been shut down,
// that the daemon's log reports no data race (a -race daemon writes its
// reports there, where no exit code carries them).
func newMountEnv(t *testing.T) *env {
	t.Helper()
	var e *env
	t.Cleanup(func() { // runs after newEnv's cleanup (shutdown)
		if e == nil {
			return
		}
		b, _ := os.ReadFile(filepath.Join(e.store, "daemon.log"))
		if i := bytes.Index(b, []byte("WARNING: DATA RACE")); i >= 0 {
			end := min(len(b), i+6000)
			t.Errorf("the daemon reported a data race:\n%s", b[i:end])
		}
	})
	e = newEnv(t)
	return e
}

// outcomes are the reconcile outcomes printed by unmount, exec, lease end.
var outcomes = map[string]bool{"current": true, "rebased": true, "conflicted": true, "still-active": true}

// transportEnv, when set, makes mountAt mount with --transport and its
// value: `make test` runs the tool and window tests once more with
// dev-fuse (make race-devfuse), the main pass leaving the default, auto,
// to take io_uring.
const transportEnv = "ACYCLICFS_TEST_TRANSPORT"

// mountAt mounts workspace name at a fresh directory under e.dir and
// returns the mountpoint.
func (e *env) mountAt(name string, flags ...string) string {
	e.t.Helper()
	return e.mountAtPath(name, filepath.Join(e.dir, "mnt-"+name), flags...)
}

// mountAtPath mounts name at mp (made if absent).
func (e *env) mountAtPath(name, mp string, flags ...string) string {
	e.t.Helper()
	if err := os.MkdirAll(mp, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if t := os.Getenv(transportEnv); t != "" {
		flags = append(flags, "--transport", t)
	}
	if got := e.ok(append([]string{"mount", name, mp}, flags...)...); got != mp {
		e.t.Fatalf("mount printed %q, want %q", got, mp)
	}
	return mp
}

// unmount unmounts mp and returns the outcome line and the listed paths.
// After the env's last mount it waits for the on-demand daemon to exit:
// a command sent while it is exiting fails (see TestDaemonExitAfterLastUnmountRace).
func (e *env) unmount(mp string) (string, []string) {
	e.t.Helper()
	pid := e.daemonPID()
	r := e.run("unmount", mp)
	if r.code != 0 && r.code != 3 {
		e.t.Fatalf("unmount %s: %s", mp, r)
	}
	if !slices.ContainsFunc(fuseMounts(), func(m string) bool { return strings.HasPrefix(m, e.dir+"/") }) {
		if err := waitGone(pid, 10*time.Second); err != nil {
			e.t.Fatalf("the daemon did not exit after the last unmount: %v", err)
		}
	}
	o, paths := parseOutcome(r.stdout)
	if o == "" {
		e.t.Fatalf("unmount printed no outcome: %s", r)
	}
	return o, paths
}

// parseOutcome finds the last outcome line in out and the paths after it.
func parseOutcome(out string) (string, []string) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if outcomes[strings.TrimSpace(lines[i])] {
			return strings.TrimSpace(lines[i]), lines[i+1:]
		}
	}
	return "", nil
}

// command builds an acyclicfs invocation against e's store.
func (e *env) command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"--store", e.store}, args...)...)
	cmd.Env = append(append(append(os.Environ(), "ACYCLICFS_STORE="), e.extraEnv...), env...)
	return cmd
}

// runCmd runs cmd and collects its result; safe from any goroutine.
func runCmd(cmd *exec.Cmd) (result, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			return result{}, err
		}
		code = ee.ExitCode()
	}
	return result{out.String(), errb.String(), code}, nil
}

// execCommand is `acyclicfs exec mp -- sh -c script`, itself in a new
// session so that runLimited can kill it; exec puts CMD in a session of
// its own, which the daemon's lease end or the mount's teardown ends.
func (e *env) execCommand(mp, script string, env ...string) *exec.Cmd {
	cmd := e.command(env, "exec", mp, "--", "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

// execSh runs `acyclicfs exec mp -- sh -c script` with extra environment.
func (e *env) execSh(mp, script string, env ...string) result {
	e.t.Helper()
	r, err := runLimited(e.execCommand(mp, script, env...), 2*sessionLimit)
	if err != nil {
		e.t.Fatalf("exec %s: %v", mp, err)
	}
	return r
}

// execOK runs script as one exec lease; it must exit 0. Returns the
// outcome printed on stderr and the whole result.
func (e *env) execOK(mp, script string, env ...string) (string, result) {
	e.t.Helper()
	r := e.execSh(mp, script, env...)
	if r.code != 0 {
		e.t.Fatalf("exec sh -c %q: %s", script, r)
	}
	o, _ := parseOutcome(r.stderr)
	if o == "" {
		e.t.Fatalf("exec printed no outcome on stderr: %s", r)
	}
	return o, r
}

// background is a command running in its own goroutine.
type background struct {
	done chan struct{}
	res  result
	err  error
}

// startExec starts `acyclicfs exec mp -- sh -c script` in the background.
func (e *env) startExec(mp, script string, env ...string) *background {
	b := &background{done: make(chan struct{})}
	cmd := e.execCommand(mp, script, env...)
	go func() {
		defer close(b.done)
		b.res, b.err = runLimited(cmd, 2*sessionLimit)
	}()
	e.t.Cleanup(func() { b.waitLimit(2*sessionLimit + 10*time.Second) })
	return b
}

// wait returns the result; it fails the test if the command could not run
// or does not finish within a minute.
func (b *background) wait(t *testing.T) result {
	t.Helper()
	if !b.waitLimit(2*sessionLimit + 10*time.Second) {
		t.Fatal("background exec did not finish")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.res
}

func (b *background) waitLimit(d time.Duration) bool {
	select {
	case <-b.done:
		return true
	case <-time.After(d):
		return false
	}
}

// inSession runs sh -c script with working directory dir in a new process
// session (so its lease ends when it exits) and returns its stdout.
func inSession(t *testing.T, dir, script string) string {
	t.Helper()
	r, err := sessionRun(dir, script)
	if err != nil {
		t.Fatalf("sh -c %q in %s: %v", script, dir, err)
	}
	if r.code != 0 {
		t.Fatalf("sh -c %q in %s: %s", script, dir, r)
	}
	return r.stdout
}

// sessionLimit bounds every process a test runs in a mount: a hung FUSE
// request must fail the test, not stall it until go test's timeout.
const sessionLimit = 60 * time.Second

func sessionRun(dir, script string) (result, error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return runLimited(cmd, sessionLimit)
}

// runLimited runs cmd (which must start a new session) and kills its
// whole session with SIGKILL if it outlives limit.
func runLimited(cmd *exec.Cmd, limit time.Duration) (result, error) {
	wait, err := startLimited(cmd, limit)
	if err != nil {
		return result{}, err
	}
	return wait()
}

// startLimited starts cmd (which must start a new session) and returns
// once it runs; wait is runLimited's end: it kills the whole session with
// SIGKILL if it outlives limit. cmd.Process may be read once it returns.
func startLimited(cmd *exec.Cmd, limit time.Duration) (wait func() (result, error), err error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	// A killed shell's hung child may keep the output pipes open: stop
	// waiting for them shortly after the shell is gone.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	timer := time.AfterFunc(limit, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return func() (result, error) { return waitLimited(cmd, timer, limit, &out, &errb) }, nil
}

func waitLimited(cmd *exec.Cmd, timer *time.Timer, limit time.Duration, out, errb *bytes.Buffer) (result, error) {
	err := cmd.Wait()
	if !timer.Stop() {
		return result{out.String(), errb.String(), -1}, fmt.Errorf("killed after %v (hung?): stdout %q stderr %q", limit, out.String(), errb.String())
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			return result{}, err
		}
		code = ee.ExitCode()
	}
	return result{out.String(), errb.String(), code}, nil
}

// fifo makes a named pipe under e.dir (outside every mount): a shell in a
// mount blocks reading it until the test releases it.
type fifo struct {
	t    *testing.T
	path string
}

func (e *env) fifo(name string) *fifo {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		e.t.Fatal(err)
	}
	f := &fifo{t: e.t, path: p}
	// Never leave a reader blocked forever if the test fails early: a
	// non-blocking open fails when there is no reader, so this is harmless.
	e.t.Cleanup(func() {
		if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Write([]byte("go\n"))
			w.Close()
		}
	})
	return f
}

// opened blocks until a reader has opened the pipe (the event that the
// script reached its wait point), with a bound, and returns the writer.
func (f *fifo) opened(limit time.Duration) *os.File {
	f.t.Helper()
	type res struct {
		w   *os.File
		err error
	}
	c := make(chan res, 1)
	go func() {
		w, err := os.OpenFile(f.path, os.O_WRONLY, 0)
		c <- res{w, err}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			f.t.Fatal(r.err)
		}
		return r.w
	case <-time.After(limit):
		// Unblock the opener so the goroutine ends, then fail.
		if r, err := os.OpenFile(f.path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			defer r.Close()
		}
		f.t.Fatalf("nobody opened %s for reading within %v (the script never reached its wait point)", f.path, limit)
		return nil
	}
}

// release lets the waiting reader continue.
func release(t *testing.T, w *os.File) {
	t.Helper()
	if _, err := w.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	w.Close()
}

// statusWS is one row of `status --json`.
type statusWS struct {
	Workspace  string `json:"workspace"`
	State      string `json:"state"`
	Mountpoint string `json:"mountpoint"`
	Window     string `json:"window"`
	Leases     []struct {
		ID        string `json:"id"`
		Owner     string `json:"owner"`
		Processes []struct {
			PID       int    `json:"pid"`
			Command   string `json:"command"`
			CwdInside bool   `json:"cwd_inside"`
			OpenFiles int    `json:"open_files"`
		} `json:"processes"`
	} `json:"leases"`
	PendingParent string `json:"pending_parent"`
	Behind        bool   `json:"behind_parent"`
	Conflicts     []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"conflicts"`
	LastOutcome string `json:"last_outcome"`
	Warmed      int64  `json:"warmed"`
	Warming     bool   `json:"warming"`
	WatchedDirs int    `json:"watched_dirs"`
	// Transport: io_uring or dev-fuse (mount --transport); UringRequests:
	// requests answered over io_uring.
	Transport     string `json:"transport"`
	UringRequests int64  `json:"uring_requests"`
	// LastReconcile: where the mount's last final close spent its time.
	LastReconcile *struct {
		TotalMS       float64 `json:"total_ms"`
		CaptureMS     float64 `json:"capture_ms"`
		DetectMS      float64 `json:"detect_ms"`
		MaterializeMS float64 `json:"materialize_ms"`
		Edits         int     `json:"materialized_edits"`
	} `json:"last_reconcile"`
}

type statusJSON struct {
	Workspaces []statusWS `json:"workspaces"`
	Recovery   []string   `json:"recovery"`
}

func (e *env) status() statusJSON {
	e.t.Helper()
	r := e.run("--json", "status")
	if r.code != 0 {
		e.t.Fatalf("status --json: %s", r)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		e.t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return s
}

func (e *env) statusOf(name string) statusWS {
	e.t.Helper()
	for _, w := range e.status().Workspaces {
		if w.Workspace == name {
			return w
		}
	}
	e.t.Fatalf("status --json has no row for %s", name)
	return statusWS{}
}

// waitFor polls cond until it holds or limit passes. Used only where no
// event exists (the session sweeper noticing that processes are gone).
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitIdle waits until name's window is idle with no lease open.
func (e *env) waitIdle(name string) {
	e.t.Helper()
	var last statusWS
	waitFor(e.t, 10*time.Second, name+"'s window to become idle", func() bool {
		last = e.statusOf(name)
		return last.Window == "idle" && len(last.Leases) == 0
	})
}

// logEntry is one line of `log`.
type logEntry struct{ gen, kind, op string }

func (e *env) log(name string) []logEntry {
	e.t.Helper()
	r := e.run("log", name)
	if r.code != 0 {
		e.t.Fatalf("log %s: %s", name, r)
	}
	var out []logEntry
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 4 {
			e.t.Fatalf("log line %q has fewer than 4 fields", l)
		}
		out = append(out, logEntry{f[0], f[1], f[3]})
	}
	return out
}

// countKind counts log entries of kind.
func countKind(log []logEntry, kind string) int {
	n := 0
	for _, l := range log {
		if l.kind == kind {
			n++
		}
	}
	return n
}

func kinds(log []logEntry) string {
	var k []string
	for _, l := range log {
		k = append(k, l.kind)
	}
	return strings.Join(k, ",")
}

// head returns a workspace's head from `list --json`.
func (e *env) head(name string) string {
	e.t.Helper()
	l := e.log(name)
	return l[0].gen
}

// exportTo exports name into a fresh directory under e.dir.
func (e *env) exportTo(name, dirName string) string {
	e.t.Helper()
	out := filepath.Join(e.dir, dirName)
	e.ok("export", name, out)
	return out
}

// daemonPID reads STORE/daemon.pid.
func (e *env) daemonPID() int {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.store, "daemon.pid"))
	if err != nil {
		e.t.Fatalf("daemon.pid: %v", err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 0 {
		e.t.Fatalf("daemon.pid holds %q", b)
	}
	return pid
}

// daemonLog returns the tail of STORE/daemon.log for failure messages.
func (e *env) daemonLog() string {
	b, _ := os.ReadFile(filepath.Join(e.store, "daemon.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// treeList describes every path under root: type, exec bit, content or
// link target. Comparing two lists compares two trees.
func treeList(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link " + target
		case fi.IsDir():
			out[rel] = "dir"
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("file x=%v %q", fi.Mode()&0o111 != 0, b)
		default:
			out[rel] = "other " + fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// sameTree fails the test with the differing paths if want and got differ.
func sameTree(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var diffs []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diffs = append(diffs, "missing "+p)
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: got %s, want %s", p, g, w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, "extra "+p)
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%s differs:\n%s", what, strings.Join(diffs, "\n"))
	}
}

// abortFuse aborts the FUSE connection behind mountpoint mp (found by its
// device number in mountinfo) and detaches it. A daemon wedged inside the
// kernel (a notification waiting on a lookup that waits on the daemon)
// cannot even be killed until its connection is aborted.
func abortFuse(mp string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || strings.ReplaceAll(f[4], `\040`, " ") != mp {
			continue
		}
		if _, minor, ok := strings.Cut(f[2], ":"); ok {
			_ = fusectl.Abort(minor)
		}
	}
	syscall.Unmount(mp, syscall.MNT_DETACH)
}

// needTool skips the test when a required program is missing.
func needTool(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// sampleTree writes a small tree with nested dirs, an executable, an empty
// dir and symlinks (relative, absolute, to a dir, dangling) under root.
func sampleTree(t *testing.T, root string) {
	t.Helper()
	writeTree(t, root, map[string]string{
		"README":          "read me\n",
		"src/main.c":      "int main(void) { return 0; }\n",
		"src/lib/util.h":  "#define X 1\n",
		"src/lib/big.bin": strings.Repeat("0123456789abcdef", 70000),
		"empty/":          "",
		"docs/a b.txt":    "space in name\n",
	})
	if err := os.WriteFile(filepath.Join(root, "run.sh"), []byte("#!/bin/sh\necho run\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"link-rel":      "README",
		"src/link-up":   "../docs/a b.txt",
		"link-dir":      "src/lib",
		"link-dangling": "does/not/exist",
		"link-abs":      "/etc/hostname",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
}
