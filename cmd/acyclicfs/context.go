package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// cmdContext is `acyclicfs context …`: groups of root workspaces for one
// agent (SPEC.md "In-place workspaces and contexts"; docs/contexts.md).
func (a *app) cmdContext() *cobra.Command {
	c := &cobra.Command{
		Use:   "context",
		Short: "Group workspaces (roots) into agent contexts: create, fork, land, freeze, discard, mount",
		Args:  exactArgs(0, "a subcommand"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError{fmt.Errorf("context: a subcommand is required (create, fork, land, freeze, discard, list, show, mount, unmount)")}
		},
	}
	c.AddCommand(a.cmdContextCreate(), a.cmdContextFork(), a.cmdContextLand(), a.cmdContextFreeze(),
		a.cmdContextDiscard(), a.cmdContextList(), a.cmdContextShow(), a.cmdContextMount(), a.cmdContextUnmount())
	return c
}

// contextRootJSON is one root in context output.
type contextRootJSON struct {
	Workspace       string   `json:"workspace"`
	ParentWorkspace string   `json:"parent_workspace,omitempty"`
	Mountpoint      string   `json:"mountpoint,omitempty"`
	Head            store.ID `json:"head"`
}

// contextJSON is a context in `--json` output.
type contextJSON struct {
	Name     string            `json:"name"`
	ID       string            `json:"id"`
	Parent   string            `json:"parent,omitempty"`
	State    string            `json:"state"`
	Roots    []contextRootJSON `json:"roots"`
	Created  int64             `json:"created"`
	Revision uint64            `json:"revision"`
}

func contextView(m *workspace.Manager, c workspace.Context) contextJSON {
	out := contextJSON{Name: c.Name, ID: c.ID, Parent: c.Parent, State: string(c.State), Created: c.Created, Revision: c.Revision}
	for _, r := range c.Roots {
		rj := contextRootJSON{Workspace: r.Workspace, ParentWorkspace: r.ParentWorkspace, Mountpoint: r.Mountpoint}
		if w, err := m.Get(r.Workspace); err == nil {
			rj.Head = w.Head
		}
		out.Roots = append(out.Roots, rj)
	}
	return out
}

func rootNames(c workspace.Context) string {
	names := make([]string, len(c.Roots))
	for i, r := range c.Roots {
		names[i] = r.Workspace
	}
	return strings.Join(names, ",")
}

// contextManager opens the store and finishes any interrupted landing, so
// every context command sees landings whole.
func (a *app) contextManager() (*workspace.Manager, error) {
	m, err := a.manager()
	if err != nil {
		return nil, err
	}
	done, err := m.RecoverContextLandings()
	for _, line := range done {
		a.info("recovered: %s", line)
	}
	if err != nil {
		return nil, fmt.Errorf("recover context landings: %w", err)
	}
	return m, nil
}

func (a *app) cmdContextCreate() *cobra.Command {
	var roots []string
	c := &cobra.Command{
		Use:   "create CTX --root WS[=MOUNTPOINT]...",
		Short: "Group existing workspaces (roots) into a new context",
		Args:  exactArgs(1, "CTX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(roots) == 0 {
				return usageError{fmt.Errorf("context create: at least one --root WS[=MOUNTPOINT] is required")}
			}
			var rs []workspace.ContextRoot
			for _, r := range roots {
				ws, mp, _ := strings.Cut(r, "=")
				if mp != "" {
					mp = a.mountpath(mp)
				}
				rs = append(rs, workspace.ContextRoot{Workspace: ws, Mountpoint: mp})
			}
			m, err := a.contextManager()
			if err != nil {
				return err
			}
			ctx, err := m.CreateContext(args[0], rs)
			if err != nil {
				return fmt.Errorf("context create %s: %w", args[0], err)
			}
			return a.emit(contextView(m, ctx), func(w io.Writer) { fmt.Fprintln(w, ctx.ID) })
		},
	}
	c.Flags().StringArrayVar(&roots, "root", nil, "a root workspace, optionally with its mountpoint (repeatable)")
	return c
}

func (a *app) cmdContextFork() *cobra.Command {
	return &cobra.Command{
		Use:   "fork CTX CHILD",
		Short: "Fork every root of CTX at once (root WS becomes CHILD.WS)",
		Args:  exactArgs(2, "CTX CHILD"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.contextManager()
			if err != nil {
				return err
			}
			ctx, err := m.ForkContext(args[0], args[1])
			if err != nil {
				return fmt.Errorf("context fork %s %s: %w", args[0], args[1], err)
			}
			return a.emit(contextView(m, ctx), func(w io.Writer) { fmt.Fprintln(w, ctx.ID) })
		},
	}
}

