package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/acyclicfs/acyclicfs/daemon"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// app is one invocation of the CLI: its flags, its output streams, and how
// it reaches the store (opened directly, or the daemon's open Manager when
// the daemon runs the command on the client's behalf).
type app struct {
	// initing lets manager() make the store of a node on etcd that its
	// prefix does not hold yet (init).
	initing   bool
	storeFlag string
	jsonOut   bool
	quiet     bool
	verbose   bool

	stdin          io.Reader
	stdout, stderr io.Writer
	stderrTTY      bool
	cwd            string // the client's working directory (relative paths)
	// gitEnv is the client's git identity variables (clientGitEnv), for
	// git run on its behalf; in the client itself they are inherited.
	gitEnv []string

	// mgr is set when running inside the daemon.
	mgr *workspace.Manager
	// inDaemon is true when the daemon executes a forwarded command.
	inDaemon bool
	// owned is a manager this invocation opened and must close.
	owned *workspace.Manager
	// daemon hooks (nil outside the daemon)
	d *daemon.Daemon
	// bar shows import/export progress on a terminal (nil otherwise).
	bar *progressBar
}

// storeDir resolves --store, $ACYCLICFS_STORE, $XDG_DATA_HOME/acyclicfs,
// ~/.local/share/acyclicfs — in that order.
func (a *app) storeDir() (string, error) {
	dir := a.storeFlag
	if dir == "" {
		dir = os.Getenv("ACYCLICFS_STORE")
	}
	if dir == "" {
		if x := os.Getenv("XDG_DATA_HOME"); x != "" {
			dir = filepath.Join(x, "acyclicfs")
		}
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the store: %w (set --store or $ACYCLICFS_STORE)", err)
		}
		dir = filepath.Join(home, ".local", "share", "acyclicfs")
	}
	return a.abs(dir), nil
}

// abs makes p absolute relative to the client's working directory.
func (a *app) abs(p string) string {
	if filepath.IsAbs(p) || p == "" {
		return filepath.Clean(p)
	}
	return filepath.Join(a.cwd, p)
}

// mountpath is abs with symlinks in the parent directories resolved, so
// that one mountpoint has one name however it is spelled. The last element
// is not resolved: stat of a live or dead mountpoint would go to FUSE.
func (a *app) mountpath(p string) string {
	p = a.abs(p)
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		return filepath.Join(dir, filepath.Base(p))
	}
	return p
}

// manager returns the open workspace manager, opening the store if needed.
func (a *app) manager() (*workspace.Manager, error) {
	if a.mgr != nil {
		return a.mgr, nil
	}
	dir, err := a.storeDir()
	if err != nil {
		return nil, err
	}
	a.bar = a.progress()
	m, err := workspace.Open(dir, workspace.Options{Warn: a.warn, Progress: a.bar.update, Init: a.initing})
	if err != nil {
		return nil, err
	}
	a.mgr, a.owned = m, m
	return m, nil
}

func (a *app) close() {
	a.bar.done()
	if a.owned != nil {
		a.owned.Close()
		a.owned, a.mgr = nil, nil
	}
}

func (a *app) warn(msg string) {
	a.bar.done()
	if !a.quiet {
		fmt.Fprintf(a.stderr, "warning: %s\n", msg)
	}
}

func (a *app) info(format string, args ...any) {
	if a.verbose {
		fmt.Fprintf(a.stderr, format+"\n", args...)
	}
}

// emit prints v as JSON with --json, else calls text.
func (a *app) emit(v any, text func(w io.Writer)) error {
	a.bar.done()
	if a.jsonOut {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	text(a.stdout)
	return nil
}

// args validators that produce usage errors (exit 2).
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s: expected %s, got %d argument(s)", cmd.Name(), names, len(args))}
		}
		return nil
	}
}

func rangeArgs(lo, hi int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageError{fmt.Errorf("%s: expected %s, got %d argument(s)", cmd.Name(), names, len(args))}
		}
		return nil
	}
}

var errNoDaemon = errors.New("daemon is not running")

// errDaemonGone: a MOUNTPOINT argument names a mount whose daemon died.
var errDaemonGone = fmt.Errorf("%w: the daemon that served this mount is gone", errNoDaemon)

// errNotAMount: a MOUNTPOINT argument names no mount of this store.
var errNotAMount = errors.New("not an acyclicfs mount of this store")

// daemonConfig is how the daemon runs forwarded commands: each in an app
// of its own on the daemon's open store, canceled when its client goes
// (the user interrupted it).
func (a *app) daemonConfig(exitWhenIdle bool) daemon.Config {
	return daemon.Config{ExitWhenIdle: exitWhenIdle, Kind: commandKind,
		Exec: func(ctx context.Context, d *daemon.Daemon, req daemon.RunRequest) daemon.RunResponse {
			var out, errb bytes.Buffer
			fa := &app{stdout: &out, stderr: &errb, stdin: bytes.NewReader(nil), cwd: req.Cwd,
				mgr: d.Manager(), inDaemon: true, d: d, gitEnv: req.GitEnv}
			code := fa.execute(ctx, req.Args)
			return daemon.RunResponse{Stdout: out.Bytes(), Stderr: errb.Bytes(), Code: code}
		}}
}

// commandKind is how the daemon treats the command line args.
func commandKind(args []string) daemon.Kind {
	switch scanArgs(args).command() {
	case "gc":
		return daemon.KindGC
	case "mount", "unmount", "context":
		return daemon.KindMountChange
	case "shutdown":
		return daemon.KindShutdown
	}
	return daemon.KindOther
}
