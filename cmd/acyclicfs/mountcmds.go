package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/acyclicfs/acyclicfs/daemon"
	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/workspace"
)

func (a *app) addMountCommands(root *cobra.Command) {
	root.AddCommand(a.cmdMount(), a.cmdUnmount(), a.cmdExec(), a.cmdLease(), a.cmdDaemon(), a.cmdShutdown())
}

// needDaemon fails a command that only the daemon can run.
func (a *app) needDaemon(what string) error {
	if a.d == nil {
		return fmt.Errorf("%s: %w (no mount of this store is being served)", what, errNoDaemon)
	}
	return nil
}

func (a *app) cmdMount() *cobra.Command {
	var opt mountFlags
	var ttl, idle time.Duration
	var by string
	var foreground bool
	c := &cobra.Command{
		Use:   "mount NAME [MOUNTPOINT] [--foreground] [--allow-other] [--lease-ttl DUR]",
		Short: "Mount a workspace (an in-place one over its own directory); returns once the mount is ready",
		Args:  rangeArgs(1, 2, "NAME [MOUNTPOINT]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := workspace.ValidateName(args[0]); err != nil {
				return fmt.Errorf("mount %s: %w", args[0], err)
			}
			if len(args) == 2 {
				if err := pathArg("mount: MOUNTPOINT", args[1]); err != nil {
					return err
				}
			} else {
				m, err := a.manager()
				if err != nil {
					return err
				}
				info, ok, err := m.InPlace(args[0])
				if err != nil {
					return fmt.Errorf("mount %s: %w", args[0], err)
				}
				if !ok {
					return usageError{fmt.Errorf("mount %s: MOUNTPOINT is required (only an in-place workspace mounts over its own directory)", args[0])}
				}
				args = append(args, info.Dir)
			}
			b, err := sessions.ParseBy(by)
			if err != nil {
				return usageError{fmt.Errorf("mount: --lease-by: %w", err)}
			}
			if ttl < 100*time.Millisecond {
				return usageError{fmt.Errorf("mount: --lease-ttl must be at least 100ms")}
			}
			if idle < 0 {
				return usageError{fmt.Errorf("mount: --idle-close must not be negative")}
			}
			if opt.WarmEntries < 0 {
				return usageError{fmt.Errorf("mount: --warm-entries must not be negative")}
			}
			opt.WarmDefault = !cmd.Flags().Changed("warm-entries") && !opt.waitWarm
			if err := checkTransport(cmd.Flags(), &opt); err != nil {
				return usageError{fmt.Errorf("mount: %w", err)}
			}
			opt.LeaseTTL, opt.LeaseBy, opt.IdleClose = ttl, b, idle
			mp := a.mountpath(args[1])
			if err := a.safeTarget("mountpoint", mp, false, false); err != nil {
				return fmt.Errorf("mount %s: %w", args[0], err)
			}
			if a.d == nil {
				if !foreground {
					return fmt.Errorf("mount: %w", errNoDaemon)
				}
				return a.mountForeground(args[0], mp, opt)
			}
			s, notes, err := a.d.MountWorkspace(args[0], mp, opt.MountOptions)
			for _, n := range notes {
				fmt.Fprintf(a.stderr, "recovery: %s\n", n)
			}
			if err != nil {
				return fmt.Errorf("mount %s: %w", args[0], err)
			}
			if opt.waitWarm {
				s.WaitWarm()
			}
			return a.emit(map[string]string{"workspace": args[0], "mountpoint": mp}, func(w io.Writer) { fmt.Fprintln(w, mp) })
		},
	}
	f := c.Flags()
	f.BoolVar(&foreground, "foreground", false, "serve the mount from this process until it is unmounted")
	f.BoolVar(&opt.AllowOther, "allow-other", false, "let other users access the mount")
	f.DurationVar(&ttl, "lease-ttl", 10*time.Second, "lease lifetime without renewal (bounds a crashed daemon's leases)")
	f.StringVar(&by, "lease-by", "sid", "lease owner key: sid, pgid or pid")
	idleFlag(f, &idle)
	f.BoolVar(&opt.Debug, "debug", false, "log every FUSE request to the daemon log")
	transportFlag(f, &opt)
	f.BoolVar(&opt.Xattrs, "xattrs", false, "serve user xattrs (off by default: with them the kernel asks for security.capability before every write)")
	warmFlag(f, &opt)
	f.BoolVar(&opt.NoFSMonitor, "no-fsmonitor", false,
		"do not set git's fsmonitor hook in a repository at the mount's root (and remove it where an earlier mount set it)")
	attributionFlag(f, &opt)
	return c
}

