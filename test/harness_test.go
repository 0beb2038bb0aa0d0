package test

import (
	"bytes"
	"flag"
	"fmt"
	"github.com/acyclicfs/acyclicfs/fusefs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// bin is the acyclicfs binary built once for the whole package.
var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	// Every rapid check here drives the binary through real mounts: run
	// fewer than rapid's default, from a fixed seed, unless the caller
	// asked otherwise. CI thus replays the same 20 scenarios every time;
	// exploring new ones is a run with -rapid.checks N (and a random or
	// given -rapid.seed), as every stop does by hand.
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["rapid.checks"] && os.Getenv("RAPID_CHECKS") == "" {
		_ = flag.Set("rapid.checks", "20")
	}
	if !given["rapid.seed"] && !given["rapid.checks"] && os.Getenv("RAPID_SEED") == "" {
		_ = flag.Set("rapid.seed", "20261203")
	}
	dir, err := os.MkdirTemp("", "acyclicfs-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "acyclicfs")
	// With the small fsmonitor hook beside it, as `make build` installs it.
	args := []string{"build", "-o", dir + "/"}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/acyclicfs/acyclicfs/cmd/acyclicfs", "github.com/acyclicfs/acyclicfs/cmd/acyclicfs-fsmonitor")...)
	if !raceEnabled {
		// As `make build` does: static, as users get it (-race needs cgo).
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build acyclicfs:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if err := fusefs.RestoreUring(); err != nil { // needUring's, if it turned it on
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	if code == 0 {
		for _, mp := range fuseMounts() {
			for _, d := range envDirs {
				if strings.HasPrefix(mp, d+"/") {
					fmt.Fprintf(os.Stderr, "leaked FUSE mount: %s\n", mp)
					code = 1
				}
			}
		}
	}
	os.Exit(code)
}

// envDirs are the scratch directories of every env (checked for leaked
// mounts at the end). Written by tests' goroutines: guarded by envMu.
var (
	envMu   sync.Mutex
	envDirs []string
)

// env is one isolated store and a scratch directory.
type env struct {
	t     *testing.T
	store string
	dir   string
	// extraEnv is added to the environment of every acyclicfs command
	// (and so of the daemon the first one starts).
	extraEnv []string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, store: filepath.Join(dir, "store"), dir: dir}
	envMu.Lock()
	envDirs = append(envDirs, dir)
	envMu.Unlock()
	t.Cleanup(func() {
		// Stop any daemon this test started; it reconciles and unmounts.
		res := e.run("shutdown")
		if res.code != 0 {
			t.Errorf("shutdown: exit %d: %s", res.code, res.stderr)
		}
		if b, err := os.ReadFile(filepath.Join(e.store, "daemon.pid")); err == nil {
			var pid int
			fmt.Sscan(string(b), &pid)
			if pid > 0 && waitGone(pid, 10*time.Second) != nil {
				t.Errorf("daemon %d still running after shutdown", pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for _, mp := range fuseMounts() {
			if strings.HasPrefix(mp, dir) {
				t.Errorf("mount leaked: %s", mp)
				syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
	})
	return e
}

// result is one finished command.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// line returns stdout's first line, trimmed.
func (r result) line() string {
	s, _, _ := strings.Cut(r.stdout, "\n")
	return strings.TrimSpace(s)
}

// run runs acyclicfs with --store and returns what happened.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return e.runIn("", args...)
}

func (e *env) runIn(cwd string, args ...string) result {
	e.t.Helper()
	cmd := exec.Command(bin, append([]string{"--store", e.store}, args...)...)
	cmd.Dir = cwd
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(append(os.Environ(), "ACYCLICFS_STORE="), e.extraEnv...)
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			e.t.Fatalf("run %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{out.String(), errb.String(), code}
}

// ok runs a command that must succeed and returns stdout's first line.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("acyclicfs %s: %s", strings.Join(args, " "), r)
	}
	return r.line()
}

// fails runs a command that must exit with code and returns the result.
func (e *env) fails(code int, args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != code {
		e.t.Fatalf("acyclicfs %s: want exit %d, got %s", strings.Join(args, " "), code, r)
	}
	if !strings.HasPrefix(r.stderr, "acyclicfs: ") && code != 3 {
		e.t.Errorf("acyclicfs %s: stderr should start with 'acyclicfs: ', got %q", strings.Join(args, " "), r.stderr)
	}
	return r
}

// fsck asserts the store is clean.
func (e *env) fsck() {
	e.t.Helper()
	if r := e.run("fsck"); r.code != 0 {
		e.t.Fatalf("fsck: %s", r)
	}
}

// writeTree creates files from a map of relative path to content; a path
// ending in "/" is an empty directory.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fuseMounts lists FUSE mountpoints of this machine.
func fuseMounts() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "fuse") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) > 4 {
			out = append(out, strings.ReplaceAll(f[4], `\040`, " "))
		}
	}
	return out
}

// waitGone waits until pid has exited (polling /proc: there is no event
// for a non-child's exit short of pidfd, which needs the same polling).
func waitGone(pid int, limit time.Duration) error {
	fd, err := pidfdOpen(pid)
	if err != nil {
		return nil // already gone
	}
	defer syscall.Close(fd)
	fds := []pollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n := poll(fds, int(limit.Milliseconds())); n > 0 {
		return nil
	}
	return fmt.Errorf("pid %d still alive", pid)
}
