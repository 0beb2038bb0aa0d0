package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
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

// mcpSessionArgs is mcpSession with more arguments to `acyclicfs mcp`.
func mcpSessionArgs(t *testing.T, e *env, extra ...string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cmd := exec.Command(bin, append([]string{"--store", e.store, "mcp"}, extra...)...)
	cmd.Dir = e.dir
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callErr calls a tool that must fail, by a tool error or a protocol
// error (the schema refusing a wrong type), and returns what it said.
func callErr(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return err.Error()
	}
	if !res.IsError {
		t.Errorf("%s(%.300v): succeeded, want an error: %.300s", name, args, text(res))
		return ""
	}
	msg := text(res)
	if strings.TrimSpace(msg) == "" || strings.Contains(msg, "panic") {
		t.Errorf("%s(%.300v): error %q is not a clear message", name, args, msg)
	}
	return msg
}

// dirState is every name under root with its mode, size and mtime: what
// a command that touched the tree would change.
func dirState(t *testing.T, root string, skip ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if slices.Contains(skip, p) {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// TestMCPHostileInputs: every tool is fed hostile values in each of its
// arguments — flags ("-x", "--store=OTHER", "--help"), paths out of
// bounds ("../..", absolute, another store's), a NUL byte, a 200 KiB
// string, wrong JSON types — and answers each with a clear error, while
// no other store or directory changes: no argument ever becomes a flag
// of the command line the tool runs (issue #38).
func TestMCPHostileInputs(t *testing.T) {
	e := newMountEnv(t)
	writeTree(t, filepath.Join(e.dir, "src"), map[string]string{"a.txt": "alpha\n"})
	e.ok("create", "main", "--from", filepath.Join(e.dir, "src"))
	e.ok("fork", "main", "agent")
	mp := e.mountAt("agent")
	// Another store with the same workspace names, a store path that must
	// not come into being, a directory of the user's, one outside the
	// server's working directory.
	other := filepath.Join(e.dir, "other-store")
	if r := (&env{t: t, store: other, dir: e.dir}).run("create", "main", "--from", filepath.Join(e.dir, "src")); r.code != 0 {
		t.Fatalf("create in the other store: %s", r)
	}
	absent := filepath.Join(e.dir, "absent-store")
	writeTree(t, filepath.Join(e.dir, "victim"), map[string]string{"keep.txt": "mine\n", "sub/deep.txt": "mine too\n"})
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"secret.txt": "not for import\n"})
	for _, d := range []string{"mnt-new", "other-store/mnt", "store/mnt"} {
		if err := os.MkdirAll(filepath.Join(e.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before := dirState(t, e.dir, e.store, mp)
	beforeOut := dirState(t, outside)
	cs := mcpSession(t, e)

	hostile := []any{
		"-x", "--store=" + other, "--store=" + absent, "--help",
		"../../../../../../etc", "/etc", outside, filepath.Join(other, "mnt"), filepath.Join(e.store, "mnt"),
		"a\x00b", strings.Repeat("a", 200<<10),
		42, []any{"main"}, map[string]any{"name": "main"}, true,
	}
	// Free text (a shell command, a commit message, a path to blame) may
	// hold anything but a NUL byte, and is bounded: other values need not
	// fail there.
	mustFail := func(field string, v any) bool {
		s, isStr := v.(string)
		if !isStr || (field != "command" && field != "message" && field != "blame-path") {
			return true
		}
		return strings.IndexByte(s, 0) >= 0 || len(s) > 100<<10
	}
	tools := []struct {
		name   string
		base   map[string]any
		fields []string
	}{
		{"create", map[string]any{"name": "new1"}, []string{"name", "from", "from_git"}},
		{"fork", map[string]any{"parent": "main", "child": "c1"}, []string{"parent", "child", "at"}},
		{"mount", map[string]any{"workspace": "main", "mountpoint": filepath.Join(e.dir, "mnt-new")}, []string{"workspace", "mountpoint"}},
		{"unmount", map[string]any{"mountpoint": mp}, []string{"mountpoint"}},
		{"exec", map[string]any{"mountpoint": mp, "command": "true"}, []string{"mountpoint", "command"}},
		{"diff", map[string]any{"workspace": "agent"}, []string{"workspace", "against"}},
		{"cat", map[string]any{"workspace": "main", "path": "a.txt"}, []string{"workspace", "path", "conflict"}},
		{"land", map[string]any{"workspace": "agent"}, []string{"workspace"}},
		{"resolve", map[string]any{"workspace": "agent", "paths": []any{"a.txt"}}, []string{"workspace", "paths", "side"}},
		{"git_publish", map[string]any{"workspace": "main"}, []string{"workspace", "message"}},
		{"git_pull", map[string]any{"workspace": "main"}, []string{"workspace"}},
		{"log", map[string]any{"workspace": "main"}, []string{"workspace", "n"}},
		{"sessions", map[string]any{"workspace": "main"}, []string{"workspace", "n"}},
		{"blame", map[string]any{"workspace": "main", "path": "a.txt"}, []string{"workspace", "path"}},
	}
	calls := 0
	for _, tl := range tools {
		for _, f := range tl.fields {
			vals := hostile
			if f == "n" {
				vals = []any{-1, "5", 1.5, []any{1}}
			}
			for _, v := range vals {
				args := maps.Clone(tl.base)
				args[f] = v
				if s, ok := v.(string); ok && f == "paths" {
					args[f] = []any{s, "a.txt"}
				}
				calls++
				kind := f
				if tl.name == "blame" && f == "path" {
					// blame of a path no generation changed is an empty
					// list, not an error: any name may be asked about.
					kind = "blame-path"
				}
				if mustFail(kind, v) {
					callErr(t, cs, tl.name, args)
				} else {
					cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tl.name, Arguments: args})
				}
			}
		}
	}
	t.Logf("%d hostile calls", calls)

	// Nothing else changed: the other store, the user's directories, the
	// one outside; the store path never became a store; the server's
	// store has its two workspaces and its one mount.
	sameTree(t, "the test's directory", before, dirState(t, e.dir, e.store, mp))
	sameTree(t, "the directory outside", beforeOut, dirState(t, outside))
	if _, err := os.Stat(absent); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s came into being: %v", absent, err)
	}
	var ws []struct{ Name string }
	if err := json.Unmarshal([]byte(e.run("--json", "list").stdout), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 {
		t.Errorf("workspaces after the hostile calls: %+v", ws)
	}
	var mounts []string
	for _, m := range fuseMounts() {
		if strings.HasPrefix(m, e.dir) {
			mounts = append(mounts, m)
		}
	}
	if !slices.Equal(mounts, []string{mp}) {
		t.Errorf("mounts under the test's directory: %v, want only %s", mounts, mp)
	}
	// And the tools still work.
	if got := text(call(t, cs, "cat", map[string]any{"workspace": "main", "path": "a.txt"}, false)); got != "alpha\n" {
		t.Fatalf("cat after the hostile calls: %q", got)
	}
}

// TestMCPCreateFromAllowed: create imports (from, from_git) only from
// inside the server's working directory, or the directories given with
// mcp --allow-from; a symlink out of them does not lead out.
func TestMCPCreateFromAllowed(t *testing.T) {
	e := newEnv(t)
	writeTree(t, filepath.Join(e.dir, "src"), map[string]string{"a.txt": "alpha\n"})
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"secret.txt": "not for import\n"})
	if err := os.Symlink(outside, filepath.Join(e.dir, "link-out")); err != nil {
		t.Fatal(err)
	}

	cs := mcpSession(t, e) // default: the working directory, e.dir
	call(t, cs, "create", map[string]any{"name": "in", "from": "src"}, false)
	for _, from := range []string{outside, "link-out", "../" + filepath.Base(outside), "/"} {
		if msg := callErr(t, cs, "create", map[string]any{"name": "out", "from": from}); !strings.Contains(msg, "--allow-from") {
			t.Errorf("create from %s: %q does not say how to allow it", from, msg)
		}
	}
	callErr(t, cs, "create", map[string]any{"name": "out", "from_git": outside + "@main"})

	cs2 := mcpSessionArgs(t, e, "--allow-from", outside)
	call(t, cs2, "create", map[string]any{"name": "out", "from": outside}, false)
	callErr(t, cs2, "create", map[string]any{"name": "in2", "from": filepath.Join(e.dir, "src")})
	if got := text(call(t, cs2, "cat", map[string]any{"workspace": "out", "path": "secret.txt"}, false)); got != "not for import\n" {
		t.Fatalf("cat out secret.txt = %q", got)
	}
	var ws []struct{ Name string }
	if err := json.Unmarshal([]byte(e.run("--json", "list").stdout), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 {
		t.Errorf("workspaces: %+v, want in and out", ws)
	}
}
