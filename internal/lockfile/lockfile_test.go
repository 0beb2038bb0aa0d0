package lockfile

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const flag = os.O_RDONLY | os.O_CREATE

// holdEnv, set in a re-executed test binary, makes it a lock holder (see
// TestMain): it takes the lock named by the variable ("shared:" or
// "exclusive:" and a path), says "held" on stdout and keeps it until its
// stdin closes or it is killed.
const holdEnv = "LOCKFILE_TEST_HOLD"

func TestMain(m *testing.M) {
	if v := os.Getenv(holdEnv); v != "" {
		os.Exit(hold(v))
	}
	os.Exit(m.Run())
}

func hold(v string) int {
	how, path, _ := strings.Cut(v, ":")
	mode := Exclusive
	if how == "shared" {
		mode = Shared
	}
	ok, err := New(path, flag).TryLock(mode)
	if err != nil || !ok {
		os.Stdout.WriteString("not held\n")
		return 1
	}
	os.Stdout.WriteString("held\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF when the test closes it
	return 0                                          // exit without Unlock: the kernel drops the lock
}

// holder runs a process that holds path's lock in mode until release is
// called (its stdin closes) or kill.
func holder(t *testing.T, path string, mode Mode) (release, kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// GORACE: a race-enabled holder would otherwise linger a second at exit.
	cmd.Env = append(os.Environ(), holdEnv+"="+mode.String()+":"+path, "GORACE=atexit_sleep_ms=0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	wait := func() {
		if !done {
			done = true
			_ = cmd.Wait()
		}
	}
	t.Cleanup(func() { stdin.Close(); wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "held\n" {
		stdin.Close()
		wait()
		t.Fatalf("holder process said %q, want held", line)
	}
	return func() { stdin.Close(); wait() }, func() { _ = cmd.Process.Kill(); wait() }
}

func tryLock(t *testing.T, l *Lock, mode Mode) bool {
	t.Helper()
	ok, err := l.TryLock(mode)
	if err != nil {
		t.Fatalf("TryLock(%s) of %s: %v", mode, l.Path(), err)
	}
	return ok
}

// Two descriptors of one process contend as two processes would: an
// exclusive lock excludes everything, shared locks only an exclusive one.
func TestTwoDescriptorsContend(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	a, b, c := New(p, flag), New(p, flag), New(p, flag)
	if !tryLock(t, a, Exclusive) {
		t.Fatal("first exclusive lock refused")
	}
	if tryLock(t, b, Exclusive) || tryLock(t, b, Shared) {
		t.Fatal("a second descriptor locked a file held exclusively")
	}
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if !tryLock(t, b, Shared) || !tryLock(t, a, Shared) {
		t.Fatal("two shared locks refused after the exclusive one was released")
	}
	if tryLock(t, c, Exclusive) {
		t.Fatal("an exclusive lock taken while shared ones are held")
	}
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	if !tryLock(t, c, Exclusive) {
		t.Fatal("exclusive lock refused once every shared one was released")
	}
	if err := c.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := c.Unlock(); err != nil {
		t.Fatalf("Unlock of an unheld lock: %v", err)
	}
}

// Another process's lock is seen, and dropped by the kernel when that
// process exits or is killed without unlocking.
func TestTwoProcessesContend(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	l := New(p, flag)

	release, _ := holder(t, p, Exclusive)
	if tryLock(t, l, Shared) {
		t.Fatal("shared lock taken while another process holds it exclusively")
	}
	release()
	if !tryLock(t, l, Exclusive) {
		t.Fatal("lock refused after its holder exited")
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}

	_, kill := holder(t, p, Shared)
	if !tryLock(t, l, Shared) {
		t.Fatal("shared lock refused beside another process's shared lock")
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if tryLock(t, l, Exclusive) {
		t.Fatal("exclusive lock taken beside another process's shared lock")
	}
	kill()
	if !tryLock(t, l, Exclusive) {
		t.Fatal("lock refused after its holder was killed")
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// Wait gives up with ErrHeld after its timeout, not before; with no
// timeout it tries exactly once.
func TestWaitTimesOut(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	holder(t, p, Exclusive)
	l := New(p, flag)
	const timeout = 50 * time.Millisecond
	start := time.Now()
	err := l.Wait(context.Background(), Exclusive, timeout, 5*time.Millisecond)
	if waited := time.Since(start); waited < timeout {
		t.Errorf("Wait returned after %v, before its timeout of %v", waited, timeout)
	}
	if !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Wait on a held lock = %v, want ErrHeld naming %s", err, p)
	}
	if err := l.Wait(context.Background(), Shared, 0, time.Hour); !errors.Is(err, ErrHeld) {
		t.Fatalf("Wait without a timeout on a held lock = %v, want ErrHeld at once", err)
	}
	// A retry longer than the timeout does not stretch the wait past it.
	if err := l.Wait(context.Background(), Exclusive, timeout, time.Hour); !errors.Is(err, ErrHeld) {
		t.Fatalf("Wait with a retry past its timeout = %v, want ErrHeld", err)
	}
}

// Wait ends when its context does, with ErrHeld and the context's cause.
func TestWaitCancelled(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	holder(t, p, Exclusive)
	l := New(p, flag)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx, Exclusive, time.Hour, time.Millisecond); !errors.Is(err, ErrHeld) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v, want ErrHeld and context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- l.Wait(ctx, Exclusive, time.Hour, time.Millisecond) }()
	cancel() // the lock stays held: only the cancellation can end the wait
	if err := <-errc; !errors.Is(err, ErrHeld) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled while waiting = %v, want ErrHeld and context.Canceled", err)
	}
}

// Wait takes the lock once its holder lets go.
func TestWaitTakesReleasedLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	release, _ := holder(t, p, Exclusive)
	l := New(p, flag)
	if tryLock(t, l, Exclusive) {
		t.Fatal("lock taken while another process holds it")
	}
	errc := make(chan error, 1)
	go func() { errc <- l.Wait(context.Background(), Exclusive, time.Hour, time.Millisecond) }()
	release()
	if err := <-errc; err != nil {
		t.Fatalf("Wait after the holder exited: %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A file that cannot be opened is an error naming it, not a held lock;
// Stat describes the locked file even after its name is gone.
func TestOpenErrorAndStat(t *testing.T) {
	dir := t.TempDir()
	missing := New(filepath.Join(dir, "missing"), os.O_RDONLY)
	_, err := missing.TryLock(Exclusive)
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrHeld) || !strings.HasPrefix(err.Error(), "open lock ") {
		t.Fatalf("TryLock of a missing file without O_CREATE = %v, want an open error", err)
	}
	if err := missing.Wait(context.Background(), Exclusive, time.Hour, time.Millisecond); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Wait on a missing file = %v, want its open error at once", err)
	}

	p := filepath.Join(dir, "lock")
	l := New(p, flag)
	if !tryLock(t, l, Exclusive) {
		t.Fatal("lock refused")
	}
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("created lock file: %v, %v; want mode 0600", fi, err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	held, err := l.Stat()
	if err != nil || !os.SameFile(held, before) {
		t.Fatalf("Stat of the held, unlinked lock file = %v, %v; want the file locked", held, err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
}
