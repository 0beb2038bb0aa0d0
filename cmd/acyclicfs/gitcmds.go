package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/acyclicfs/acyclicfs/daemon"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// gitEnvVars are the variables that decide a git commit's author and
// committer and where git reads its configuration. The client sends them
// to the daemon (daemon.RunRequest.GitEnv): commits that publish makes carry the
// identity of the user who asked, not the daemon's.
var gitEnvVars = []string{
	"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
	"GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE",
	"EMAIL", "HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM",
}

// clientGitEnv returns this process's gitEnvVars as KEY=VALUE.
func clientGitEnv() []string {
	var out []string
	for _, k := range gitEnvVars {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// short12 shortens a git object name for text output.
func short12(s string) string {
	if s == "" {
		return "-"
	}
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func (a *app) cmdGit() *cobra.Command {
	c := &cobra.Command{
		Use:   "git",
		Short: "Bind a workspace to a git repository's branch, publish to it, pull from it",
		Args:  exactArgs(0, "a subcommand: bind, unbind, show, publish, pull"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError{fmt.Errorf("git: expected a subcommand: bind, unbind, show, publish, pull")}
		},
	}
	c.AddCommand(a.cmdGitBind(), a.cmdGitUnbind(), a.cmdGitShow(), a.cmdGitPublish(), a.cmdGitPull())
	return c
}

func (a *app) cmdGitBind() *cobra.Command {
	var branch, onLand string
	var force bool
	c := &cobra.Command{
		Use:   "bind WS REPO [--branch B] [--on-land publish|none] [--force]",
		Short: "Bind WS to REPO's branch B (default: REPO's current branch)",
		Args:  exactArgs(2, "WS REPO"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("branch") && branch == "" {
				return usageError{fmt.Errorf("git bind: --branch needs a branch name")}
			}
			m, err := a.manager()
			if err != nil {
				return err
			}
			b, err := m.GitBind(args[0], a.abs(args[1]), workspace.GitBindOptions{Branch: branch, OnLand: onLand, Force: force, Env: a.gitEnv})
			if err != nil {
				return fmt.Errorf("git bind %s: %w", args[0], err)
			}
			return a.emit(b, func(w io.Writer) {
				fmt.Fprintf(w, "%s\t%s\t%s\n", b.Repo, strings.TrimPrefix(b.Branch, "refs/heads/"), b.Base)
			})
		},
	}
	c.Flags().StringVar(&branch, "branch", "", "the branch to bind to (default: REPO's current branch)")
	c.Flags().StringVar(&onLand, "on-land", "none", "publish: every land into WS publishes it; none: it does not")
	c.Flags().BoolVar(&force, "force", false, "replace an existing binding")
	return c
}

func (a *app) cmdGitUnbind() *cobra.Command {
	return &cobra.Command{
		Use:   "unbind WS",
		Short: "Remove WS's binding (REPO is not touched)",
		Args:  exactArgs(1, "WS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			if err := m.GitUnbind(args[0]); err != nil {
				return fmt.Errorf("git unbind %s: %w", args[0], err)
			}
			return a.emit(map[string]any{"workspace": args[0], "unbound": true}, func(io.Writer) {
				a.info("unbound %s", args[0])
			})
		},
	}
}

func (a *app) cmdGitShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show WS",
		Short: "Show WS's binding and whether REPO's branch moved since they last agreed",
		Args:  exactArgs(1, "WS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			st, err := m.GitShow(args[0], a.gitEnv)
			if err != nil {
				return fmt.Errorf("git show %s: %w", args[0], err)
			}
			return a.emit(st, func(w io.Writer) {
				onLand := st.OnLand
				if onLand == "" {
					onLand = "none"
				}
				fmt.Fprintf(w, "repo:      %s\n", st.Repo)
				fmt.Fprintf(w, "branch:    %s\n", dash(strings.TrimPrefix(st.Branch, "refs/heads/")))
				fmt.Fprintf(w, "base:      %s\n", dash(st.Base))
				fmt.Fprintf(w, "published: %s\n", dash(st.Published))
				fmt.Fprintf(w, "on-land:   %s\n", onLand)
				fmt.Fprintf(w, "current:   %s\n", dash(st.Current))
				fmt.Fprintf(w, "moved:     %t\n", st.Moved)
			})
		},
	}
}

