package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acyclicfs/acyclicfs/daemon"
	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// freezeMounts makes every mounted root of c read-only at once.
func (a *app) freezeMounts(c workspace.Context) {
	if a.d == nil {
		return // nothing is mounted without a daemon; later mounts check
	}
	a.d.FreezeMounts(c, a.notice)
}

// discardMounts makes every mounted root of the discarded contexts cs
// read-only and unmounts it: now if its window is idle, else at its final
// close.
func (a *app) discardMounts(cs []workspace.Context) error {
	if a.d == nil {
		return nil
	}
	return a.d.DiscardMounts(cs, a.notice)
}

// notice prints a line on stderr unless -q.
func (a *app) notice(format string, args ...any) {
	if !a.quiet {
		fmt.Fprintf(a.stderr, format+"\n", args...)
	}
}

// startsDaemon reports whether c is a command that starts the store's
// daemon when none runs: mount (without --foreground) and context mount.
func startsDaemon(c commandLine) bool {
	switch c.command() {
	case "mount":
		return !c.flags["--foreground"]
	case "context":
		return c.word(1) == "mount"
	}
	return false
}

// contextMountRoot is one line of `context mount`.
type contextMountRoot struct {
	Workspace  string `json:"workspace"`
	Mountpoint string `json:"mountpoint"`
	ReadOnly   bool   `json:"read_only"`
}

func (a *app) cmdContextMount() *cobra.Command {
	var opt mountFlags
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
			if opt.WarmEntries < 0 {
				return usageError{fmt.Errorf("context mount: --warm-entries must not be negative")}
			}
			if err := checkTransport(cmd.Flags(), &opt); err != nil {
				return usageError{fmt.Errorf("context mount: %w", err)}
			}
			opt.LeaseTTL, opt.LeaseBy, opt.IdleClose = ttl, b, idle
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
					if s := a.d.Get(r.Workspace); s != nil {
						s.WaitWarm()
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
	f.BoolVar(&opt.AllowOther, "allow-other", false, "let other users access the mounts")
	f.DurationVar(&ttl, "lease-ttl", 10*time.Second, "lease lifetime without renewal (bounds a crashed daemon's leases)")
	f.StringVar(&by, "lease-by", "sid", "lease owner key: sid, pgid or pid")
	idleFlag(f, &idle)
	f.BoolVar(&opt.Xattrs, "xattrs", false, "serve user xattrs")
	f.BoolVar(&opt.NoFSMonitor, "no-fsmonitor", false, "do not set git's fsmonitor hook in repositories at the roots' mount roots (and remove it where an earlier mount set it)")
	transportFlag(f, &opt)
	warmFlag(f, &opt)
	attributionFlag(f, &opt)
	return c
}

// mountContextRoots mounts every root of ctx at its mountpoint, in order.
// A root already served at its mountpoint counts as mounted (and is left
// alone on failure). If a root fails, the roots this call mounted are
// unmounted again (reconciled, as by unmount) and the error names both.
func (a *app) mountContextRoots(ctx workspace.Context, opt mountFlags) ([]contextMountRoot, error) {
	var roots []contextMountRoot
	var mounted []*daemon.Mount
	for _, r := range ctx.Roots {
		if s := a.d.Get(r.Workspace); s != nil && s.Mountpoint() == r.Mountpoint {
			roots = append(roots, contextMountRoot{r.Workspace, r.Mountpoint, s.ReadOnly()})
			continue
		}
		s, notes, err := a.d.MountWorkspace(r.Workspace, r.Mountpoint, opt.MountOptions)
		for _, n := range notes {
			fmt.Fprintf(a.stderr, "recovery: %s\n", n)
		}
		if err != nil {
			err = fmt.Errorf("mount %s at %s: %w", r.Workspace, r.Mountpoint, err)
			var undone []string
			for i := len(mounted) - 1; i >= 0; i-- {
				if _, uerr := mounted[i].Unmount(true); uerr != nil {
					err = errors.Join(err, fmt.Errorf("unmount %s again: %w", mounted[i].Workspace(), uerr))
					continue
				}
				undone = append(undone, mounted[i].Workspace())
			}
			if len(undone) > 0 {
				err = fmt.Errorf("%w (unmounted again: %s)", err, strings.Join(undone, ", "))
			}
			return nil, err
		}
		mounted = append(mounted, s)
		roots = append(roots, contextMountRoot{r.Workspace, r.Mountpoint, s.ReadOnly()})
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
		var s *daemon.Mount
		if a.d != nil {
			s = a.d.Get(r.Workspace)
		}
		if s != nil {
			res, err := s.Unmount(false)
			if err != nil {
				errs = append(errs, fmt.Errorf("unmount %s from %s: %w", r.Workspace, s.Mountpoint(), err))
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
