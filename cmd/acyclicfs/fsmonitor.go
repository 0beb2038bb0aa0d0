package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/acyclicfs/acyclicfs/daemon"
	"github.com/acyclicfs/acyclicfs/internal/fsmhook"
)

// `acyclicfs fsmonitor 2 TOKEN` is git's fsmonitor hook (protocol
// version 2; docs/git.md "fsmonitor"). git runs it with the worktree root
// as its working directory and reads "<new token>\0<path>\0<path>\0…".
// The hook finds the acyclicfs mount holding the worktree in mountinfo,
// asks the store's daemon which paths changed since TOKEN, and prints
// them relative to the worktree. Whatever it cannot answer exactly (not
// in a mount, daemon unreachable, a token it cannot vouch for) it answers
// with "/", everything may have changed, and exits 0: git then scans, as
// without fsmonitor.

func (a *app) fsmonitorCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "fsmonitor VERSION TOKEN",
		Short: "git's fsmonitor hook (core.fsmonitor): which paths changed since TOKEN",
		Long: "Run by git (core.fsmonitor, protocol version 2) in a worktree inside a mount: prints a new token and\n" +
			"the paths changed since TOKEN, NUL-separated, or \"/\" when it cannot tell (outside a mount, daemon\n" +
			"unreachable, unknown token). The mount sets it up in a repository at its root (docs/git.md).",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "2" {
				return usageError{fmt.Errorf("fsmonitor: hook protocol version %q is not supported (only 2)", args[0])}
			}
			token := ""
			if len(args) == 2 {
				token = args[1]
			}
			return a.printFSMonitor(token)
		},
	}
}

// fsmonitorHook runs `[--store S] fsmonitor 2 TOKEN` straight away; other
// forms (help, a bad version) go through the command tree.
func (a *app) fsmonitorHook(args []string) (int, bool) {
	line := scanArgs(args)
	if line.command() != "fsmonitor" || len(line.words) != 3 || line.words[1] != "2" {
		return 0, false
	}
	rest := line.words[1:]
	a.storeFlag = line.store
	if err := a.printFSMonitor(rest[1]); err != nil {
		reportError(a.stderr, fmt.Errorf("fsmonitor: %w", err))
		return exitError, true
	}
	return exitOK, true
}

// printFSMonitor writes the hook's answer for token, asking the daemon
// serving the mount that holds the working directory (internal/fsmhook,
// which the small hook binary cmd/acyclicfs-fsmonitor runs too).
func (a *app) printFSMonitor(token string) error {
	ans := fsmhook.Unknown()
	if dir, err := a.storeDir(); err == nil {
		ans = fsmhook.Query(filepath.Join(dir, daemon.SocketName), a.cwd, token)
	}
	return fsmhook.Print(a.stdout, ans)
}
