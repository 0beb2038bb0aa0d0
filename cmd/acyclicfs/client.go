package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/acyclicfs/acyclicfs/daemon"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// The CLI talks to the per-store daemon over STORE/daemon.sock with
// HTTP+JSON. Every command except `daemon` and `exec` is forwarded whole:
// the daemon runs the same command tree against its open store and returns
// what it printed and its exit code. Commands therefore behave identically
// with or without a daemon.

// localOnly commands never forward.
var localOnly = map[string]bool{"daemon": true, "exec": true, "run": true, "help": true, "completion": true, "mcp": true, "fsmonitor": true}

// forward runs args in the daemon if one serves the store.
func (a *app) forward(ctx context.Context, args []string) (int, bool) {
	line := scanArgs(args)
	cmd := line.command()
	if cmd == "" || localOnly[cmd] {
		return 0, false
	}
	a.storeFlag = line.store
	if cmd == "init" && line.word(1) != "" && line.store == "" {
		a.storeFlag = line.word(1) // init STORE: that store's daemon
	}
	dir, err := a.storeDir()
	if err != nil {
		return 0, false
	}
	c := newClient(dir)
	// A daemon killed while a thread of it waited on its own mount cannot
	// exit: it holds the store, never answers (the ping would wait for
	// its timeout), and its mounts hang every process touching them until
	// its FUSE connections are aborted. Every command checks (a flock
	// attempt and a look at the holder's threads in /proc: some 100 µs),
	// does it and says so.
	notes, err := daemon.ReapDead(dir)
	for _, n := range notes {
		fmt.Fprintf(a.stderr, "acyclicfs: %s\n", n)
	}
	if err != nil {
		reportError(a.stderr, fmt.Errorf("%s: %w", cmd, err))
		return exitError, true
	}
	if !c.alive() {
		if startsDaemon(line) {
			if err := startDaemon(dir, a.stderr); err != nil {
				err = fmt.Errorf("%s: start daemon: %w", cmd, err)
				reportError(a.stderr, err)
				return exitCode(err), true
			}
		} else {
			return 0, false
		}
	}
	req := daemon.RunRequest{Args: args, Cwd: a.cwd, StderrTTY: a.stderrTTY, ClientPID: os.Getpid(), GitEnv: clientGitEnv()}
	resp, reaped, err := c.runWatched(ctx, req)
	for _, n := range reaped {
		fmt.Fprintf(a.stderr, "acyclicfs: %s\n", n)
	}
	if err != nil && len(reaped) > 0 {
		reportError(a.stderr, fmt.Errorf("%s: the daemon was killed while it ran the command: %w", cmd, err))
		return exitError, true
	}
	if err != nil && (isGone(err) || errors.Is(err, errDaemonExiting) || (isReset(err) && c.socketGone())) {
		// The daemon exited, or is exiting, between the ping and the call
		// (it stops after its last unmount): the store is ours again, or
		// the next daemon's.
		if !startsDaemon(line) {
			return 0, false
		}
		if err := startDaemon(dir, a.stderr); err != nil {
			err = fmt.Errorf("%s: start daemon: %w", cmd, err)
			reportError(a.stderr, err)
			return exitCode(err), true
		}
		resp, reaped, err = c.runWatched(ctx, req)
		for _, n := range reaped {
			fmt.Fprintf(a.stderr, "acyclicfs: %s\n", n)
		}
	}
	if err != nil && ctx.Err() != nil {
		// Interrupted: the connection closed, which cancels the command
		// in the daemon.
		reportError(a.stderr, fmt.Errorf("%s: interrupted: %w", cmd, context.Cause(ctx)))
		return exitError, true
	}
	if err != nil {
		reportError(a.stderr, fmt.Errorf("%s: daemon unreachable: %w", cmd, err))
		return exitError, true
	}
	a.stdout.Write(resp.Stdout)
	a.stderr.Write(resp.Stderr)
	return resp.Code, true
}

// errDaemonExiting: the daemon refused the command because it is exiting.
var errDaemonExiting = errors.New("daemon is exiting")

type client struct {
	dir  string
	http *http.Client
}

