package test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpSession starts `acyclicfs mcp` on e's store and connects a client.
func mcpSession(t *testing.T, e *env) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cmd := exec.Command(bin, "--store", e.store, "mcp")
	cmd.Dir = e.dir
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its result; wantErr says whether it must
// be a tool error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, wantErr bool) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s(%v): %v", name, args, err)
	}
	if res.IsError != wantErr {
		t.Fatalf("%s(%v): IsError=%v, want %v: %s", name, args, res.IsError, wantErr, text(res))
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func structured(t *testing.T, res *mcp.CallToolResult, into any) {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
}

// TestMCPServer: an agent drives its own sandbox through `acyclicfs mcp`:
// create, fork, mount, exec (output, exit status, reconcile outcome),
// diff, cat, land, status, log, unmount — each the CLI's command, errors
// as tool errors carrying the CLI's message and exit code.
func TestMCPServer(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"a.txt": "alpha\n"})
	cs := mcpSession(t, e)

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"create", "fork", "mount", "unmount", "exec", "diff", "cat", "land", "resolve", "status", "list", "log", "sessions", "blame"} {
		if !slices.Contains(names, want) {
			t.Errorf("tool %s missing from %v", want, names)
		}
	}

	call(t, cs, "create", map[string]any{"name": "main", "from": src}, false)
	call(t, cs, "fork", map[string]any{"parent": "main", "child": "agent"}, false)
	mp := filepath.Join(e.dir, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	call(t, cs, "mount", map[string]any{"workspace": "agent", "mountpoint": mp}, false)

	var out struct {
		Stdout, Stderr, Outcome string
		ExitCode                int `json:"exit_code"`
	}
	structured(t, call(t, cs, "exec", map[string]any{"mountpoint": mp, "command": "echo beta > b.txt; cat a.txt; echo oops >&2; exit 7"}, false), &out)
	if out.Stdout != "alpha\n" || out.Stderr != "oops\n" || out.ExitCode != 7 || out.Outcome != "current" {
		t.Fatalf("exec: %+v", out)
	}
	if got := text(call(t, cs, "cat", map[string]any{"workspace": "agent", "path": "b.txt"}, false)); got != "beta\n" {
		t.Fatalf("cat = %q", got)
	}
	var diff struct{ Result any }
	structured(t, call(t, cs, "diff", map[string]any{"workspace": "agent"}, false), &diff)
	if raw, _ := json.Marshal(diff.Result); !strings.Contains(string(raw), "b.txt") {
		t.Fatalf("diff = %s", raw)
	}
	call(t, cs, "unmount", map[string]any{"mountpoint": mp}, false)
	call(t, cs, "land", map[string]any{"workspace": "agent"}, false)
	if got := text(call(t, cs, "cat", map[string]any{"workspace": "main", "path": "b.txt"}, false)); got != "beta\n" {
		t.Fatalf("main after land: %q", got)
	}
	var log struct{ Result []map[string]any }
	structured(t, call(t, cs, "log", map[string]any{"workspace": "main", "n": 1}, false), &log)
	if len(log.Result) != 1 {
		t.Fatalf("log -n 1: %+v", log)
	}
	var ss struct{ Result []sessionJSON }
	structured(t, call(t, cs, "sessions", map[string]any{"workspace": "agent"}, false), &ss)
	if len(ss.Result) != 1 || ss.Result[0].Kind != "exec" || !slices.Equal(ss.Result[0].Paths, []string{"b.txt"}) {
		t.Fatalf("sessions agent: %+v", ss)
	}
	var bl struct{ Result []blameJSON }
	structured(t, call(t, cs, "blame", map[string]any{"workspace": "main", "path": "b.txt", "ancestors": true}, false), &bl)
	if len(bl.Result) != 1 || bl.Result[0].Writers[0].Lease != ss.Result[0].Lease {
		t.Fatalf("blame main b.txt --ancestors: %+v", bl)
	}
	call(t, cs, "blame", map[string]any{"workspace": "main", "path": "../x"}, true)
	call(t, cs, "status", nil, false)

	// Errors are the CLI's: message and exit code.
	for _, c := range []struct {
		tool string
		args map[string]any
		msg  string
	}{
		{"fork", map[string]any{"parent": "nope", "child": "x"}, "exit 2"},
		{"fork", map[string]any{"parent": "main", "child": "bad/name"}, "exit 2"},
		{"cat", map[string]any{"workspace": "main", "path": "missing.txt"}, "missing.txt"},
		{"exec", map[string]any{"mountpoint": mp, "command": "true"}, "exec"},
		{"exec", map[string]any{"mountpoint": mp, "command": " "}, "empty"},
		{"resolve", map[string]any{"workspace": "main", "side": "mine"}, "side"},
		{"land", map[string]any{"workspace": "main"}, "exit"},
	} {
		res := call(t, cs, c.tool, c.args, true)
		if !strings.Contains(text(res), c.msg) {
			t.Errorf("%s(%v): %q does not say %q", c.tool, c.args, text(res), c.msg)
		}
	}
	// A call with a missing required argument is refused by the schema.
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fork", Arguments: map[string]any{"parent": "main"}}); err == nil && !res.IsError {
		t.Fatalf("fork without child: %s", text(res))
	}
	e.fsck()
}
