// Command acyclicfs-fsmonitor is git's fsmonitor hook for acyclicfs
// mounts, as a binary of its own: git starts the hook for every status,
// and this one starts in about a millisecond, where `acyclicfs fsmonitor`
// (the same answer, internal/fsmhook) first initializes every package of
// the full CLI. A mount points core.fsmonitor at it when it lies beside
// the acyclicfs binary (docs/git.md "fsmonitor"):
//
//	acyclicfs-fsmonitor SOCKET 2 TOKEN
//
// SOCKET is the store daemon's socket; git appends the protocol version
// and the token. Anything it cannot answer exactly gets "/".
package main

import (
	"fmt"
	"os"

	"github.com/acyclicfs/acyclicfs/internal/fsmhook"
)

func main() {
	args := os.Args[1:]
	if len(args) < 2 || len(args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: acyclicfs-fsmonitor SOCKET VERSION [TOKEN]")
		os.Exit(2)
	}
	if args[1] != "2" {
		fmt.Fprintf(os.Stderr, "acyclicfs-fsmonitor: hook protocol version %q is not supported (only 2)\n", args[1])
		os.Exit(2)
	}
	token := ""
	if len(args) == 3 {
		token = args[2]
	}
	cwd, err := os.Getwd()
	ans := fsmhook.Unknown()
	if err == nil {
		ans = fsmhook.Query(args[0], cwd, token)
	}
	if err := fsmhook.Print(os.Stdout, ans); err != nil {
		fmt.Fprintln(os.Stderr, "acyclicfs-fsmonitor:", err)
		os.Exit(1)
	}
}