// defaultIdleClose is --idle-close's default (docs/windows.md "Idle
// sessions" weighs it).
const defaultIdleClose = time.Second

// idleFlag defines --idle-close.
func idleFlag(f *pflag.FlagSet, idle *time.Duration) {
	f.DurationVar(idle, "idle-close", defaultIdleClose,
		"end a lease after this long with no request when its processes have no open file or mapping in the mount, and no cwd in it unless they wait for input (0: off)")
}

// attributionFlag defines --no-attribution.
func attributionFlag(f *pflag.FlagSet, opt *mountFlags) {
	f.BoolVar(&opt.NoAttribution, "no-attribution", false,
		"record no writers: captures get no attribution record (blame says \"not recorded\"), session entries name no paths")
}

// mountFlags are mount's and context mount's flags: the daemon's mount
// options, and whether the command waits for the warm-up.
type mountFlags struct {
	daemon.MountOptions
	// waitWarm: the mount command returns once the warm-up has ended.
	waitWarm bool
}

// transportFlag defines --transport and its shorthand --uring.
func transportFlag(f *pflag.FlagSet, opt *mountFlags) {
	f.StringVar(&opt.Transport, "transport", daemon.TransportAuto,
		"how the kernel's requests reach the daemon: auto (io_uring where the kernel offers it, else /dev/fuse), io_uring (fail where it is not offered: Linux 6.14+, fuse module parameter enable_uring=1) or dev-fuse")
	f.Bool("uring", false, "same as --transport io_uring")
}

// checkTransport validates --transport and folds --uring into it.
func checkTransport(f *pflag.FlagSet, opt *mountFlags) error {
	switch opt.Transport {
	case daemon.TransportAuto, daemon.TransportUring, daemon.TransportDevice:
	default:
		return fmt.Errorf("--transport: %q is not one of auto, io_uring, dev-fuse", opt.Transport)
	}
	if uring, _ := f.GetBool("uring"); uring {
		if f.Changed("transport") && opt.Transport != daemon.TransportUring {
			return fmt.Errorf("--uring contradicts --transport %s", opt.Transport)
		}
		opt.Transport = daemon.TransportUring
	}
	return nil
}

// defaultWarmEntries bounds the warm-up of a mount: the Go distribution's
// src tree (13,000 names) and most checkouts fit; the kernel and the daemon
// keep an inode for each name listed until memory pressure evicts it.
const defaultWarmEntries = 50000

// warmFlag defines --warm-entries and --wait-warm.
func warmFlag(f *pflag.FlagSet, opt *mountFlags) {
	f.IntVar(&opt.WarmEntries, "warm-entries", defaultWarmEntries,
		"after mounting, list up to this many names in the background so that the kernel caches them before tools ask (0: off)")
	f.BoolVar(&opt.waitWarm, "wait-warm", false,
		"return only once the warm-up has ended, so that the first tool finds the names cached")
}

// mountForeground runs a daemon in this process serving one mount.
func (a *app) mountForeground(ws, mp string, opt mountFlags) error {
	dir, err := a.storeDir()
	if err != nil {
		return err
	}
	if newClient(dir).alive() {
		return fmt.Errorf("mount --foreground: %w: a daemon already serves %s; mount without --foreground", workspace.ErrBusy, dir)
	}
	a.close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- daemon.Run(dir, pw, a.daemonConfig(true)) }()
	buf := make([]byte, 256)
	n, _ := pr.Read(buf)
	pr.Close()
	if msg := strings.TrimSpace(string(buf[:n])); msg != "ready" {
		return fmt.Errorf("mount --foreground: %s", msg)
	}
	c := newClient(dir)
	args := []string{"--store", dir, "mount", ws, mp, "--lease-ttl", opt.LeaseTTL.String(), "--lease-by", opt.LeaseBy.String()}
	if opt.AllowOther {
		args = append(args, "--allow-other")
	}
	args = append(args, "--idle-close", opt.IdleClose.String())
	if opt.Xattrs {
		args = append(args, "--xattrs")
	}
	if opt.Debug {
		args = append(args, "--debug")
	}
	args = append(args, "--transport", opt.Transport, "--warm-entries", strconv.Itoa(opt.WarmEntries))
	if opt.waitWarm {
		args = append(args, "--wait-warm")
	}
	if opt.NoFSMonitor {
		args = append(args, "--no-fsmonitor")
	}
	if opt.NoAttribution {
		args = append(args, "--no-attribution")
	}
	resp, err := c.run(context.Background(), daemon.RunRequest{Args: args, Cwd: a.cwd})
	if err != nil {
		return err
	}
	a.stdout.Write(resp.Stdout)
	a.stderr.Write(resp.Stderr)
	if resp.Code != 0 {
		c.run(context.Background(), daemon.RunRequest{Args: []string{"--store", dir, "shutdown"}})
		<-errc
		return exitWith(resp.Code)
	}
	return <-errc
}

