package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
	"github.com/spf13/cobra"
)

// conflictHint ends the text output of a conflict: how to see and settle
// each path.
const conflictHint = "hint: see a side with 'acyclicfs cat WS PATH --conflict base|ours|theirs'; settle with 'acyclicfs resolve WS PATH --ours|--theirs|--base', or edit the file and run 'acyclicfs resolve WS PATH' (ours = the workspace's version, theirs = its parent's)"

func (a *app) cmdResolve() *cobra.Command {
	var ours, theirs, base, all, force bool
	c := &cobra.Command{
		Use:   "resolve WS [PATH...] [--ours|--theirs|--base] [--all] [--force]",
		Short: "Settle recorded conflicts: take a side, or the file as it now is",
		Long: "Settle recorded conflicts of WS. With --ours, --theirs or --base each PATH takes that\n" +
			"version (ours = the workspace's own, theirs = its parent's); without one it keeps the\n" +
			"file as it now is in the workspace, refused (exit 3) while it holds conflict markers\n" +
			"unless --force. --all settles every recorded conflict. PATH is relative to the\n" +
			"workspace root, or to the current directory when that is inside WS's mount.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{fmt.Errorf("resolve: expected WS [PATH...], got no arguments")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ws := args[0]
			opt := workspace.ResolveOptions{All: all, Force: force}
			n := 0
			for _, f := range []struct {
				on   bool
				side workspace.ResolveSide
			}{{ours, workspace.ResolveOurs}, {theirs, workspace.ResolveTheirs}, {base, workspace.ResolveBase}} {
				if f.on {
					n++
					opt.Side = f.side
				}
			}
			switch {
			case n > 1:
				return usageError{fmt.Errorf("resolve: --ours, --theirs and --base exclude each other")}
			case force && n > 0:
				return usageError{fmt.Errorf("resolve: --force goes with taking the file as it is, not with a side")}
			case all && len(args) > 1:
				return usageError{fmt.Errorf("resolve: name paths or --all, not both")}
			case !all && len(args) == 1:
				return usageError{fmt.Errorf("resolve: name the paths to settle, or --all")}
			}
			m, err := a.manager()
			if err != nil {
				return err
			}
			if _, err := m.Get(ws); err != nil {
				return fmt.Errorf("resolve %s: %w", ws, err)
			}
			paths := make([]string, 0, len(args)-1)
			for _, p := range args[1:] {
				paths = append(paths, a.treePath(m, ws, p))
			}
			if a.d != nil {
				// An idle mount was captured at its last session's end; a
				// running session would change the file under the resolve.
				if err := a.d.RefuseIfActive(ws); err != nil {
					return fmt.Errorf("resolve %s: %w", ws, err)
				}
			}
			res, err := m.Resolve(ws, paths, opt)
			if err != nil {
				return fmt.Errorf("resolve %s: %w", ws, err)
			}
			if a.d != nil {
				a.d.HeadMoved(ws)
			}
			return a.emit(res, func(w io.Writer) {
				fmt.Fprintln(w, res.Head)
				for _, c := range res.Resolved {
					a.info("resolved %s", quotePath(c.Path))
				}
				if len(res.Remaining) > 0 {
					a.info("%d conflict(s) remain in %s", len(res.Remaining), ws)
				}
			})
		},
	}
	f := c.Flags()
	f.BoolVar(&ours, "ours", false, "take the workspace's own version")
	f.BoolVar(&theirs, "theirs", false, "take the parent's version")
	f.BoolVar(&base, "base", false, "take the common ancestor's version")
	f.BoolVar(&all, "all", false, "settle every recorded conflict")
	f.BoolVar(&force, "force", false, "take the file as it is even if it holds conflict markers")
	return c
}

// treePath turns a PATH argument into a path from ws's root: an absolute
// path, or a relative one given from inside ws's mount, is taken relative
// to the mountpoint; any other relative path is already from the root.
func (a *app) treePath(m *workspace.Manager, ws, p string) string {
	rec, ok, err := m.MountRecord(ws)
	if err != nil || !ok {
		return p
	}
	mp := filepath.Clean(rec.Mountpoint)
	inside := func(x string) (string, bool) {
		rel, err := filepath.Rel(mp, x)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return "", false
		}
		return filepath.ToSlash(rel), true
	}
	if filepath.IsAbs(p) {
		if rel, ok := inside(filepath.Clean(p)); ok {
			return rel
		}
		return p
	}
	if _, ok := inside(a.cwd); ok {
		if rel, ok := inside(a.abs(p)); ok {
			return rel
		}
	}
	return p
}

func (a *app) cmdCat() *cobra.Command {
	var side string
	c := &cobra.Command{
		Use:   "cat WS[@GEN] PATH [--conflict base|ours|theirs]",
		Short: "Print a file of any generation, or one side of a recorded conflict, without mounting",
		Args:  exactArgs(2, "WS[@GEN] PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, p := args[0], args[1]
			cs := workspace.ConflictSide(side)
			switch cs {
			case workspace.SideNone, workspace.SideBase, workspace.SideOurs, workspace.SideTheirs:
			default:
				return usageError{fmt.Errorf("cat: --conflict must be base, ours or theirs, not %q", side)}
			}
			m, err := a.manager()
			if err != nil {
				return err
			}
			name, _, hasAt := strings.Cut(ref, "@")
			var gen store.ID
			if hasAt {
				if cs != workspace.SideNone {
					return usageError{fmt.Errorf("cat: --conflict reads the workspace's head; drop @GEN")}
				}
				if gen, err = m.ResolveRef(ref); err != nil {
					return fmt.Errorf("cat %s: %w", ref, err)
				}
			} else if _, err := m.Get(name); err != nil {
				return fmt.Errorf("cat %s: %w", ref, err)
			}
			e, err := m.CatEntry(name, gen, a.treePath(m, name, p), cs)
			if err != nil {
				return fmt.Errorf("cat %s: %w", ref, err)
			}
			rc, err := m.Store().OpenBlob(e.ID)
			if err != nil {
				return fmt.Errorf("cat %s %s: %w", ref, p, err)
			}
			defer rc.Close()
			a.bar.done()
			if _, err := io.Copy(a.stdout, rc); err != nil {
				return fmt.Errorf("cat %s %s: %w", ref, p, err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&side, "conflict", "", "print that side of a recorded conflict: base, ours or theirs")
	return c
}
