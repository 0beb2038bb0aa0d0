package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// sessions and blame: the session log and write attribution
// (workspace/attribution.go).

func (a *app) cmdSessions() *cobra.Command {
	var n int
	var ancestors bool
	c := &cobra.Command{
		Use:   "sessions NAME [-n N] [--ancestors]",
		Short: "Show the sessions (leases) of NAME's mounts and what each changed, newest first",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 0 {
				return usageError{fmt.Errorf("sessions: -n must be >= 0")}
			}
			m, err := a.manager()
			if err != nil {
				return err
			}
			entries, err := m.Sessions(args[0], n, ancestors)
			if err != nil {
				return fmt.Errorf("sessions %s: %w", args[0], err)
			}
			return a.emit(entries, func(w io.Writer) {
				for _, e := range entries {
					gen := "-"
					if !e.Generation.IsZero() {
						gen = e.Generation.Short()
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d path(s)\t%s\n", e.Lease[:min(len(e.Lease), 12)], e.Kind, e.Owner,
						fmtTime(e.Start), fmtTime(e.End), e.Outcome, e.PathCount, gen)
					fmt.Fprintf(w, "\tleader: %s\n", quoteArgv(e.Leader))
					for _, p := range e.Paths {
						fmt.Fprintf(w, "\t%s\n", p)
					}
				}
			})
		},
	}
	c.Flags().IntVarP(&n, "number", "n", 0, "show at most N entries (0: all)")
	c.Flags().BoolVar(&ancestors, "ancestors", false, "include other workspaces' sessions whose generations are in NAME's history")
	return c
}

func (a *app) cmdBlame() *cobra.Command {
	var ancestors bool
	c := &cobra.Command{
		Use:   "blame NAME PATH [--ancestors]",
		Short: "Show the generations and sessions that changed PATH in NAME, newest first",
		Args:  exactArgs(2, "NAME PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			entries, err := m.Blame(args[0], args[1], ancestors)
			if err != nil {
				return fmt.Errorf("blame %s %s: %w", args[0], args[1], err)
			}
			return a.emit(entries, func(w io.Writer) {
				for _, e := range entries {
					if e.NotRecorded {
						fmt.Fprintf(w, "%s\t%s\tnot recorded\n", e.Generation.Short(), fmtTime(e.Time))
						continue
					}
					for _, wr := range e.Writers {
						fmt.Fprintf(w, "%s\t%s\t%s\tpid %d\t%s\n", e.Generation.Short(), fmtTime(wr.Last), wr.Session, wr.PID, quoteArgv(wr.Argv))
					}
				}
			})
		},
	}
	c.Flags().BoolVar(&ancestors, "ancestors", false, "include the captures of every workspace in NAME's history (what it was forked from, what landed in it)")
	return c
}

// quoteArgv is argv as one line, each argument quoted when it needs to be.
func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, s := range argv {
		if s == "" || strings.ContainsAny(s, " \t\n\"'\\$`|&;<>()*?[]#~") {
			q[i] = fmt.Sprintf("%q", s)
		} else {
			q[i] = s
		}
	}
	return strings.Join(q, " ")
}