// exitWith is an error that only carries an exit code already reported.
type exitCodeError int

func (e exitCodeError) Error() string { return "exit " + strconv.Itoa(int(e)) }

func exitWith(code int) error { return exitCodeError(code) }

func (a *app) cmdUnmount() *cobra.Command {
	var lazy bool
	c := &cobra.Command{
		Use:   "unmount MOUNTPOINT",
		Short: "Finish every lease, capture, reconcile, unmount",
		Long: `Finish every lease, capture, reconcile, unmount.

MOUNTPOINT may also be the name of a mounted workspace. While another
process still uses the mount (its working directory, an open file), unmount
does nothing and exits 4 naming the processes; --lazy ends every lease and
detaches it anyway (what they write afterwards is not captured).`,
		Args: exactArgs(1, "MOUNTPOINT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			mp := a.mountpath(args[0])
			var s *daemon.Mount
			if a.d != nil {
				s = a.d.ByMountpoint(mp)
				if s == nil && !strings.Contains(args[0], "/") {
					s = a.d.Get(args[0]) // a workspace name
				}
			}
			if s == nil {
				// Not served (any more): a mount whose daemon died.
				return a.unmountOffline(mp, args[0])
			}
			res, err := s.Unmount(lazy)
			if err != nil {
				return fmt.Errorf("unmount %s: %w", s.Mountpoint(), err)
			}
			return a.printOutcome(a.stdout, res)
		},
	}
	c.Flags().BoolVar(&lazy, "lazy", false, "detach the mount even while processes still use it")
	return c
}

// unmountOffline handles a mountpoint whose daemon died (arg as given:
// the mountpoint, or the workspace's name): detach it and recover its
// overlay into the store.
func (a *app) unmountOffline(mp, arg string) error {
	m, err := a.manager()
	if err != nil {
		return err
	}
	recs, err := m.MountRecords()
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.Mountpoint != mp && (strings.Contains(arg, "/") || rec.Workspace != arg) {
			continue
		}
		res, err := a.recoverOffline(m, rec)
		if err != nil {
			return fmt.Errorf("unmount %s: %w", rec.Mountpoint, err)
		}
		return a.printOutcome(a.stdout, res)
	}
	return usageError{fmt.Errorf("unmount %s: not an acyclicfs mount of this store, nor a mounted workspace", mp)}
}

// recoverOffline unmounts the mount of rec whose daemon died: detach its
// mountpoint and recover its overlay into the store (also used by context
// unmount).
func (a *app) recoverOffline(m *workspace.Manager, rec workspace.MountRecord) (workspace.Result, error) {
	d := a.d
	if d == nil {
		d = daemon.Offline(m)
	}
	notes, err := d.RecoverMount(rec)
	for _, n := range notes {
		fmt.Fprintf(a.stderr, "recovery: %s\n", n)
	}
	if err != nil {
		return workspace.Result{}, err
	}
	w, _ := m.Get(rec.Workspace)
	return workspace.Result{Workspace: rec.Workspace, Outcome: workspace.OutcomeCurrent, Head: w.Head, Base: w.Base}, nil
}

