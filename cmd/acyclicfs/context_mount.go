package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Contexts and mounts (docs/contexts.md "Mounted roots"):
//
//   - A mounted workspace that is a root of a frozen or discarded context
//     is read-only: the FUSE mount answers every change with EROFS, and no
//     new lease is opened on it. A tool session whose first request comes
//     after the freeze is admitted without a lease: its requests are served
//     from the mount's current view, it pins no window, and its end
//     reconciles nothing. Explicit leases (lease begin, exec) are refused
//     with ErrContextFrozen (exit 4). Leases open at the freeze run to
//     their end; their final close captures what they wrote before it.
//   - A mounted root of a discarded context is also unmounted once its
//     window closes: at once when it has no open lease, else at the final
//     close of its last lease (reconciled as by unmount, then unmounted).
//   - `context mount CTX` mounts every root at its recorded mountpoint
//     through mountWorkspace; `context unmount CTX` unmounts every mounted
//     root through served.unmount (or the offline recovery of a root whose
//     daemon died).

// applyContextState makes s read-only if its workspace is a root of a
// frozen or discarded context. mountWorkspace calls it before mounting
// (so the mount starts read-only) and again once s is registered: a
// freeze that committed in between and did not see s yet is applied then.
func (d *daemon) applyContextState(s *served) error {
	ctx, ro, err := d.m.ReadOnlyRootOf(s.ws)
	if err != nil {
		return fmt.Errorf("check the contexts of %s: %w", s.ws, err)
	}
	if ro {
		s.setReadOnly(ctx)
	}
	return nil
}

// setReadOnly switches s to read-only (once; never back: frozen and
// discarded contexts stay so).
func (s *served) setReadOnly(ctx string) {
	if s.readOnly.Swap(true) {
		return
	}
	if s.mnt != nil { // nil while mountWorkspace prepares it: Config.ReadOnly then
		s.mnt.SetReadOnly(true)
	}
	s.d.logger.Printf("%s at %s: read-only (context %s is frozen or discarded)", s.ws, s.mp, ctx)
}

// refuseReadOnly refuses a new explicit lease on a read-only mount.
func (s *served) refuseReadOnly() error {
	if !s.readOnly.Load() {
		return nil
	}
	return fmt.Errorf("%w: %s is a root of a frozen or discarded context; its mount %s is read-only and takes no new leases",
		workspace.ErrContextFrozen, s.ws, s.mp)
}

// afterWindowClosed runs at the end of a window's final close (endLease,
// with s.lock held): a root of a discarded context is unmounted now that
// its window is closed. The unmount needs s.lock, so it runs on its own
// goroutine; a running unmount (closing) needs no second one.
func (s *served) afterWindowClosed() {
	if !s.unmountIdle.Load() || s.closing {
		return
	}
	go s.d.unmountDiscarded(s)
}

// unmountDiscarded unmounts s (a root of a discarded context) unless it is
// gone, being unmounted (or the daemon is stopping), or has leases again
// (their close comes back here).
func (d *daemon) unmountDiscarded(s *served) {
	d.mu.Lock()
	gone := d.stopping || d.mounts[s.ws] != s // shutdown unmounts everything itself
	d.mu.Unlock()
	if gone {
		return
	}
	s.acquire(0)
	busy := s.closing || len(s.leases) > 0
	s.release()
	if busy {
		return
	}
	res, err := s.unmount(true)
	if err != nil {
		d.logger.Printf("%s: unmount after its context was discarded: %v", s.ws, err)
		return
	}
	d.logger.Printf("%s: unmounted from %s after its context was discarded: %s", s.ws, s.mp, res.Outcome)
	d.stopIfIdle()
}

// stopIfIdle stops a daemon started on demand once nothing is mounted.
func (d *daemon) stopIfIdle() {
	if !d.exitWhenIdle {
		return
	}
	d.mu.Lock()
	idle := len(d.mounts) == 0
	d.mu.Unlock()
	if idle {
		d.stop()
	}
}

// freezeMounts makes every mounted root of c read-only at once.
func (a *app) freezeMounts(c workspace.Context) {
	if a.d == nil {
		return // nothing is mounted without a daemon; later mounts check
	}
	for _, r := range c.Roots {
		if s := a.d.get(r.Workspace); s != nil {
			s.setReadOnly(c.Name)
			a.notice("%s: mount %s is read-only", r.Workspace, s.mp)
		}
	}
}