func (a *app) cmdContextLand() *cobra.Command {
	return &cobra.Command{
		Use:   "land CHILD",
		Short: "Land every root of CHILD into its parent context atomically (all or none)",
		Args:  exactArgs(1, "CHILD"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.contextManager()
			if err != nil {
				return err
			}
			if a.d != nil {
				ctx, err := m.GetContext(args[0])
				if err != nil {
					return fmt.Errorf("context land %s: %w", args[0], err)
				}
				for _, r := range ctx.Roots {
					if err := a.d.RefuseIfActive(r.Workspace); err != nil {
						return fmt.Errorf("context land %s: %w", args[0], err)
					}
				}
			}
			res, err := m.LandContext(args[0])
			if err != nil {
				return fmt.Errorf("context land %s: %w", args[0], err)
			}
			if a.d != nil {
				for _, r := range res.Roots {
					a.d.HeadMoved(r.Workspace)
					a.d.HeadMoved(r.ParentWorkspace)
				}
			}
			if err := a.emit(res, func(w io.Writer) {
				for _, r := range res.Roots {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Workspace, r.ParentWorkspace, r.Outcome, r.Head)
					for _, c := range r.Conflicts {
						fmt.Fprintf(w, "conflict\t%s\t%s\t%s\n", r.Workspace, quotePath(c.Path), c.Kind)
					}
				}
			}); err != nil {
				return err
			}
			if res.Outcome == workspace.OutcomeConflicted {
				return errConflictExit
			}
			return nil
		},
	}
}

func (a *app) printContexts(cs []workspace.Context) error {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return a.emit(map[string]any{"contexts": names}, func(w io.Writer) {
		for _, n := range names {
			fmt.Fprintln(w, n)
		}
	})
}

func (a *app) cmdContextFreeze() *cobra.Command {
	return &cobra.Command{
		Use:   "freeze CTX",
		Short: "Stop changes: context fork and land of CTX are refused, its mounted roots become read-only",
		Args:  exactArgs(1, "CTX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.contextManager()
			if err != nil {
				return err
			}
			ctx, err := m.FreezeContext(args[0])
			if err != nil {
				return fmt.Errorf("context freeze %s: %w", args[0], err)
			}
			a.freezeMounts(ctx)
			return a.printContexts([]workspace.Context{ctx})
		},
	}
}

func (a *app) cmdContextDiscard() *cobra.Command {
	var maximum int
	c := &cobra.Command{
		Use:   "discard CTX [--max N]",
		Short: "Mark CTX and its descendant contexts discarded (bounded by --max); their mounted roots unmount once idle",
		Args:  exactArgs(1, "CTX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if maximum < 1 {
				return usageError{fmt.Errorf("context discard: --max must be at least 1")}
			}
			m, err := a.contextManager()
			if err != nil {
				return err
			}
			cs, err := m.DiscardContext(args[0], maximum)
			if err != nil {
				return fmt.Errorf("context discard %s: %w", args[0], err)
			}
			uerr := a.discardMounts(cs)
			if err := a.printContexts(cs); err != nil {
				return err
			}
			if uerr != nil {
				return fmt.Errorf("context discard %s: discarded, but: %w", args[0], uerr)
			}
			return nil
		},
	}
	c.Flags().IntVar(&maximum, "max", workspace.DefaultDiscardBound, "refuse (changing nothing) if CTX's subtree has more than N contexts")
	return c
}

func (a *app) cmdContextList() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every context: state, parent, roots",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.contextManager()
			if err != nil {
				return err
			}
			cs, err := m.ListContexts()
			if err != nil {
				return fmt.Errorf("context list: %w", err)
			}
			views := make([]contextJSON, 0, len(cs))
			for _, c := range cs {
				views = append(views, contextView(m, c))
			}
			return a.emit(views, func(out io.Writer) {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tID\tSTATE\tPARENT\tROOTS")
				for _, c := range cs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.ID[:12], c.State, dash(c.Parent), rootNames(c))
				}
				tw.Flush()
			})
		},
	}
}

func (a *app) cmdContextShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show CTX",
		Short: "Show one context: state, parent, roots",
		Args:  exactArgs(1, "CTX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.contextManager()
			if err != nil {
				return err
			}
			c, err := m.GetContext(args[0])
			if err != nil {
				return fmt.Errorf("context show %s: %w", args[0], err)
			}
			v := contextView(m, c)
			return a.emit(v, func(out io.Writer) {
				fmt.Fprintf(out, "name\t%s\nid\t%s\nstate\t%s\nparent\t%s\ncreated\t%s\n\n", v.Name, v.ID, v.State, dash(v.Parent), fmtTime(v.Created))
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ROOT\tPARENT-ROOT\tHEAD\tMOUNTPOINT")
				for _, r := range v.Roots {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Workspace, dash(r.ParentWorkspace), short(r.Head), dash(r.Mountpoint))
				}
				tw.Flush()
			})
		},
	}
}
