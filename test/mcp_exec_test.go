package test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// callWithin calls a tool and fails the test if it does not answer
// within limit (a hang names the call); it returns the result and how
// long the call took.
func callWithin(t *testing.T, cs *mcp.ClientSession, limit time.Duration, name string, args map[string]any) (*mcp.CallToolResult, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	began := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	took := time.Since(began)
	if err != nil {
		t.Fatalf("%s(%v) did not answer within %v: %v", name, args, limit, err)
	}
	if res.IsError {
		t.Fatalf("%s(%v): %s", name, args, text(res))
	}
	return res, took
}

// killPidFile kills the process whose pid a command wrote to path, at
// the end of the test (a background process left in a mount would keep
// it busy at unmount).
func killPidFile(t *testing.T, path string) {
	t.Cleanup(func() {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// TestMCPExecBackgroundAndTimeout: exec returns when the command exits,
// whatever it left running in the background (its output pipes stay open
// for as long as that process lives); timeout_seconds ends a command that
// runs too long — SIGTERM to its session, then SIGKILL for one that
// ignores it — and the lease still ends with an outcome.
func TestMCPExecBackgroundAndTimeout(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"a.txt": "alpha\n"})
	cs := mcpSession(t, e)
	call(t, cs, "create", map[string]any{"name": "main", "from": src}, false)
	call(t, cs, "fork", map[string]any{"parent": "main", "child": "agent"}, false)
	mp := filepath.Join(e.dir, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	call(t, cs, "mount", map[string]any{"workspace": "agent", "mountpoint": mp}, false)

	type execOut struct {
		Stdout, Outcome string
		ExitCode        int  `json:"exit_code"`
		TimedOut        bool `json:"timed_out"`
	}

	// A server left in the background: the call returns with the
	// foreground's output and status.
	bgPid := filepath.Join(e.dir, "bg.pid")
	killPidFile(t, bgPid)
	res, took := callWithin(t, cs, time.Minute, "exec", map[string]any{"mountpoint": mp,
		"command": "sleep 1000 & echo $! > " + bgPid + "; echo started; exit 3"})
	var out execOut
	structured(t, res, &out)
	t.Logf("exec of a command that leaves sleep 1000 in the background returned in %v", took.Round(time.Millisecond))
	if out.Stdout != "started\n" || out.ExitCode != 3 || out.TimedOut || out.Outcome == "" {
		t.Fatalf("exec with a background process: %+v", out)
	}
	if took > 20*time.Second {
		t.Errorf("exec waited %v for its background process", took)
	}

	// A command that outlives its timeout is ended by SIGTERM.
	res, took = callWithin(t, cs, time.Minute, "exec", map[string]any{"mountpoint": mp,
		"command": "echo begun; sleep 1000", "timeout_seconds": 1})
	out = execOut{}
	structured(t, res, &out)
	t.Logf("a 1 s timeout ended sleep 1000 in %v", took.Round(time.Millisecond))
	if !out.TimedOut || out.ExitCode != 128+int(syscall.SIGTERM) || out.Stdout != "begun\n" || out.Outcome == "" {
		t.Fatalf("exec past its timeout: %+v", out)
	}

	// One that ignores SIGTERM is killed after the grace period.
	res, _ = callWithin(t, cs, time.Minute, "exec", map[string]any{"mountpoint": mp,
		"command": "trap '' TERM; sleep 1000", "timeout_seconds": 1})
	out = execOut{}
	structured(t, res, &out)
	if !out.TimedOut || out.ExitCode != 128+int(syscall.SIGKILL) {
		t.Fatalf("exec of a command that ignores SIGTERM past its timeout: %+v", out)
	}

	// Out of range.
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"mountpoint": mp, "command": "true", "timeout_seconds": -1}})
	if err == nil && !r.IsError {
		t.Fatal("a negative timeout was taken")
	}
}