func newClient(storeDir string) *client {
	sock := filepath.Join(storeDir, daemon.SocketName)
	return &client{dir: storeDir, http: &http.Client{Transport: &http.Transport{
		// A fresh connection per call: a daemon that is exiting refuses it
		// (and the CLI runs the command itself) instead of resetting a
		// reused idle connection mid-request.
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
}

// alive reports whether a daemon answers on the socket.
func (c *client) alive() bool {
	if _, err := os.Stat(filepath.Join(c.dir, daemon.SocketName)); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://acyclicfs/ping", nil)
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// run forwards r; canceling ctx closes the connection, which cancels the
// command in the daemon.
func (c *client) run(ctx context.Context, r daemon.RunRequest) (daemon.RunResponse, error) {
	var out daemon.RunResponse
	err := c.call(ctx, "/run", r, &out)
	return out, err
}

// reapEvery is how often a client waiting for the daemon's answer checks
// that the daemon is not dying (a process being killed has no event a
// non-parent can wait on before it has exited, which this one cannot).
const reapEvery = time.Second

// runWatched is run, watching the daemon meanwhile: killed while a
// thread of it waits on its own mount, it can never exit nor answer
// (daemon.ReapDead), and the call would wait forever. The watcher aborts
// its connections, so that the call fails, and returns what it did.
func (c *client) runWatched(ctx context.Context, r daemon.RunRequest) (daemon.RunResponse, []string, error) {
	done := make(chan struct{})
	var reaped []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(reapEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if notes, _ := daemon.ReapDead(c.dir); len(notes) > 0 {
				reaped = notes // an error leaves the call waiting: tried again
				return
			}
		}
	}()
	resp, err := c.run(ctx, r)
	close(done)
	wg.Wait()
	return resp, reaped, err
}

func (c *client) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://acyclicfs"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return &noResponseError{err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		return errDaemonExiting
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("daemon: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, out)
}

// startDaemon launches `acyclicfs --store DIR daemon` detached in its own
// session and waits until it signals readiness on a pipe (or dies). The
// notes it writes first (daemon.ReadyNote) go to stderr.
func startDaemon(storeDir string, stderr io.Writer) error {
	// Before the directory or the daemon's log is made: never among a
	// user's files.
	if err := workspace.CheckStoreDir(storeDir); err != nil {
		return err
	}
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return fmt.Errorf("create store %s: %w", storeDir, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(storeDir, daemon.LogName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("daemon log: %w", err)
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		pw.Close()
		return err
	}
	defer devnull.Close()
	cmd := exec.Command(exe, "--store", storeDir, "daemon", "--ready-fd", "3", "--exit-when-idle")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("start daemon: %w", err)
	}
	pw.Close()
	go cmd.Wait() //nolint:errcheck // reaped; the daemon outlives us normally
	pr.SetReadDeadline(time.Now().Add(30 * time.Second))
	// The daemon writes "ready\n" and closes, or writes its error and exits.
	buf, err := io.ReadAll(io.LimitReader(pr, 64<<10))
	for {
		line, rest, ok := bytes.Cut(buf, []byte("\n"))
		note, isNote := bytes.CutPrefix(line, []byte(daemon.ReadyNote))
		if !ok || !isNote {
			break
		}
		fmt.Fprintf(stderr, "acyclicfs: %s\n", note)
		buf = rest
	}
	if string(buf) == "ready\n" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("daemon did not become ready: %w (see %s)", err, filepath.Join(storeDir, daemon.LogName))
	}
	msg := string(bytes.TrimSpace(buf))
	if msg == "" {
		msg = "it exited"
	}
	return fmt.Errorf("daemon failed to start: %s (see %s)", msg, filepath.Join(storeDir, daemon.LogName))
}

// noResponseError: a call failed before any response arrived (connect,
// send, or the connection closed before a status line).
type noResponseError struct{ err error }

func (e *noResponseError) Error() string { return e.err.Error() }
func (e *noResponseError) Unwrap() error { return e.err }

// isReset reports whether err means no response came for the call.
func isReset(err error) bool {
	var nr *noResponseError
	return errors.As(err, &nr)
}

// socketGone reports whether the daemon's socket file is gone: the daemon
// unlinked it to exit. An exiting daemon refuses every command (503) and
// resets only connections it never accepted, so a reset command then did
// not run, and running it again is safe. A daemon killed mid-command
// leaves its socket behind: that error is reported.
func (c *client) socketGone() bool {
	_, err := os.Stat(filepath.Join(c.dir, daemon.SocketName))
	return errors.Is(err, fs.ErrNotExist)
}

// isGone reports whether err means nobody listens on the socket anymore.
func isGone(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}
