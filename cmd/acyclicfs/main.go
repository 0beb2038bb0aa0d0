package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// The child side of `acyclicfs run`: set up its mount namespace and
	// become the command (run.go).
	if os.Getenv(envRunChild) == "1" {
		os.Exit(runChild(os.Args[1:], os.Stderr))
	}
	// Ctrl-C (or SIGTERM) cancels the command's context: a long operation
	// that takes one stops cleanly, nothing half-written. The first signal
	// only cancels; a second one ends the process as before.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