// recoverStale detaches and recovers every mount of the store that no
// running daemon serves (its daemon died), as unmount does for one. It
// returns an "MP: outcome" line per mount and how many failed.
func (a *app) recoverStale() ([]string, int, error) {
	m, err := a.manager()
	if err != nil {
		return nil, 0, err
	}
	recs, err := m.MountRecords()
	if err != nil {
		return nil, 0, err
	}
	var outs []string
	failed := 0
	for _, rec := range recs {
		if a.d != nil && a.d.Serving(rec.Workspace) {
			continue
		}
		res, err := a.recoverOffline(m, rec)
		if err != nil {
			failed++
			outs = append(outs, fmt.Sprintf("%s: %v", rec.Mountpoint, err))
			continue
		}
		outs = append(outs, fmt.Sprintf("%s: %s (recovered from a dead daemon)", rec.Mountpoint, res.Outcome))
	}
	return outs, failed, nil
}

func (a *app) cmdShutdown() *cobra.Command {
	return &cobra.Command{
		Use:   "shutdown",
		Short: "Unmount every mount (each reconciled), then stop the daemon",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var outs []string
			failed := 0
			if a.d != nil {
				outs, failed = a.d.UnmountAll()
			}
			// Mounts a dead daemon left (after a crash: ENOTCONN, their
			// workspaces "recovering") are detached and recovered too.
			stale, nstale, err := a.recoverStale()
			if err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			outs, failed = append(outs, stale...), failed+nstale
			if a.d == nil && len(outs) == 0 {
				a.info("no daemon is running")
			}
			if outs == nil {
				outs = []string{}
			}
			if err := a.emit(map[string]any{"unmounted": outs}, func(w io.Writer) {
				for _, o := range outs {
					fmt.Fprintln(w, o)
				}
			}); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("shutdown: %d mount(s) could not be reconciled and unmounted; their overlays are kept for the next mount", failed)
			}
			return nil
		},
	}
}

func (a *app) cmdDaemon() *cobra.Command {
	var readyFD int
	var exitIdle bool
	c := &cobra.Command{
		Use:    "daemon",
		Short:  "Run the per-store daemon (started on demand by mount)",
		Args:   exactArgs(0, "no arguments"),
		Hidden: false,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := a.storeDir()
			if err != nil {
				return err
			}
			var ready io.WriteCloser
			if readyFD >= 0 {
				ready = os.NewFile(uintptr(readyFD), "ready")
			}
			return daemon.Run(dir, ready, a.daemonConfig(exitIdle))
		},
	}
	c.Flags().IntVar(&readyFD, "ready-fd", -1, "write \"ready\" to this fd once serving")
	c.Flags().BoolVar(&exitIdle, "exit-when-idle", false, "exit after the last unmount")
	c.Flags().MarkHidden("ready-fd")
	return c
}

// ---- leases ----

func (a *app) cmdLease() *cobra.Command {
	lease := &cobra.Command{Use: "lease", Short: "Explicit leases for harnesses"}
	var owner string
	var ttl time.Duration
	begin := &cobra.Command{
		Use:   "begin MOUNTPOINT --owner NAME [--ttl DUR]",
		Short: "Open an explicit lease; prints its id",
		Args:  exactArgs(1, "MOUNTPOINT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if owner == "" {
				return usageError{fmt.Errorf("lease begin: --owner is required")}
			}
			s, err := a.servedAt("lease begin", args[0])
			if err != nil {
				return err
			}
			if ttl <= 0 {
				ttl = s.TTL()
			}
			l, err := s.BeginLease(sessions.Owner("explicit:"+owner), owner, true, ttl)
			if err != nil {
				return fmt.Errorf("lease begin %s: %w", args[0], err)
			}
			s.Bind(sessions.Owner("explicit:" + owner))
			return a.emit(map[string]string{"lease": l.ID.String(), "owner": owner}, func(w io.Writer) { fmt.Fprintln(w, l.ID) })
		},
	}
	begin.Flags().StringVar(&owner, "owner", "", "who holds the lease (e.g. agent/tool-call id)")
	begin.Flags().DurationVar(&ttl, "ttl", 0, "lease lifetime without renewal (default: the mount's --lease-ttl)")
	end := &cobra.Command{
		Use:   "end MOUNTPOINT LEASE",
		Short: "Close a lease; the last close reconciles",
		Args:  exactArgs(2, "MOUNTPOINT LEASE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := a.servedAt("lease end", args[0])
			if err != nil {
				return err
			}
			o, ok, err := s.OwnerOfLease(args[1])
			if err != nil {
				return usageError{fmt.Errorf("lease end: %q is not a lease id", args[1])}
			}
			if !ok {
				return usageError{fmt.Errorf("lease end %s: no open lease %s", args[0], args[1])}
			}
			if s.Release(o) {
				// exec's command left processes behind in its session:
				// they keep the lease, and the sweeper ends it (and
				// reconciles) once none is left.
				return a.printOutcome(a.stdout, s.Outcome(workspace.OutcomeStillActive))
			}
			res, err := s.EndLease(o)
			if err != nil {
				return fmt.Errorf("lease end %s: %w", args[1], err)
			}
			return a.printOutcome(a.stdout, res)
		},
	}
	var pid int
	bind := &cobra.Command{
		Use:    "bind MOUNTPOINT --pid PID",
		Short:  "Open a lease owned by PID's session (used by exec)",
		Hidden: true,
		Args:   exactArgs(1, "MOUNTPOINT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := a.servedAt("exec", args[0])
			if err != nil {
				return err
			}
			o := sessions.MakeOwner(s.By(), pid)
			l, err := s.BeginLease(o, "exec "+string(o), true, s.TTL())
			if err != nil {
				return fmt.Errorf("exec %s: %w", args[0], err)
			}
			s.Bind(o)
			fmt.Fprintln(a.stdout, l.ID)
			return nil
		},
	}
	bind.Flags().IntVar(&pid, "pid", 0, "session leader pid")
	lease.AddCommand(begin, end, bind, a.cmdLeaseHarness())
	return lease
}

