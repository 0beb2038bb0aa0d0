package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

// `acyclicfs mcp` serves the Model Context Protocol on stdin and stdout
// (docs/mcp.md). Every tool runs this binary's own command with --json,
// as a child process against the same store: inputs are validated
// exactly as the CLI validates them, the daemon routing, locking and exit
// codes are the CLI's, and an error is a tool error carrying the CLI's
// message. A child per call costs a few milliseconds, next to nothing
// beside what the tools do, and keeps one bad call from taking the server
// down.

func (a *app) cmdMCP() *cobra.Command {
	var allowFrom []string
	c := &cobra.Command{
		Use:   "mcp [--allow-from DIR]...",
		Short: "Serve the Model Context Protocol on stdin/stdout (tools: create, fork, mount, exec, diff, cat, land, resolve, git_publish, git_pull, status, log, …)",
		Args:  exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.storeDir()
			if err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("mcp: %w", err)
			}
			roots, err := a.allowedRoots(allowFrom)
			if err != nil {
				return err
			}
			s := newMCPServer(&mcpRunner{bin: self, store: store, cwd: a.cwd, allowFrom: roots})
			if err := s.Run(cmd.Context(), &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("mcp: %w", err)
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&allowFrom, "allow-from", nil,
		"the create tool imports (from, from_git) only directories inside DIR (repeatable; default: the server's working directory; '/' allows every directory the server's user can read)")
	return c
}

// allowedRoots are the directories the create tool may import from
// (mcp --allow-from), with symlinks resolved: the working directory when
// none is given.
func (a *app) allowedRoots(dirs []string) ([]string, error) {
	if len(dirs) == 0 {
		dirs = []string{a.cwd}
	}
	roots := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if d == "" {
			return nil, usageError{errors.New("mcp: --allow-from needs a directory")}
		}
		r, err := filepath.EvalSymlinks(a.abs(d))
		if err != nil {
			return nil, usageError{fmt.Errorf("mcp: --allow-from %s: %w", d, err)}
		}
		if fi, err := os.Stat(r); err != nil || !fi.IsDir() {
			return nil, usageError{fmt.Errorf("mcp: --allow-from %s: not a directory", d)}
		}
		roots = append(roots, r)
	}
	return roots, nil
}

// mcpRunner runs CLI commands for the MCP tools.
type mcpRunner struct {
	bin, store, cwd string
	// allowFrom are the directories (symlinks resolved) whose trees the
	// create tool may import.
	allowFrom []string
}

// cliResult is one CLI run.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cliArgs is a command line for the CLI built from MCP arguments: the
// command's words, its flags (each "--name=value", so that no value is
// ever read as another flag), then "--" and the operands. Nothing after
// "--" is a flag to the CLI, its pre-pass (scanArgs) or cobra, so an
// operand like "--store=OTHER" stays an operand.
func cliArgs(words, flags []string, operands ...string) []string {
	args := append(append(append([]string{}, words...), flags...), "--")
	return append(args, operands...)
}

// outputGrace is how long a tool waits for the output pipes to close
// after the CLI exited: a command that left a process in the background
// (`server &`) holds them open for as long as that process lives, and
// the tool returns when the command exits, not when its background does.
const outputGrace = time.Second

// stopGrace is the time between the SIGTERM that ends a command (its call
// was cancelled, or exec's timeout passed) and the second one, on which
// exec kills the command's session.
const stopGrace = 5 * time.Second

func (r *mcpRunner) run(ctx context.Context, args ...string) (cliResult, error) {
	cmd := exec.Command(r.bin, append([]string{"--store", r.store}, args...)...)
	cmd.Dir = r.cwd
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = outputGrace
	if err := cmd.Start(); err != nil {
		return cliResult{}, fmt.Errorf("run acyclicfs: %w", err)
	}
	// A cancelled call ends the CLI as Ctrl-C would, never with SIGKILL:
	// the first SIGTERM lets it stop cleanly (exec passes it on to the
	// command's session and still ends the lease), a second one
	// stopGrace later makes exec kill that session.
	exited := make(chan struct{})
	go func() {
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopGrace):
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}()
	err := cmd.Wait()
	close(exited)
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // the CLI exited; only its background kept the pipes
	}
	res := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		return res, fmt.Errorf("run acyclicfs: %w", err)
	}
	return res, nil
}

