package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// claudeLikeHarness stands in for Claude Code started without `run` in a
// mount: it reads the hook configuration from .claude/settings.json (as
// Claude Code does: hooks.EVENT is a list of {matcher, hooks: [{type:
// "command", command, timeout}]}, a matcher a regex on the tool's name,
// "*" or absent for all) and runs each matching command through the shell
// (child_process, shell: true) with the event as one JSON object on stdin
// and CLAUDE_PROJECT_DIR set; exit 2 blocks a PreToolUse call. It fires
// SessionStart when it starts, PreToolUse and PostToolUse around each
// tool call, Stop after each turn. A turn is one JSON line on its stdin:
// {"tool": "Bash", "input": {"command": CMD}} (a child process, as Claude
// Code's Bash tool) or {"tool": "Edit", "input": {"file_path", "old_string",
// "new_string"}, "pause": true} (read-modify-write in the harness itself, as
// Claude Code's Edit tool; with pause it prints {"paused": CONTENT} after
// reading and writes once it reads the next line). It prints one JSON line
// per turn: {"output", "hooks": [[event, exit code, stderr]...]}.
const claudeLikeHarness = `
const fs = require('fs'), cp = require('child_process'), readline = require('readline');
const dir = process.cwd();
const settings = JSON.parse(fs.readFileSync('.claude/settings.json', 'utf8'));
const session_id = 'sess-' + process.pid;
let calls = 0, ran = [];
function hooks(event, tool, extra) {
  const out = [];
  for (const group of (settings.hooks || {})[event] || []) {
    const m = group.matcher;
    if (tool && m && m !== '*' && !new RegExp('^(' + m + ')$').test(tool)) continue;
    for (const h of group.hooks || []) {
      if (h.type !== 'command') continue;
      const input = Object.assign({session_id, transcript_path: '/nonexistent/' + session_id + '.jsonl',
        cwd: dir, permission_mode: 'default', hook_event_name: event}, extra);
      const r = cp.spawnSync(h.command, {shell: true, input: JSON.stringify(input), cwd: dir, encoding: 'utf8',
        timeout: (h.timeout || 60) * 1000, env: Object.assign({}, process.env, {CLAUDE_PROJECT_DIR: dir})});
      out.push(r.status);
      ran.push([event, r.status, r.stderr]);
    }
  }
  return out;
}
hooks('SessionStart', null, {source: 'startup'});
console.log(JSON.stringify({started: true, hooks: ran}));
const lines = readline.createInterface({input: process.stdin})[Symbol.asyncIterator]();
async function next() { const r = await lines.next(); if (r.done) process.exit(0); return r.value; }
(async () => {
  for (;;) {
    const turn = JSON.parse(await next());
    ran = [];
    const tool_use_id = 'toolu_' + process.pid + '_' + (++calls);
    const call = {tool_name: turn.tool, tool_input: turn.input, tool_use_id};
    let output = null;
    if (!hooks('PreToolUse', turn.tool, call).includes(2)) {
      if (turn.tool === 'Bash') {
        output = cp.execSync(turn.input.command, {encoding: 'utf8', cwd: dir});
      } else if (turn.tool === 'Edit') {
        const before = fs.readFileSync(turn.input.file_path, 'utf8');
        if (turn.pause) { console.log(JSON.stringify({paused: before})); await next(); }
        output = before.replace(turn.input.old_string, turn.input.new_string);
        fs.writeFileSync(turn.input.file_path, output);
      }
      hooks('PostToolUse', turn.tool, Object.assign({tool_response: {output}}, call));
    }
    hooks('Stop', null, {stop_hook_active: false});
    console.log(JSON.stringify({output, hooks: ran}));
  }
})();
`

// hookTurn is one line the claude-like harness printed.
type hookTurn struct {
	Started bool              `json:"started"`
	Paused  *string           `json:"paused"`
	Output  *string           `json:"output"`
	Hooks   []json.RawMessage `json:"hooks"`
}

// TestClaudeCodeHooksRecipe drives the recipe of docs/agents.md (its
// settings.json and hook script, as shipped in docs/agents/) as Claude Code
// would: SessionStart declares the harness ($PPID of the hook's shell), so
// between tool calls nothing is held: a sibling's landing reaches the
// harness at once and its workspace lands. PreToolUse/PostToolUse make
// each tool call one lease, so an edit the harness makes itself
// (read-modify-write) is not moved under by a landing: the landing waits
// for the call's end.
func TestClaudeCodeHooksRecipe(t *testing.T) {
	t.Parallel()
	testClaudeCodeHooks(t, false)
}

// TestClaudeCodeHooksRecipeUnderRun: the same recipe, the same project
// files, with the harness started by `acyclicfs run child -- node …` in
// the project's own directory: the hooks find run's mount through
// ACYCLICFS_RUN_MOUNT (SessionStart declares again the harness run
// declared), and the lease behaviour is the same.
func TestClaudeCodeHooksRecipeUnderRun(t *testing.T) {
	t.Parallel()
	testClaudeCodeHooks(t, true)
}

