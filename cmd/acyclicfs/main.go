// Command acyclicfs is the CLI of the acyclicfs workspace filesystem: see
// docs/cli.md and SPEC.md for the contract it implements.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