// cmdLeaseHarness is `lease harness PID [--mount MP]`.
func (a *app) cmdLeaseHarness() *cobra.Command {
	var mp string
	c := &cobra.Command{
		Use:   "harness PID [--mount MOUNTPOINT]",
		Short: "Declare PID a harness: it holds no lease, and each process tree it starts is one lease",
		Long: `Declare the long-lived process PID (a coding agent's harness) a harness
of the mount at MOUNTPOINT, or without --mount of every mount this daemon
serves now or mounts later. While PID lives, its own requests open no lease
(they see the current view; its working directory and open files pin
nothing), and every process tree it starts (its direct child and all that
child's descendants) is one lease, pinned while any process of the tree
lives. See docs/windows.md "Harnesses".`,
		Args: exactArgs(1, "PID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, err := strconv.Atoi(args[0])
			if err != nil || pid <= 1 {
				return usageError{fmt.Errorf("lease harness: %q is not a process id", args[0])}
			}
			var mps []string
			if mp != "" {
				s, err := a.servedAt("lease harness", mp)
				if err != nil {
					return err
				}
				if err := s.DeclareHarness(pid); err != nil {
					return fmt.Errorf("lease harness %d: %w", pid, err)
				}
				mps = []string{s.Mountpoint()}
			} else {
				if err := a.needDaemon("lease harness"); err != nil {
					return err
				}
				if mps, err = a.d.DeclareHarness(pid); err != nil {
					return fmt.Errorf("lease harness %d: %w", pid, err)
				}
			}
			if mps == nil {
				mps = []string{}
			}
			return a.emit(map[string]any{"harness": pid, "mounts": mps}, func(w io.Writer) {
				for _, m := range mps {
					fmt.Fprintln(w, m)
				}
			})
		},
	}
	c.Flags().StringVar(&mp, "mount", "", "only this mount (default: every mount of this daemon, now and later)")
	return c
}

// servedAt is the daemon's mount at mp, for command what (its errors
// name it).
func (a *app) servedAt(what, mp string) (*daemon.Mount, error) {
	if a.d == nil {
		return nil, a.unserved(what, a.mountpath(mp))
	}
	s := a.d.ByMountpoint(a.mountpath(mp))
	if s == nil {
		return nil, usageError{fmt.Errorf("%s %s: %w", what, a.mountpath(mp), errNotAMount)}
	}
	return s, nil
}

// unserved explains why mp cannot be used while no daemon runs: it is a
// mount whose daemon died (the store still records it), or no mount of
// this store at all.
func (a *app) unserved(what, mp string) error {
	if m, err := a.manager(); err == nil {
		if recs, err := m.MountRecords(); err == nil {
			for _, rec := range recs {
				if rec.Mountpoint == mp {
					return fmt.Errorf("%s %s: %w (workspace %s)", what, mp, errDaemonGone, rec.Workspace)
				}
			}
		}
	}
	return usageError{fmt.Errorf("%s %s: %w (and no daemon is running)", what, mp, errNotAMount)}
}

