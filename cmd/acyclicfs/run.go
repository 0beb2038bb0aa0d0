package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/workspace"
)

// The environment of `run`: ACYCLICFS_RUN names the workspace inside a run
// (and refuses a run inside it), ACYCLICFS_RUN_MOUNT its private mountpoint
// (what `lease begin`, `exec` and `lease harness --mount` take inside); the
// others pass the set-up to the child side of run (runChild), which is this
// binary started again.
const (
	envRun      = "ACYCLICFS_RUN"
	envRunChild = "ACYCLICFS_RUN_CHILD"
	envRunMount = "ACYCLICFS_RUN_MOUNT"
	envRunDir   = "ACYCLICFS_RUN_DIR"
	envRunCwd   = "ACYCLICFS_RUN_CWD"
)

type runFlags struct {
	forkOf, name, at string
	land, keep       bool
}

// cmdRun is `run [WS | --fork-of WS] [--name NAME] [--at DIR] [--land | --keep] -- CMD…`.
func (a *app) cmdRun() *cobra.Command {
	var fl runFlags
	c := &cobra.Command{
		Use:   "run [WS | --fork-of PARENT] [--name NAME] [--at DIR] [--land | --keep] -- CMD [ARG...]",
		Short: "Give a command (an agent's harness) its own fork, seen at the project's own path",
		Long: `Fork PARENT (or use the workspace WS), mount it, and run CMD as a harness
whose view of DIR (--at; default: the current directory) is the fork: CMD and
its children run in a private mount namespace where the mount is bound over DIR,
so paths, caches and configs that name DIR point into the fork, while every
other process still sees the original. CMD holds no lease itself; each process
tree it starts (a tool call) is one lease (see 'lease harness').

Standard streams, the terminal and signals pass through. When CMD exits, run
prints a summary on stderr (what changed, conflicts, the command that lands it),
unmounts (unless --keep) and exits with CMD's status; --land lands the
workspace after CMD exits 0. Without root, run uses a user namespace; a kernel
that refuses one is a clear error. Inside, ACYCLICFS_RUN names the workspace
and ACYCLICFS_RUN_MOUNT its private mountpoint (for 'lease begin', hooks). A
run inside a run is refused.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash < 0 || dash == len(args) {
				return usageError{errors.New("run: the command to run goes after --: run --fork-of main -- CMD [ARG...]")}
			}
			if dash > 1 {
				return usageError{fmt.Errorf("run: one workspace before --, got %q", args[:dash])}
			}
			ws := ""
			if dash == 1 {
				ws = args[0]
			}
			return a.runHarness(cmd.Context(), fl, ws, args[dash:])
		},
	}
	f := c.Flags()
	f.StringVar(&fl.forkOf, "fork-of", "", "fork this workspace for the run")
	f.StringVar(&fl.name, "name", "", "the fork's name (default PARENT-run-N)")
	f.StringVar(&fl.at, "at", "", "the directory CMD sees the fork at (default: the current directory)")
	f.BoolVar(&fl.land, "land", false, "land the workspace into its parent after CMD exits 0")
	f.BoolVar(&fl.keep, "keep", false, "keep the workspace mounted after CMD exits (its private mountpoint is printed)")
	return c
}

// sub runs one CLI command of this store in this process (through the
// daemon when it runs) and returns its stdout; a failure carries its
// message and exit code.
func (a *app) sub(ctx context.Context, dir string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"--store", dir}, args...), nil, &out, &errb)
	if code != exitOK {
		msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(errb.String()), "acyclicfs: "))
		return out.String(), exitMessage{code: code, msg: msg}
	}
	return out.String(), nil
}

// exitMessage is a sub-command's failure: its message, printed once, and
// its exit code.
type exitMessage struct {
	code int
	msg  string
}

func (e exitMessage) Error() string { return e.msg }

func (a *app) runHarness(ctx context.Context, fl runFlags, ws string, argv []string) error {
	if in := os.Getenv(envRun); in != "" {
		return usageError{fmt.Errorf("run: already inside 'acyclicfs run' (workspace %s): a run inside a run is refused; use the tools directly, they already see the fork", in)}
	}
	switch {
	case fl.land && fl.keep:
		return usageError{errors.New("run: --land and --keep exclude each other (--land unmounts to land)")}
	case ws != "" && fl.forkOf != "":
		return usageError{errors.New("run: give a workspace or --fork-of, not both")}
	case ws == "" && fl.forkOf == "":
		return usageError{errors.New("run: which workspace? name one (run WS -- CMD) or fork one (run --fork-of PARENT -- CMD)")}
	case ws != "" && fl.name != "":
		return usageError{errors.New("run: --name names a new fork; it goes with --fork-of")}
	}
	dir, err := a.storeDir()
	if err != nil {
		return err
	}
	at := a.cwd
	if fl.at != "" {
		if err := pathArg("run: --at", fl.at); err != nil {
			return err
		}
		at = a.abs(fl.at)
	}
	if fi, err := os.Stat(at); err != nil || !fi.IsDir() {
		return usageError{fmt.Errorf("run: --at %s: not a directory", at)}
	}
	if at, err = filepath.EvalSymlinks(at); err != nil {
		return usageError{fmt.Errorf("run: --at: %w", err)}
	}
	if inside(at, dir) || inside(dir, at) {
		return usageError{fmt.Errorf("run: %s holds or lies in the store %s", at, dir)}
	}

	// The workspace: a new fork, or the one named.
	if fl.forkOf != "" {
		if err := workspace.ValidateName(fl.forkOf); err != nil {
			return usageError{fmt.Errorf("run: --fork-of: %w", err)}
		}
		name := fl.name
		if name == "" {
			if name, err = a.freeRunName(ctx, dir, fl.forkOf); err != nil {
				return err
			}
		} else if err := workspace.ValidateName(name); err != nil {
			return usageError{fmt.Errorf("run: --name: %w", err)}
		}
		if _, err := a.sub(ctx, dir, "fork", "--", fl.forkOf, name); err != nil {
			return a.subFailed("fork", err)
		}
		ws = name
	} else if err := workspace.ValidateName(ws); err != nil {
		return usageError{fmt.Errorf("run: %w", err)}
	}

	// Its mount, at a private mountpoint only run's namespace shows at DIR.
	mp, err := os.MkdirTemp("", "acyclicfs-run-"+ws+"-")
	if err != nil {
		return fmt.Errorf("run: mountpoint: %w", err)
	}
	if _, err := a.sub(ctx, dir, "mount", "--", ws, mp); err != nil {
		os.Remove(mp)
		return a.subFailed("mount", err)
	}
	unmounted := false
	defer func() {
		if !unmounted && !fl.keep {
			// Whatever went wrong, the mount does not outlive run.
			if _, err := a.sub(context.WithoutCancel(ctx), dir, "unmount", "--lazy", "--", mp); err == nil {
				os.Remove(mp)
			}
		}
	}()

	code, err := a.runChildProcess(ctx, dir, ws, mp, at, argv)
	if err != nil {
		return err
	}
	// A Ctrl-C at the terminal was CMD's (it reached CMD directly), not an
	// order to skip what follows: the capture, the summary and --land run
	// to their end whatever interrupted CMD.
	ctx = context.WithoutCancel(ctx)

	// The summary: what CMD's run changed, what to do with it.
	if !fl.keep {
		out, uerr := a.sub(ctx, dir, "unmount", "--", mp)
		if uerr != nil {
			var em exitMessage
			if errors.As(uerr, &em) && em.code == exitBusy {
				fmt.Fprintf(a.stderr, "acyclicfs run: processes CMD left behind still use %s; detaching it: %s\n", ws, em.msg)
				_, uerr = a.sub(ctx, dir, "unmount", "--lazy", "--", mp)
			}
		} else {
			a.summaryOutcome(ws, strings.TrimSpace(out))
		}
		if uerr == nil {
			unmounted = true
			os.Remove(mp)
		} else {
			fmt.Fprintf(a.stderr, "acyclicfs run: unmount %s: %v\n", mp, uerr)
		}
	}
	a.printRunSummary(ctx, dir, ws, code, fl)
	if fl.land && code == 0 {
		out, err := a.sub(ctx, dir, "land", "--", ws)
		if err != nil {
			return a.subFailed("land", err)
		}
		fmt.Fprintf(a.stderr, "acyclicfs run: landed %s: %s\n", ws, strings.TrimSpace(out))
	}
	if fl.keep {
		fmt.Fprintf(a.stderr, "acyclicfs run: %s stays mounted at %s ('acyclicfs unmount %s' when done)\n", ws, mp, mp)
	}
	return exitWith(code)
}

// subFailed reports a sub-command's failure as run's own, with its code.
func (a *app) subFailed(what string, err error) error {
	var em exitMessage
	if errors.As(err, &em) {
		fmt.Fprintf(a.stderr, "acyclicfs: run: %s: %s\n", what, em.msg)
		return exitWith(em.code)
	}
	return fmt.Errorf("run: %s: %w", what, err)
}

func (a *app) summaryOutcome(ws, outcome string) {
	if outcome != "" && outcome != "current" {
		fmt.Fprintf(a.stderr, "acyclicfs run: %s's last capture: %s\n", ws, outcome)
	}
}

// freeRunName is PARENT-run-N for the first N no workspace has.
func (a *app) freeRunName(ctx context.Context, dir, parent string) (string, error) {
	out, err := a.sub(ctx, dir, "--json", "list")
	if err != nil {
		return "", a.subFailed("list", err)
	}
	var list []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return "", fmt.Errorf("run: list: %w", err)
	}
	taken := map[string]bool{}
	for _, w := range list {
		taken[w.Name] = true
	}
	for n := 1; ; n++ {
		name := fmt.Sprintf("%s-run-%d", parent, n)
		if len(name) > 200 {
			return "", usageError{fmt.Errorf("run: --fork-of %s: name the fork with --name", parent)}
		}
		if !taken[name] {
			return name, nil
		}
	}
}

// printRunSummary says on stderr what the run changed and how to land it.
func (a *app) printRunSummary(ctx context.Context, dir, ws string, code int, fl runFlags) {
	w := a.stderr
	fmt.Fprintf(w, "acyclicfs run: the command exited %d; workspace %s\n", code, ws)
	if out, err := a.sub(ctx, dir, "diff", "--stat", "--", ws); err == nil {
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if out == "" {
			lines = nil
		}
		fmt.Fprintf(w, "  changed: %d path(s)\n", len(lines))
		for i, l := range lines {
			if i == 20 {
				fmt.Fprintf(w, "    … %d more: acyclicfs diff %s --stat\n", len(lines)-20, ws)
				break
			}
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	if out, err := a.sub(ctx, dir, "--json", "status", "--", ws); err == nil && strings.Contains(out, `"conflicts":`) {
		fmt.Fprintf(w, "  conflicts recorded: 'acyclicfs status %s' lists them, 'acyclicfs resolve' settles them\n", ws)
	}
	if !fl.land || code != 0 {
		fmt.Fprintf(w, "  land it: acyclicfs land %s\n", ws)
	}
}

// runChildProcess starts CMD as run's child (this binary again, which
// binds the mount over DIR in a new mount namespace and becomes CMD),
// declares it the mount's harness before CMD runs, and waits for it,
// passing signals on. It returns CMD's exit status.
func (a *app) runChildProcess(ctx context.Context, dir, ws, mp, at string, argv []string) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	child := exec.Command(self, argv...)
	child.Env = append(os.Environ(), envRunChild+"=1", envRunMount+"="+mp, envRunDir+"="+at, envRunCwd+"="+a.cwd, envRun+"="+ws)
	child.Stdin, child.Stdout, child.Stderr = a.stdin, a.stdout, a.stderr
	if f, ok := a.stdin.(*os.File); ok {
		child.Stdin = f
	}
	child.ExtraFiles = []*os.File{pr}
	child.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if os.Geteuid() != 0 {
		// A user namespace in which this user may mount: the same user
		// and group inside, nothing else mapped (so CMD and its files keep
		// their ids). A user that is not root in the namespace loses its
		// capabilities at exec, so the child keeps CAP_SYS_ADMIN (of this
		// namespace only) as an ambient capability for its two mounts, and
		// drops it before it becomes CMD.
		child.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}},
			GidMappingsEnableSetgroups: false,
			AmbientCaps:                []uintptr{unix.CAP_SYS_ADMIN},
		}
	}
	if err := child.Start(); err != nil {
		pr.Close()
		pw.Close()
		return 0, fmt.Errorf("run: start %s in a private mount namespace (the kernel refused it; without root, user namespaces must be enabled: sysctl user.max_user_namespaces): %w", argv[0], err)
	}
	pr.Close()
	if _, err := a.sub(ctx, dir, "lease", "harness", strconv.Itoa(child.Process.Pid), "--mount", mp); err != nil {
		pw.Close() // the child sees no "go" and exits
		child.Wait()
		return 0, a.subFailed("lease harness", err)
	}
	pw.Write([]byte("go"))
	pw.Close()

	// CMD shares run's process group, so a terminal's Ctrl-C and Ctrl-\
	// reach it directly: run only stays alive for the summary. SIGTERM
	// and SIGHUP sent to run by pid are passed on.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	waited := make(chan error, 1)
	go func() { waited <- child.Wait() }()
	for {
		select {
		case err := <-waited:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return 0, nil
			case errors.As(err, &ee):
				code := ee.ExitCode()
				if code < 0 {
					code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
				}
				return code, nil
			default:
				return 0, fmt.Errorf("run: %w", err)
			}
		case s := <-sigs:
			if s == syscall.SIGTERM || s == syscall.SIGHUP {
				_ = child.Process.Signal(s)
			}
		}
	}
}

// runChild is the child side of run, in its new mount namespace: wait for
// the harness declaration, bind the mount over DIR (this namespace only),
// enter the caller's working directory again (now the fork's), and become
// CMD. It returns only on failure, with the exit status to use.
func runChild(argv []string, stderr io.Writer) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(stderr, "acyclicfs run: "+format+"\n", args...)
		return code
	}
	gate := os.NewFile(3, "gate")
	var g [2]byte
	if _, err := io.ReadFull(gate, g[:]); err != nil || string(g[:]) != "go" {
		return 127 // run could not declare the harness; it says why
	}
	gate.Close()
	mp, at, cwd := os.Getenv(envRunMount), os.Getenv(envRunDir), os.Getenv(envRunCwd)
	// Nothing done here propagates back to the namespace run came from.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SLAVE, ""); err != nil {
		return fail(126, "make the mount namespace private: %v", err)
	}
	if err := syscall.Mount(mp, at, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fail(126, "bind %s over %s: %v", mp, at, err)
	}
	if err := os.Chdir(cwd); err != nil {
		if err := os.Chdir(at); err != nil {
			return fail(126, "enter %s: %v", at, err)
		}
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case envRunChild, envRunDir, envRunCwd: // envRunMount stays: CMD's hooks use it (lease begin)
			continue
		case "PWD":
			if wd, err := os.Getwd(); err == nil {
				kv = "PWD=" + wd
			}
		}
		env = append(env, kv)
	}
	if os.Geteuid() != 0 {
		// In run's user namespace: CMD runs without the capability the
		// mounts needed.
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
			return fail(126, "drop the namespace's capabilities: %v", err)
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fail(127, "%s: command not found", argv[0])
	}
	err = syscall.Exec(path, argv, env)
	return fail(126, "%s: %v", argv[0], err)
}

// inside says whether p is dir or lies under it.
func inside(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
