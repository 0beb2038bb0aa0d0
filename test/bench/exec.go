package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// timeSubcommand re-executes this binary as the timing wrapper:
//
//	bench __time OUTFILE WARMUP_SCRIPT TIMED_SCRIPT
//
// It runs `sh -c WARMUP_SCRIPT` (if non-empty) untimed, syncs, then times
// `sh -c TIMED_SCRIPT` and writes "WARM_NS TIMED_NS" to OUTFILE. Running the
// wrapper inside `acyclicfs exec` keeps lease bookkeeping out of the
// measured interval while the warm-up and the workload share one lease.
const timeSubcommand = "__time"

func timeChild(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "bench __time: want OUTFILE WARMUP TIMED")
		return 2
	}
	out, warm, timed := args[0], args[1], args[2]
	var warmD time.Duration
	if warm != "" {
		ws := time.Now()
		err := shell(warm)
		warmD = time.Since(ws)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench __time: warm-up: %v\n", err)
			return exitCode(err)
		}
	}
	// Write back what earlier workloads (and acyclicfs lease ends, which
	// copy captured files into the store) left dirty, untimed: otherwise
	// whichever system runs next pays for it in writeback throttling. A
	// 1 GiB sequential write measured 1.0x native in one run and 16x in the
	// other without this.
	syscall.Sync()
	start := time.Now()
	err := shell(timed)
	d := time.Since(start)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench __time: workload: %v\n", err)
		return exitCode(err)
	}
	if err := os.WriteFile(out, []byte(fmt.Sprintf("%d %d", int64(warmD), int64(d))), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "bench __time: %v\n", err)
		return 1
	}
	return 0
}

func shell(script string) error {
	c := exec.Command("sh", "-c", script)
	c.Stdout = nil // workloads' output is not part of the measurement
	c.Stderr = os.Stderr
	return c.Run()
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
		return ee.ExitCode()
	}
	return 1
}

// cmdResult is one finished command.
type cmdResult struct {
	wall   time.Duration
	stdout string
}

// runCmd runs argv with env additions, returning its wall time and stdout;
// stderr is included in the error on failure. ctx cancellation kills the
// whole process group so a workload never outlives the harness.
func runCmd(ctx context.Context, dir string, env []string, argv ...string) (cmdResult, error) {
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Dir = dir
	c.Env = append(os.Environ(), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	start := time.Now()
	err := c.Run()
	res := cmdResult{wall: time.Since(start), stdout: stdout.String()}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return res, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, msg)
	}
	return res, nil
}

// mustSh runs a setup script, failing with its output.
func mustSh(ctx context.Context, script string) error {
	_, err := runCmd(ctx, "/", nil, "sh", "-c", script)
	return err
}

// cleaner collects teardown steps and runs them newest first, once.
type cleaner struct {
	mu    sync.Mutex // protects steps
	steps []func()
}

func (c *cleaner) add(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.steps = append(c.steps, f)
}

func (c *cleaner) run() {
	c.mu.Lock()
	steps := c.steps
	c.steps = nil
	c.mu.Unlock()
	for i := len(steps) - 1; i >= 0; i-- {
		steps[i]()
	}
}

// isMounted reports whether mp is a mount point, from /proc/self/mountinfo
// (never touching the path, so a dead FUSE daemon cannot hang us).
func isMounted(mp string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountinfo(f[4]) == mp {
			return true
		}
	}
	return false
}

func unescapeMountinfo(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// waitMounted polls until mp is a mount point or the timeout passes. The
// mounters used here (loopback, fuse-overlayfs) offer no readiness event we
// can wait on from outside, so polling mountinfo is the event.
func waitMounted(ctx context.Context, mp string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !isMounted(mp) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not mounted after %v", mp, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// forceUnmount detaches mp whatever state its daemon is in.
func forceUnmount(mp string) {
	if !isMounted(mp) {
		return
	}
	if err := exec.Command("fusermount3", "-u", mp).Run(); err == nil && !isMounted(mp) {
		return
	}
	_ = exec.Command("umount", "-l", mp).Run()
}

// shq quotes s for sh.
func shq(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