// cliError is a failed command as a tool error: the CLI's message and its
// exit code.
func cliError(args []string, r cliResult) error {
	msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(r.stderr), "acyclicfs: "))
	if msg == "" {
		msg = strings.TrimSpace(r.stdout)
	}
	return fmt.Errorf("acyclicfs %s: exit %d (%s): %s", args[0], r.code, exitName(r.code), msg)
}

func exitName(code int) string {
	switch code {
	case exitUsage:
		return "bad input"
	case 3:
		return "conflict or refused"
	case 4:
		return "busy"
	}
	return "error"
}

// jsonTool runs `acyclicfs --json ARGS` and returns its JSON output as the
// tool's structured result.
func (r *mcpRunner) jsonTool(ctx context.Context, args ...string) (*mcp.CallToolResult, any, error) {
	res, err := r.run(ctx, append([]string{"--json"}, args...)...)
	if err != nil {
		return nil, nil, err
	}
	if res.code != 0 {
		return nil, nil, cliError(args, res)
	}
	var v any
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
		// Not JSON (cat prints the file): hand it over as text.
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.stdout}}}, nil, nil
	}
	return nil, map[string]any{"result": v}, nil
}

// Tool inputs. Field descriptions become the tools' JSON schemas.
type (
	mcpCreateIn struct {
		Name    string `json:"name" jsonschema:"the new workspace's name"`
		From    string `json:"from,omitempty" jsonschema:"import this directory's tree"`
		FromGit string `json:"from_git,omitempty" jsonschema:"start from a git repository's revision: REPO or REPO@REF"`
	}
	mcpForkIn struct {
		Parent string `json:"parent" jsonschema:"the workspace to fork"`
		Child  string `json:"child" jsonschema:"the new workspace's name"`
		At     string `json:"at,omitempty" jsonschema:"a generation of parent to fork at (id or unique prefix)"`
	}
	mcpMountIn struct {
		Workspace  string `json:"workspace"`
		Mountpoint string `json:"mountpoint" jsonschema:"an empty directory"`
	}
	mcpMountpointIn struct {
		Mountpoint string `json:"mountpoint"`
	}
	mcpExecIn struct {
		Mountpoint     string `json:"mountpoint" jsonschema:"a mounted workspace"`
		Command        string `json:"command" jsonschema:"a shell command, run with sh -c in the mountpoint as one lease; the tool returns when it exits, whatever it left running in the background"`
		TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"end the command after this many seconds (SIGTERM to its session, SIGKILL 5 s later); default 600, at most 86400"`
	}
	mcpWorkspaceIn struct {
		Workspace string `json:"workspace"`
	}
	mcpDiffIn struct {
		Workspace string `json:"workspace"`
		Against   string `json:"against,omitempty" jsonschema:"compare with this workspace or generation instead of the parent"`
	}
	mcpCatIn struct {
		Workspace string `json:"workspace" jsonschema:"WS or WS@GEN"`
		Path      string `json:"path"`
		Conflict  string `json:"conflict,omitempty" jsonschema:"base, ours or theirs: a side of a recorded conflict"`
	}
	mcpResolveIn struct {
		Workspace string   `json:"workspace"`
		Paths     []string `json:"paths,omitempty" jsonschema:"the conflicted paths to resolve"`
		All       bool     `json:"all,omitempty" jsonschema:"resolve every recorded conflict"`
		Side      string   `json:"side,omitempty" jsonschema:"ours, theirs or base; empty: take the workspace's current content"`
		Force     bool     `json:"force,omitempty" jsonschema:"accept content that still has conflict markers"`
	}
	mcpPublishIn struct {
		Workspace string `json:"workspace" jsonschema:"a workspace bound to a git branch (create from_git, or acyclicfs git bind)"`
		Message   string `json:"message,omitempty" jsonschema:"subject of the commit of uncommitted changes"`
	}
	mcpLogIn struct {
		Workspace string `json:"workspace"`
		N         int    `json:"n,omitempty" jsonschema:"at most this many entries"`
	}
	mcpSessionsIn struct {
		Workspace string `json:"workspace"`
		N         int    `json:"n,omitempty" jsonschema:"at most this many entries"`
		Ancestors bool   `json:"ancestors,omitempty" jsonschema:"include the sessions of other workspaces in its history (forked from, landed in)"`
	}
	mcpBlameIn struct {
		Workspace string `json:"workspace"`
		Path      string `json:"path"`
		Ancestors bool   `json:"ancestors,omitempty" jsonschema:"include the captures of other workspaces in its history (forked from, landed in)"`
	}
	mcpNone struct{}
)

// mcpExecOut is what exec returns.
type mcpExecOut struct {
	Stdout   string   `json:"stdout"`
	Stderr   string   `json:"stderr"`
	ExitCode int      `json:"exit_code" jsonschema:"the command's exit status"`
	Outcome  string   `json:"outcome" jsonschema:"the reconcile outcome of the lease's end: current, rebased, conflicted or still-active"`
	Paths    []string `json:"paths,omitempty" jsonschema:"the paths the outcome concerns (conflicts)"`
	TimedOut bool     `json:"timed_out,omitempty" jsonschema:"the command was ended because timeout_seconds passed"`
}

// Exec's timeout: the default and the largest allowed.
const (
	mcpExecTimeout    = 600 * time.Second
	mcpExecTimeoutMax = 86400
)

// outcomes are the reconcile outcomes exec prints.
var outcomes = map[string]bool{"current": true, "rebased": true, "conflicted": true, "still-active": true}

func newMCPServer(r *mcpRunner) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "acyclicfs", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "create", Description: "Create a root workspace: empty, importing a directory, or from a git branch (no checkout). The directory or repository must be inside one the server allows (mcp --allow-from; default: the server's working directory)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpCreateIn) (*mcp.CallToolResult, any, error) {
			if err := mcpName("create", "name", in.Name); err != nil {
				return nil, nil, err
			}
			var flags []string
			if in.From != "" {
				dir, err := r.importable("create", "from", in.From)
				if err != nil {
					return nil, nil, err
				}
				flags = append(flags, "--from="+dir)
			}
			if in.FromGit != "" {
				spec, err := r.gitImportable(in.FromGit)
				if err != nil {
					return nil, nil, err
				}
				flags = append(flags, "--from-git="+spec)
			}
			return r.jsonTool(ctx, cliArgs([]string{"create"}, flags, in.Name)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fork", Description: "Fork a child workspace from a parent's head in O(1)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpForkIn) (*mcp.CallToolResult, any, error) {
			if err := errors.Join(mcpName("fork", "parent", in.Parent), mcpName("fork", "child", in.Child)); err != nil {
				return nil, nil, err
			}
			var flags []string
			if in.At != "" {
				if err := mcpGen("fork", "at", in.At); err != nil {
					return nil, nil, err
				}
				flags = append(flags, "--at="+in.At)
			}
			return r.jsonTool(ctx, cliArgs([]string{"fork"}, flags, in.Parent, in.Child)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "mount", Description: "Mount a workspace at an empty directory (not inside a store, nor inside another mount of this store); any tool then works inside."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpMountIn) (*mcp.CallToolResult, any, error) {
			if err := errors.Join(mcpName("mount", "workspace", in.Workspace), r.mountpoint(in.Mountpoint)); err != nil {
				return nil, nil, err
			}
			return r.jsonTool(ctx, cliArgs([]string{"mount"}, nil, in.Workspace, in.Mountpoint)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "unmount", Description: "Finish leases, capture, reconcile and unmount a mountpoint of this store (or a mounted workspace, by name)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpMountpointIn) (*mcp.CallToolResult, any, error) {
			if err := mcpPath("unmount", "mountpoint", in.Mountpoint); err != nil {
				return nil, nil, err
			}
			return r.jsonTool(ctx, cliArgs([]string{"unmount"}, nil, in.Mountpoint)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "exec", Description: "Run a shell command in a mounted workspace of this store as one lease; returns its output, exit status and the reconcile outcome of the lease's end."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpExecIn) (*mcp.CallToolResult, mcpExecOut, error) {
			if err := mcpPath("exec", "mountpoint", in.Mountpoint); err != nil {
				return nil, mcpExecOut{}, err
			}
			if strings.TrimSpace(in.Command) == "" {
				return nil, mcpExecOut{}, errors.New("exec: command is empty")
			}
			if err := mcpText("exec", "command", in.Command, mcpMaxText); err != nil {
				return nil, mcpExecOut{}, err
			}
			// The command runs in the mount only once the daemon bound
			// its session to a lease there: a directory that is no mount
			// of this store fails before the command starts.
			if in.TimeoutSeconds < 0 || in.TimeoutSeconds > mcpExecTimeoutMax {
				return nil, mcpExecOut{}, fmt.Errorf("exec: timeout_seconds: %d is not between 0 and %d", in.TimeoutSeconds, mcpExecTimeoutMax)
			}
			limit := mcpExecTimeout
			if in.TimeoutSeconds > 0 {
				limit = time.Duration(in.TimeoutSeconds) * time.Second
			}
			tctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			res, err := r.run(tctx, cliArgs([]string{"exec"}, nil, in.Mountpoint, "sh", "-c", in.Command)...)
			if err != nil {
				return nil, mcpExecOut{}, err
			}
			out := mcpExecOut{Stdout: res.stdout, Stderr: res.stderr, ExitCode: res.code, TimedOut: ctx.Err() == nil && tctx.Err() != nil}
			// exec ends its stderr with the outcome line and, for some
			// outcomes, the paths concerned.
			lines := strings.Split(strings.TrimRight(res.stderr, "\n"), "\n")
			at := -1
			for i := len(lines) - 1; i >= 0; i-- {
				if outcomes[strings.TrimSpace(lines[i])] {
					at = i
					break
				}
			}
			if at < 0 {
				// exec itself failed (not the command): the CLI's error.
				return nil, out, cliError([]string{"exec"}, res)
			}
			out.Outcome, out.Paths = strings.TrimSpace(lines[at]), lines[at+1:]
			out.Stderr = strings.Join(lines[:at], "\n")
			if out.Stderr != "" {
				out.Stderr += "\n"
			}
			return nil, out, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "diff", Description: "What a workspace changed against its parent (or another workspace/generation)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpDiffIn) (*mcp.CallToolResult, any, error) {
			if err := mcpName("diff", "workspace", in.Workspace); err != nil {
				return nil, nil, err
			}
			ops := []string{in.Workspace}
			if in.Against != "" {
				if err := mcpRef("diff", "against", in.Against); err != nil {
					return nil, nil, err
				}
				ops = append(ops, in.Against)
			}
			return r.jsonTool(ctx, cliArgs([]string{"diff"}, nil, ops...)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "cat", Description: "A file of a workspace (or of a generation, or one side of a recorded conflict)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpCatIn) (*mcp.CallToolResult, any, error) {
			if err := errors.Join(mcpRef("cat", "workspace", in.Workspace), mcpPath("cat", "path", in.Path)); err != nil {
				return nil, nil, err
			}
			var flags []string
			switch in.Conflict {
			case "":
			case "base", "ours", "theirs":
				flags = append(flags, "--conflict="+in.Conflict)
			default:
				return nil, nil, fmt.Errorf("cat: conflict %q: want base, ours or theirs", in.Conflict)
			}
			args := cliArgs([]string{"cat"}, flags, in.Workspace, in.Path)
			res, err := r.run(ctx, args...)
			if err != nil {
				return nil, nil, err
			}
			if res.code != 0 {
				return nil, nil, cliError(args, res)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.stdout}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "land", Description: "Land a workspace into its parent; refused (with the paths) while conflicts are recorded."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpWorkspaceIn) (*mcp.CallToolResult, any, error) {
			if err := mcpName("land", "workspace", in.Workspace); err != nil {
				return nil, nil, err
			}
			return r.jsonTool(ctx, cliArgs([]string{"land"}, nil, in.Workspace)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "resolve", Description: "Resolve recorded conflicts: take a side, or the workspace's current content."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpResolveIn) (*mcp.CallToolResult, any, error) {
			if err := mcpName("resolve", "workspace", in.Workspace); err != nil {
				return nil, nil, err
			}
			for _, p := range in.Paths {
				if err := mcpPath("resolve", "paths", p); err != nil {
					return nil, nil, err
				}
			}
			var flags []string
			if in.All {
				flags = append(flags, "--all")
			}
			switch in.Side {
			case "":
			case "ours", "theirs", "base":
				flags = append(flags, "--"+in.Side)
			default:
				return nil, nil, fmt.Errorf("resolve: side %q: want ours, theirs or base", in.Side)
			}
			if in.Force {
				flags = append(flags, "--force")
			}
			return r.jsonTool(ctx, cliArgs([]string{"resolve"}, flags, append([]string{in.Workspace}, in.Paths...)...)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "git_publish", Description: "Publish a workspace bound to a git branch: its commits on the branch, and its uncommitted changes as one commit, become the branch's value (compare-and-swap); refused (exit 3) when the branch moved meanwhile: git_pull first."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpPublishIn) (*mcp.CallToolResult, any, error) {
			if err := errors.Join(mcpName("git_publish", "workspace", in.Workspace), mcpText("git_publish", "message", in.Message, mcpMaxText)); err != nil {
				return nil, nil, err
			}
			var flags []string
			if in.Message != "" {
				flags = append(flags, "--message="+in.Message)
			}
			return r.jsonTool(ctx, cliArgs([]string{"git", "publish"}, flags, in.Workspace)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "git_pull", Description: "Merge what a bound workspace's git branch received since they last agreed into the workspace (git-aware; queued while a session runs in its mount)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpWorkspaceIn) (*mcp.CallToolResult, any, error) {
			if err := mcpName("git_pull", "workspace", in.Workspace); err != nil {
				return nil, nil, err
			}
			return r.jsonTool(ctx, cliArgs([]string{"git", "pull"}, nil, in.Workspace)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "status", Description: "Every workspace: mounts, leases and who holds them, conflicts."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ mcpNone) (*mcp.CallToolResult, any, error) {
			return r.jsonTool(ctx, cliArgs([]string{"status"}, nil)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "list", Description: "The workspaces with their parents and heads."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ mcpNone) (*mcp.CallToolResult, any, error) {
			return r.jsonTool(ctx, cliArgs([]string{"list"}, nil)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "log", Description: "A workspace's generations, newest first."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpLogIn) (*mcp.CallToolResult, any, error) {
			if err := errors.Join(mcpName("log", "workspace", in.Workspace), mcpCount("log", in.N)); err != nil {
				return nil, nil, err
			}
			var flags []string
			if in.N > 0 {
				flags = append(flags, "--number="+strconv.Itoa(in.N))
			}
			return r.jsonTool(ctx, cliArgs([]string{"log"}, flags, in.Workspace)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sessions", Description: "A workspace's session log, newest first: each lease (tool session or exec) with its leader's command line, outcome, generation and the paths it changed."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpSessionsIn) (*mcp.CallToolResult, any, error) {
			if err := errors.Join(mcpName("sessions", "workspace", in.Workspace), mcpCount("sessions", in.N)); err != nil {
				return nil, nil, err
			}
			var flags []string
			if in.N > 0 {
				flags = append(flags, "--number="+strconv.Itoa(in.N))
			}
			if in.Ancestors {
				flags = append(flags, "--ancestors")
			}
			return r.jsonTool(ctx, cliArgs([]string{"sessions"}, flags, in.Workspace)...)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "blame", Description: "The generations and sessions that changed a path of a workspace, newest first, with the command that wrote it."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpBlameIn) (*mcp.CallToolResult, any, error) {
			if err := errors.Join(mcpName("blame", "workspace", in.Workspace), mcpPath("blame", "path", in.Path)); err != nil {
				return nil, nil, err
			}
			var flags []string
			if in.Ancestors {
				flags = append(flags, "--ancestors")
			}
			return r.jsonTool(ctx, cliArgs([]string{"blame"}, flags, in.Workspace, in.Path)...)
		})
	return s
}
