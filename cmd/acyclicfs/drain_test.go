package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestAcceptClockDrain(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	acc := &acceptClock{Listener: ln}
	defer acc.Close()

	// Nothing accepted: the quiet period from the start is all it waits.
	start := time.Now()
	acc.drain(start, 20*time.Millisecond, time.Second)
	if d := time.Since(start); d < 20*time.Millisecond || d > 500*time.Millisecond {
		t.Errorf("idle drain took %v, want about 20ms", d)
	}

	// An accept during the drain extends it by the quiet period.
	start = time.Now()
	go func() {
		time.Sleep(30 * time.Millisecond)
		acc.last.Store(time.Now().UnixNano()) // as Accept does
	}()
	acc.drain(start, 50*time.Millisecond, time.Second)
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("drain with an accept at 30ms returned after %v, want >= 80ms", d)
	}

	// Accepts that never stop are cut off at the limit.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				acc.last.Store(time.Now().UnixNano())
			}
		}
	}()
	start = time.Now()
	acc.drain(start, 20*time.Millisecond, 100*time.Millisecond)
	if d := time.Since(start); d < 100*time.Millisecond || d > time.Second {
		t.Errorf("busy drain took %v, want the 100ms limit", d)
	}

	// Accept records the time.
	before := acc.last.Load()
	go func() {
		if c, err := net.Dial("unix", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := acc.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if acc.last.Load() <= before {
		t.Error("Accept did not record its time")
	}
}

// TestResetCommandRetried: a connection the exiting daemon never accepted
// is reset; with its socket gone the client knows the command did not run.
func TestResetCommandRetried(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, socketName)
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
	_, err = c.run(runRequest{Args: []string{"status"}})
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