// discardMounts makes every mounted root of the discarded contexts cs
// read-only and unmounts it: now if its window is idle, else at its final
// close (afterWindowClosed).
func (a *app) discardMounts(cs []workspace.Context) error {
	if a.d == nil {
		return nil
	}
	var errs []error
	seen := map[string]bool{}
	for _, c := range cs {
		for _, r := range c.Roots {
			s := a.d.get(r.Workspace)
			if s == nil || seen[r.Workspace] {
				continue
			}
			seen[r.Workspace] = true
			// Read-only first: from here on no lease can begin, so a count
			// of zero below stays zero; a count above zero ends in a final
			// close, which sees unmountIdle (set before the count).
			s.setReadOnly(c.Name)
			s.unmountIdle.Store(true)
			if !s.acquire(admitWait) {
				errs = append(errs, fmt.Errorf("%w: %s is reconciling; gave up after %v (it unmounts at its next final close)", workspace.ErrBusy, r.Workspace, admitWait))
				continue
			}
			n := len(s.leases)
			s.release()
			if n > 0 {
				a.notice("%s: read-only; unmounts from %s once its %d open lease(s) close", r.Workspace, s.mp, n)
				continue
			}
			res, err := s.unmount(true)
			if err != nil {
				errs = append(errs, fmt.Errorf("unmount %s from %s: %w", r.Workspace, s.mp, err))
				continue
			}
			a.notice("%s: unmounted from %s: %s", r.Workspace, s.mp, res.Outcome)
		}
	}
	return errors.Join(errs...)
}

// notice prints a line on stderr unless -q.
func (a *app) notice(format string, args ...any) {
	if !a.quiet {
		fmt.Fprintf(a.stderr, format+"\n", args...)
	}
}

// startsDaemon reports whether args is a command that starts the store's
// daemon when none runs: mount (without --foreground) and context mount.
func startsDaemon(args []string) bool {
	switch firstCommand(args) {
	case "mount":
		return !hasFlag(args, "--foreground")
	case "context":
		return contextSubcommand(args) == "mount"
	}
	return false
}

// contextSubcommand is the word after "context" in args ("" if the
// command is not context).
func contextSubcommand(args []string) string {
	skip := false
	for i, s := range args {
		switch {
		case skip:
			skip = false
		case s == "--store":
			skip = true
		case strings.HasPrefix(s, "-"):
		case s == "context":
			return firstCommand(args[i+1:])
		default:
			return ""
		}
	}
	return ""
}

// contextMountRoot is one line of `context mount`.
type contextMountRoot struct {
	Workspace  string `json:"workspace"`
	Mountpoint string `json:"mountpoint"`
	ReadOnly   bool   `json:"read_only"`
}

func (a *app) cmdContextMount() *cobra.Command {
	var opt mountOptions
	var ttl, idle time.Duration
	var by string
	c := &cobra.Command{
		Use:   "mount CTX [--allow-other] [--lease-ttl DUR] [--lease-by sid|pgid|pid] [--idle-close DUR]",
		Short: "Mount every root of CTX at its recorded mountpoint (each root keeps its own window)",
		Args:  exactArgs(1, "CTX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			b, err := sessions.ParseBy(by)
			if err != nil {
				return usageError{fmt.Errorf("context mount: --lease-by: %w", err)}
			}
			if ttl < 100*time.Millisecond {
				return usageError{fmt.Errorf("context mount: --lease-ttl must be at least 100ms")}
			}
			if idle < 0 {
				return usageError{fmt.Errorf("context mount: --idle-close must not be negative")}
			}
			if opt.warmEntries < 0 {
				return usageError{fmt.Errorf("context mount: --warm-entries must not be negative")}
			}
			if err := checkTransport(cmd.Flags(), &opt); err != nil {
				return usageError{fmt.Errorf("context mount: %w", err)}
			}
			opt.leaseTTL, opt.leaseBy, opt.idleClose = ttl, b, idle
			m, err := a.contextManager()
			if err != nil {
				return err
			}
			ctx, err := m.GetContext(name)
			if err != nil {
				return fmt.Errorf("context mount %s: %w", name, err)
			}
			if ctx.State == workspace.ContextDiscarded {
				return fmt.Errorf("context mount %s: %w", name, workspace.ErrContextDiscarded)
			}
			if missing := ctx.RootsWithoutMountpoint(); len(missing) > 0 {
				return usageError{fmt.Errorf("context mount %s: root(s) without a mountpoint: %s (nothing was mounted; record one with context create --root WS=MOUNTPOINT, or mount them with mount WS MOUNTPOINT)",
					name, strings.Join(missing, ", "))}
			}
			if err := a.needDaemon("context mount " + name); err != nil {
				return err
			}
			roots, err := a.mountContextRoots(ctx, opt)
			if err != nil {
				return fmt.Errorf("context mount %s: %w", name, err)
			}
			if opt.waitWarm {
				// The roots warm up at once; wait for each in turn.
				for _, r := range roots {
					if s := a.d.get(r.Workspace); s != nil && s.mnt != nil {
						s.mnt.WaitWarm()
					}
				}
			}
			return a.emit(map[string]any{"context": name, "roots": roots}, func(w io.Writer) {
				for _, r := range roots {
					fmt.Fprintf(w, "%s\t%s\n", r.Workspace, r.Mountpoint)
				}
			})
		},
	}
	f := c.Flags()
	f.BoolVar(&opt.allowOther, "allow-other", false, "let other users access the mounts")
	f.DurationVar(&ttl, "lease-ttl", 10*time.Second, "lease lifetime without renewal (bounds a crashed daemon's leases)")
	f.StringVar(&by, "lease-by", "sid", "lease owner key: sid, pgid or pid")
	f.DurationVar(&idle, "idle-close", 0, "also end a lease after this long with no request, open file or cwd in the mount")
	f.BoolVar(&opt.xattrs, "xattrs", false, "serve user xattrs")
	f.BoolVar(&opt.noFSMonitor, "no-fsmonitor", false, "do not set git's fsmonitor hook in repositories at the roots' mount roots (and remove it where an earlier mount set it)")
	transportFlag(f, &opt)
	warmFlag(f, &opt)
	return c
}