func testClaudeCodeHooks(t *testing.T, underRun bool) {
	needTool(t, "node")
	e := newMountEnv(t)
	settings, err := os.ReadFile("../docs/agents/claude-settings.json")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../docs/agents/claude-hooks.sh")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "v1\n", "g": "notes\n",
		".claude/settings.json": string(settings), ".claude/hooks/acyclicfs.sh": string(script)})
	if err := os.Chmod(filepath.Join(src, ".claude/hooks/acyclicfs.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "child")
	e.ok("fork", "main", "sib")
	mp := ""
	if !underRun {
		mp = e.mountAt("child")
	}

	// Claude Code as the user starts it: in the mount, acyclicfs on PATH.
	p := filepath.Join(e.dir, "claude-like.js")
	if err := os.WriteFile(p, []byte(claudeLikeHarness), 0o644); err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(e.dir, "xdg-run")
	cmd := exec.Command("node", p)
	cmd.Dir = mp
	if underRun {
		cmd = exec.Command(bin, "--store", e.store, "run", "child", "--", "node", p)
		cmd.Dir = src
	}
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), "ACYCLICFS_STORE="+e.store, "XDG_RUNTIME_DIR="+runtime)
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
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	read := func(what string) hookTurn {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the harness exited before %s", what)
			}
			var r hookTurn
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("harness printed %q: %v", l, err)
			}
			// Every hook must have exited 0.
			for _, h := range r.Hooks {
				var ev []any
				json.Unmarshal(h, &ev)
				if len(ev) != 3 || ev[1] != float64(0) {
					t.Fatalf("%s: a hook failed: %s", what, h)
				}
			}
			return r
		case <-time.After(sessionLimit):
			t.Fatalf("no answer from the harness within %v (%s)", sessionLimit, what)
			return hookTurn{}
		}
	}
	send := func(turn string) {
		t.Helper()
		if _, err := io.WriteString(in, turn+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	bash := func(command string) string {
		t.Helper()
		b, _ := json.Marshal(command)
		send(fmt.Sprintf(`{"tool":"Bash","input":{"command":%s}}`, b))
		r := read("Bash " + command)
		if r.Output == nil || len(r.Hooks) != 3 {
			t.Fatalf("Bash %s: %+v, want its output and PreToolUse, PostToolUse, Stop", command, r)
		}
		return *r.Output
	}

	if r := read("SessionStart"); !r.Started || len(r.Hooks) != 1 {
		t.Fatalf("start: %+v, want SessionStart's hook run", r)
	}
	if got := bash("cat f"); got != "v1\n" {
		t.Fatalf("turn 1: %q", got)
	}
	// Between calls nothing is held (the SessionStart hook declared the
	// harness; every call's lease ended in PostToolUse).
	e.waitIdle("child")
	e.landSibling("v2\n")
	waitFor(t, 10*time.Second, "the child to follow main between tool calls", func() bool {
		st := e.statusOf("child")
		return st.Window == "idle" && st.PendingParent == "" && !st.Behind
	})
	if got := bash("cat f"); got != "v2\n" {
		t.Fatalf("turn 2 after a sibling landed: %q, want v2\ndaemon log:\n%s", got, e.daemonLog())
	}

	// An Edit the harness makes itself, paused between its read and its
	// write while a sibling lands: the call's lease (PreToolUse) holds the
	// view, the landing waits, and lands once PostToolUse ended the lease.
	send(`{"tool":"Edit","input":{"file_path":"g","old_string":"notes","new_string":"notes by claude"},"pause":true}`)
	if r := read("Edit's read"); r.Paused == nil || *r.Paused != "notes\n" {
		t.Fatalf("Edit read %+v", r)
	}
	// The hooks' own process trees (their shell reads the script from the
	// mount) were leases too, each ending with its tree at the next sweep.
	waitFor(t, 10*time.Second, "the tool call's lease to be the only one", func() bool {
		st := e.statusOf("child")
		return len(st.Leases) == 1 && strings.HasPrefix(st.Leases[0].Owner, "claude:toolu_")
	})
	e.landSibling("v3\n")
	if st := e.statusOf("child"); st.PendingParent == "" {
		t.Fatalf("the landing did not wait for the tool call: %+v", st)
	}
	send("go")
	if r := read("Edit's end"); r.Output == nil || *r.Output != "notes by claude\n" {
		t.Fatalf("Edit: %+v", r)
	}
	waitFor(t, 10*time.Second, "the child to follow main after the tool call", func() bool {
		st := e.statusOf("child")
		return st.Window == "idle" && len(st.Leases) == 0 && st.PendingParent == "" && !st.Behind
	})
	if got := bash("cat f g"); got != "v3\nnotes by claude\n" {
		t.Fatalf("after the Edit: %q", got)
	}
	// The harness's workspace lands between calls, its edit in.
	e.waitIdle("child")
	e.ok("land", "child")
	if got := e.ok("cat", "main", "g"); strings.TrimSpace(got) != "notes by claude" {
		t.Fatalf("main's g after the child landed: %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(runtime, "acyclicfs-claude-*", "*", "*")); len(left) != 0 {
		t.Fatalf("lease files left: %v", left)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	if !underRun {
		e.unmount(mp)
	} else {
		for _, m := range runMounts() {
			if strings.Contains(m, "acyclicfs-run-child-") {
				t.Fatalf("run left its mount: %s", m)
			}
		}
	}
}