func (a *app) cmdGitPublish() *cobra.Command {
	var branch, msg string
	c := &cobra.Command{
		Use:   "publish WS [--branch B] [-m MSG]",
		Short: "Make WS's commits and uncommitted changes the new value of REPO's branch",
		Args:  exactArgs(1, "WS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("branch") && branch == "" {
				return usageError{fmt.Errorf("git publish: --branch needs a branch name")}
			}
			res, err := a.publish(cmd.Context(), args[0], workspace.PublishOptions{Branch: branch, Message: msg})
			if err != nil {
				return err
			}
			return a.emit(res, func(w io.Writer) { fmt.Fprintln(w, publishLine(res)) })
		},
	}
	c.Flags().StringVar(&branch, "branch", "", "publish to this branch of REPO instead of the bound one")
	c.Flags().StringVarP(&msg, "message", "m", "", "subject of the commit of uncommitted changes")
	return c
}

// publish refuses a workspace whose window is open (as land does: the head
// moves only at its final close) and publishes it.
func (a *app) publish(ctx context.Context, ws string, opt workspace.PublishOptions) (workspace.PublishResult, error) {
	m, err := a.manager()
	if err != nil {
		return workspace.PublishResult{}, err
	}
	if a.d != nil {
		if err := a.d.RefuseIfActive(ws); err != nil {
			return workspace.PublishResult{}, fmt.Errorf("git publish %s: %w", ws, err)
		}
	}
	opt.Env = a.gitEnv
	res, err := m.GitPublish(ctx, ws, opt)
	if err != nil {
		return res, fmt.Errorf("git publish %s: %w", ws, err)
	}
	return res, nil
}

// publishLine is publish's text output.
func publishLine(res workspace.PublishResult) string {
	b := strings.TrimPrefix(res.Branch, "refs/heads/")
	if res.Already {
		return fmt.Sprintf("already published: %s at %s", b, short12(res.New))
	}
	return fmt.Sprintf("published %s: %s..%s", b, short12(res.Old), short12(res.New))
}

// landPublish is land's report of the publish that follows it.
type landPublish struct {
	Published *workspace.PublishResult `json:"published,omitempty"`
	Error     string                   `json:"error,omitempty"`
}

// publishAfterLand publishes parent if its binding says so (OnLand
// publish). A refusal does not undo the land: it is reported, and land
// still exits 0.
func (a *app) publishAfterLand(ctx context.Context, parent string) *landPublish {
	m, err := a.manager()
	if err != nil || parent == "" {
		return nil
	}
	b, _, found, err := m.GitBinding(parent)
	if err != nil {
		return &landPublish{Error: err.Error()}
	}
	if !found || b.OnLand != workspace.OnLandPublish {
		return nil
	}
	res, err := a.publish(ctx, parent, workspace.PublishOptions{})
	if err != nil {
		return &landPublish{Error: err.Error()}
	}
	return &landPublish{Published: &res}
}

func (a *app) cmdGitPull() *cobra.Command {
	return &cobra.Command{
		Use:   "pull WS",
		Short: "Merge what REPO's branch received since WS last agreed with it into WS (git-aware)",
		Args:  exactArgs(1, "WS"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			// Like a parent's advance: a mounted workspace's head moves
			// only at its window's final close. With sessions running, the
			// pull is queued for it.
			if a.d != nil {
				if err := a.d.RefuseIfActive(args[0]); err != nil {
					var ol *daemon.OpenLeasesError
					if !errors.As(err, &ol) || !a.d.QueuePull(args[0], a.gitEnv) {
						return fmt.Errorf("git pull %s: %w", args[0], err)
					}
					return a.emit(map[string]any{"workspace": args[0], "queued": true}, func(w io.Writer) {
						fmt.Fprintln(w, "queued")
						a.info("the pull runs at the final close of %s's sessions", args[0])
					})
				}
			}
			res, err := m.GitPull(cmd.Context(), args[0], a.gitEnv)
			if err != nil {
				return fmt.Errorf("git pull %s: %w", args[0], err)
			}
			if a.d != nil && !res.Already {
				a.d.HeadMoved(args[0])
			}
			if a.jsonOut {
				if err := a.emit(res, nil); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(a.stdout, res.Outcome)
				for _, c := range res.Conflicts {
					fmt.Fprintln(a.stdout, quotePath(c.Path))
				}
			}
			if res.Outcome == workspace.OutcomeConflicted {
				if !a.jsonOut && !a.quiet {
					fmt.Fprintln(a.stderr, conflictHint)
				}
				return errConflictExit
			}
			return nil
		},
	}
}