// mountContextRoots mounts every root of ctx at its mountpoint, in order.
// A root already served at its mountpoint counts as mounted (and is left
// alone on failure). If a root fails, the roots this call mounted are
// unmounted again (reconciled, as by unmount) and the error names both.
func (a *app) mountContextRoots(ctx workspace.Context, opt mountOptions) ([]contextMountRoot, error) {
	var roots []contextMountRoot
	var mounted []*served
	for _, r := range ctx.Roots {
		if s := a.d.get(r.Workspace); s != nil && s.mp == r.Mountpoint {
			roots = append(roots, contextMountRoot{r.Workspace, r.Mountpoint, s.readOnly.Load()})
			continue
		}
		s, notes, err := a.d.mountWorkspace(r.Workspace, r.Mountpoint, opt)
		for _, n := range notes {
			fmt.Fprintf(a.stderr, "recovery: %s\n", n)
		}
		if err != nil {
			err = fmt.Errorf("mount %s at %s: %w", r.Workspace, r.Mountpoint, err)
			var undone []string
			for i := len(mounted) - 1; i >= 0; i-- {
				if _, uerr := mounted[i].unmount(true); uerr != nil {
					err = errors.Join(err, fmt.Errorf("unmount %s again: %w", mounted[i].ws, uerr))
					continue
				}
				undone = append(undone, mounted[i].ws)
			}
			if len(undone) > 0 {
				err = fmt.Errorf("%w (unmounted again: %s)", err, strings.Join(undone, ", "))
			}
			return nil, err
		}
		mounted = append(mounted, s)
		roots = append(roots, contextMountRoot{r.Workspace, r.Mountpoint, s.readOnly.Load()})
	}
	return roots, nil
}

func (a *app) cmdContextUnmount() *cobra.Command {
	return &cobra.Command{
		Use:   "unmount CTX",
		Short: "Unmount every mounted root of CTX (each finished, captured and reconciled as by unmount)",
		Args:  exactArgs(1, "CTX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			m, err := a.contextManager()
			if err != nil {
				return err
			}
			ctx, err := m.GetContext(name)
			if err != nil {
				return fmt.Errorf("context unmount %s: %w", name, err)
			}
			results, uerr := a.unmountContextRoots(m, ctx)
			if len(results) == 0 && uerr == nil {
				a.notice("context unmount %s: no root is mounted", name)
			}
			if err := a.emit(map[string]any{"context": name, "roots": results}, func(w io.Writer) {
				for _, r := range results {
					fmt.Fprintf(w, "%s\t%s\n", r.Workspace, r.Outcome)
					for _, c := range r.Conflicts {
						fmt.Fprintf(w, "conflict\t%s\t%s\t%s\n", r.Workspace, quotePath(c.Path), c.Kind)
					}
				}
			}); err != nil {
				return err
			}
			if uerr != nil {
				return fmt.Errorf("context unmount %s: %w", name, uerr)
			}
			for _, r := range results {
				if r.Outcome == workspace.OutcomeConflicted {
					return errConflictExit
				}
			}
			return nil
		},
	}
}

// unmountContextRoots unmounts every mounted root of ctx: served ones as
// unmount does, ones left by a dead daemon through offline recovery. It
// goes on after a failure and returns every error.
func (a *app) unmountContextRoots(m *workspace.Manager, ctx workspace.Context) ([]workspace.Result, error) {
	var results []workspace.Result
	var errs []error
	for _, r := range ctx.Roots {
		var s *served
		if a.d != nil {
			s = a.d.get(r.Workspace)
		}
		if s != nil {
			res, err := s.unmount(false)
			if err != nil {
				errs = append(errs, fmt.Errorf("unmount %s from %s: %w", r.Workspace, s.mp, err))
				continue
			}
			results = append(results, res)
			continue
		}
		rec, found, err := m.MountRecord(r.Workspace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !found {
			continue // not mounted
		}
		res, err := a.recoverOffline(m, rec)
		if err != nil {
			errs = append(errs, fmt.Errorf("unmount %s from %s: %w", r.Workspace, rec.Mountpoint, err))
			continue
		}
		results = append(results, res)
	}
	return results, errors.Join(errs...)
}
