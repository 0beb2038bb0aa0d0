package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/daemon"
)

// TestUnansweredCallAfterSocketGone: a connection the exiting daemon never
// accepted closes unanswered; the call is classified so, and with the
// socket gone the client knows the command did not run (forward retries).
func TestUnansweredCallAfterSocketGone(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, daemon.SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { // accept, then close without a response: EOF for the client
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c := newClient(dir)
	_, err = c.run(context.Background(), daemon.RunRequest{Args: []string{"status"}})
	if err == nil || !isReset(err) {
		t.Fatalf("run on a closing connection: %v, want a reset", err)
	}
	if c.socketGone() {
		t.Fatal("socket reported gone while it exists")
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	ln.Close()
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still there: %v", err)
	}
	if !c.socketGone() {
		t.Error("socket not reported gone")
	}
	wrapped := fmt.Errorf("forward: %w", &noResponseError{io.EOF})
	if !isReset(wrapped) {
		t.Errorf("isReset(%v) = false", wrapped)
	}
	for _, e := range []error{io.EOF, syscall.ENOENT, errDaemonExiting, http.ErrHandlerTimeout} {
		if isReset(e) {
			t.Errorf("isReset(%v) = true: only a call that got no response is retried", e)
		}
	}
}
