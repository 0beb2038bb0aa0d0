package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// run executes one CLI invocation and returns the exit code.
// ctx is canceled when the user interrupts the command.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cwd, _ := os.Getwd()
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, cwd: cwd}
	if f, ok := stderr.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		a.stderrTTY = err == nil
	}
	// git's fsmonitor hook runs at every git status: answered without
	// building the command tree.
	if code, ok := a.fsmonitorHook(args); ok {
		return code
	}
	// --store "" (an unset variable) is refused, not read as "the
	// default store".
	if line := scanArgs(args); line.storeGiven && line.store == "" {
		err := pathArg("--store", "")
		reportError(stderr, err)
		return exitCode(err)
	}
	// Route through the per-store daemon when one runs: it alone holds the
	// store open.
	if code, forwarded := a.forward(ctx, args); forwarded {
		return code
	}
	return a.execute(ctx, args)
}

// execute parses and runs args in this process.
func (a *app) execute(ctx context.Context, args []string) int {
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetIn(a.stdin)
	err := root.ExecuteContext(ctx)
	a.close()
	if err != nil && ctx.Err() != nil {
		// A step the interrupt stopped fails in its own words (a pipe
		// closed early, "context canceled"): say why.
		err = fmt.Errorf("%w (interrupted: %w)", err, context.Cause(ctx))
	}
	if err != nil {
		reportError(a.stderr, err)
		return exitCode(err)
	}
	return exitOK
}

// unknownCommand is the root command's argument check: a word that names
// no command is a usage error (cobra's own check returns an untyped
// error, classified by its text before).
func unknownCommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's default
	}
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n"
	}
	return usageError{errors.New(msg)}
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "acyclicfs",
		Short:         "Workspace filesystem for coding agents: fork in O(1), mount, rebase, land",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Bare `acyclicfs` prints help; a word that is no command is a
		// usage error (flag errors are, through SetFlagErrorFunc).
		Args: unknownCommand,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	root.CompletionOptions.DisableDefaultCmd = true
	// The root runs only to print help: its usage shows no line of its own.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "Usage:{{if .Runnable}}", "Usage:{{if and .Runnable .HasParent}}", 1))
	pf := root.PersistentFlags()
	pf.StringVar(&a.storeFlag, "store", "", "store directory (default $ACYCLICFS_STORE, else $XDG_DATA_HOME/acyclicfs)")
	pf.BoolVar(&a.jsonOut, "json", false, "machine-readable output on stdout")
	pf.BoolVarP(&a.quiet, "quiet", "q", false, "print less")
	pf.BoolVarP(&a.verbose, "verbose", "v", false, "print more")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{flagError(c, err)} })
	root.AddCommand(
		a.cmdInit(), a.cmdCreate(), a.cmdFork(), a.cmdCommit(), a.cmdList(), a.cmdLog(), a.cmdSessions(), a.cmdBlame(),
		a.cmdDiff(), a.cmdExport(), a.cmdRebase(), a.cmdLand(), a.cmdUndo(), a.cmdRm(),
		a.cmdStatus(), a.cmdGC(), a.cmdFsck(), a.cmdContext(), a.cmdResolve(), a.cmdCat(), a.cmdMCP(), a.cmdGit(), a.cmdRun(),
	)
	a.addMountCommands(root)
	root.AddCommand(a.fsmonitorCommand())
	return root
}

// flagError names the command a bad flag was given to, and says "not a
// number" (or "not a duration") where pflag would quote strconv:
// `log: invalid argument "abc" for "-n, --number" flag: not a number`.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	if i := strings.Index(msg, ": strconv.Parse"); i >= 0 {
		msg = msg[:i] + ": not a number"
	} else if i := strings.Index(msg, ": time: "); i >= 0 {
		msg = msg[:i] + ": not a duration (like 500ms, 30s, 2m)"
	}
	return fmt.Errorf("%s: %s", strings.TrimPrefix(c.CommandPath(), "acyclicfs "), msg)
}