// ---- exec ----

func (a *app) cmdExec() *cobra.Command {
	return &cobra.Command{
		Use:   "exec MOUNTPOINT -- CMD [ARG...]",
		Short: "Run CMD inside MOUNTPOINT as one explicit lease; print the outcome; exit with CMD's status",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError{fmt.Errorf("exec: expected MOUNTPOINT -- CMD [ARG...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runExec(a.mountpath(args[0]), args[1:])
		},
	}
}

// execGate is the shell that exec starts in CMD's new session: it waits
// for "go" on descriptor 3 (end of file without it: the lease could not be
// bound, exit 127), closes it, enters the mountpoint ($1) and becomes CMD
// (exec: not found 127, not executable 126, as shells do). The gate's own
// start is on the critical path of every exec, in parallel with binding
// the lease: /bin/sh starts in about a millisecond on the reference
// machine, a re-exec of this Go binary (how exec waited before) in 10-15.
// Nothing in the gate touches the mount before "go", so the session's
// first request already belongs to the bound lease.
const execGate = `read -r g <&3; [ "$g" = go ] || exit 127; exec 3<&-; cd -- "$1" || exit 1; shift; exec "$@"`

// waitForwardingSignals waits for exec's child, passing the signals a
// terminal or a supervisor sends exec on to the child's session (its own,
// so Ctrl-C at a terminal reaches only exec): CMD sees them as it would
// without exec in between, and exec stays to end the lease. A second
// SIGINT or SIGTERM kills the session, for a command that ignores the first.
func waitForwardingSignals(child *exec.Cmd) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	waited := make(chan error, 1)
	go func() { waited <- child.Wait() }()
	ends := 0
	for {
		select {
		case err := <-waited:
			return err
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if sig == syscall.SIGINT || sig == syscall.SIGTERM {
				if ends++; ends > 1 {
					sig = syscall.SIGKILL
				}
			}
			// The session's leader is the child: its pid is the group's id.
			_ = syscall.Kill(-child.Process.Pid, sig)
		}
	}
}

// runExec starts CMD in a new session behind a gate that waits on a pipe
// (execGate), binds that session to a lease in the daemon, then lets CMD
// run: every request of CMD's session belongs to that lease.
func (a *app) runExec(mp string, argv []string) error {
	dir, err := a.storeDir()
	if err != nil {
		return err
	}
	c := newClient(dir)
	if !c.alive() {
		return a.unserved("exec", mp)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	child := exec.Command("/bin/sh", append([]string{"-c", execGate, "acyclicfs exec", mp}, argv...)...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, a.stdout, a.stderr
	child.ExtraFiles = []*os.File{pr}
	child.Dir = "/"
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("exec %s: %w", argv[0], err)
	}
	pr.Close()
	resp, err := c.run(context.Background(), daemon.RunRequest{Args: []string{"--store", dir, "lease", "bind", mp, "--pid", strconv.Itoa(child.Process.Pid)}, Cwd: a.cwd})
	if err != nil || resp.Code != 0 {
		pw.Close() // the child sees EOF without "go" and exits 127
		child.Wait()
		if err != nil {
			return fmt.Errorf("exec %s: %w", mp, err)
		}
		a.stderr.Write(resp.Stderr)
		return exitWith(resp.Code)
	}
	leaseID := strings.TrimSpace(string(resp.Stdout))
	pw.Write([]byte("go"))
	pw.Close()
	werr := waitForwardingSignals(child)
	end, err := c.run(context.Background(), daemon.RunRequest{Args: []string{"--store", dir, "lease", "end", mp, leaseID}, Cwd: a.cwd})
	if err != nil {
		fmt.Fprintf(a.stderr, "acyclicfs: exec: end lease: %v\n", err)
	} else {
		a.stderr.Write(end.Stdout)
		a.stderr.Write(end.Stderr)
	}
	if werr != nil {
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			code := ee.ExitCode()
			if code < 0 {
				code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
			}
			return exitWith(code)
		}
		return werr
	}
	return nil
}
