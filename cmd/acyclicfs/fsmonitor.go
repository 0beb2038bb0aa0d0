package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/acyclicfs/acyclicfs/daemon"
	"github.com/acyclicfs/acyclicfs/fusefs"
	"github.com/acyclicfs/acyclicfs/internal/fsmtoken"
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

// fsmonitorOutput is what the hook prints when nothing better is known:
// a token no mount accepts as a base (dirty, of no overlay), and "/".
func fsmonitorUnknown() fusefs.FSMonitorAnswer {
	return fusefs.FSMonitorAnswer{Token: fsmtoken.Token{}.String(), All: true}
}

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

// printFSMonitor writes the hook's answer for token.
func (a *app) printFSMonitor(token string) error {
	ans := a.fsmonitorAnswer(token)
	w := bufio.NewWriter(a.stdout)
	w.WriteString(ans.Token)
	w.WriteByte(0)
	if ans.All {
		w.WriteString("/")
		w.WriteByte(0)
	} else {
		for _, p := range ans.Paths {
			w.WriteString(p)
			w.WriteByte(0)
		}
	}
	return w.Flush()
}

// fsmonitorAnswer asks the daemon serving the mount that holds the
// working directory.
func (a *app) fsmonitorAnswer(token string) fusefs.FSMonitorAnswer {
	cwd, err := filepath.Abs(a.cwd)
	if err != nil {
		return fsmonitorUnknown()
	}
	mp, dev, ok := acyclicfsMountOf(cwd)
	if !ok {
		return fsmonitorUnknown()
	}
	prefix, err := filepath.Rel(mp, cwd)
	if err != nil || prefix == ".." || strings.HasPrefix(prefix, "../") {
		return fsmonitorUnknown()
	}
	if prefix == "." {
		prefix = ""
	}
	dir, err := a.storeDir()
	if err != nil {
		return fsmonitorUnknown()
	}
	c := newClient(dir)
	c.http.Timeout = 10 * time.Second
	var ans fusefs.FSMonitorAnswer
	if err := c.call(context.Background(), "/fsmonitor", daemon.FSMonitorRequest{Mountpoint: mp, Dev: dev, Prefix: filepath.ToSlash(prefix), Token: token}, &ans); err != nil || ans.Token == "" {
		return fsmonitorUnknown()
	}
	return ans
}

// acyclicfsMountOf finds, in mountinfo, the innermost mount holding path
// and reports its mountpoint and device if it is an acyclicfs mount. It
// asks nothing of the mount itself.
func acyclicfsMountOf(path string) (mp, dev string, ours bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	best, bestDev, bestOurs := "", "", false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp != "/" && path != mp && !strings.HasPrefix(path, mp+"/") {
			continue
		}
		if len(mp) < len(best) {
			continue
		}
		_, post, _ := strings.Cut(line, " - ")
		pf := strings.Fields(post)
		// Later lines mount over earlier ones at the same place.
		best, bestDev = mp, fields[2]
		bestOurs = len(pf) >= 2 && pf[0] == "fuse.acyclicfs" && strings.HasPrefix(pf[1], "acyclicfs")
	}
	return best, bestDev, bestOurs && best != ""
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			okOct := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					okOct = false
					break
				}
				v = v*8 + (c - '0')
			}
			if okOct {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
