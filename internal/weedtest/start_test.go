package weedtest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/testport"
)

// A port taken by a process outside testport's reservations: the first
// start cannot bind it, and Start retries on fresh ports.
func TestStartRetriesOnATakenPort(t *testing.T) {
	if Binary() == "" {
		t.Skip("no weed binary")
	}
	var taken net.Listener
	calls := 0
	takeHook = func(t testing.TB, n int) []int {
		calls++
		ports := testport.Take(t, n)
		if calls == 1 {
			// Someone else listens on the S3 port between the pick and the start.
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[6])))
			if err != nil {
				t.Fatal(err)
			}
			taken = l
		}
		return ports
	}
	t.Cleanup(func() { takeHook = nil })
	s := Start(t)
	defer taken.Close()
	if calls != 2 {
		t.Fatalf("ports taken %d times, want 2 (one retry)", calls)
	}
	if s.Endpoint == taken.Addr().String() {
		t.Fatalf("server on the taken endpoint %s", s.Endpoint)
	}
	if _, err := s.Client().ListBuckets(t.Context()); err != nil {
		t.Fatalf("S3 after the retry: %v", err)
	}
}

// A server that exits at once fails the start at once, with its output,
// instead of after the readiness limit.
func TestStartFailsFastWhenTheServerExits(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "weed")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'F1207 cannot start: boom' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: dir}
	for _, d := range []string{"data", "log"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s.takePorts()
	began := time.Now()
	err := s.start()
	if err == nil {
		t.Fatal("a server that exits started")
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("the start took %v to see the server exit", d)
	}
	if !strings.Contains(err.Error(), "exited before it answered") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("error does not say the server exited, with its log: %v", err)
	}
	if errors.Is(err, errBind) {
		t.Errorf("an exit without a bind failure taken for one: %v", err)
	}
}
