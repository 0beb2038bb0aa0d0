package sessions

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// TestRealProcessSession runs against the real /proc: a `sleep` in its own
// session opens a lease on its first request and loses it once killed.
func TestRealProcessSession(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Skip("cannot start sleep:", err)
	}
	pid := cmd.Process.Pid
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	owner := MakeOwner(BySID, pid) // setsid makes it its own session leader
	if got, err := OwnerOf("/proc", pid, BySID); err != nil || got != owner {
		t.Fatalf("OwnerOf = %q, %v; want %q", got, err, owner)
	}

	rec := newRecorder()
	tr, err := New(Config{Handler: rec, SweepInterval: -1, IgnorePIDs: []int{os.Getpid()}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Admit(uint32(pid)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Admit(uint32(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	tr.Sweep()
	if b, e := rec.counts(owner); b != 1 || e != 0 {
		t.Fatalf("begins=%d ends=%d while alive, want 1, 0", b, e)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // reap, so /proc/<pid> disappears
	reaped = true
	tr.Sweep()
	if b, e := rec.counts(owner); b != 1 || e != 1 {
		t.Fatalf("begins=%d ends=%d after kill, want 1, 1", b, e)
	}
	if len(rec.begins) != 1 {
		t.Fatalf("unexpected Begins: %v", rec.begins)
	}
	rec.check(t)
}

// TestRealThreadID checks that a request carrying a thread id (as FUSE
// requests do) maps to its process under ByPID and that sweeps keep the
// cache entry although /proc does not list thread ids.
func TestRealThreadID(t *testing.T) {
	self := os.Getpid()
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip("no /proc/self/task")
	}
	tid := 0
	for _, d := range tids {
		if n, err := strconv.Atoi(d.Name()); err == nil && n != self {
			tid = n
			break
		}
	}
	if tid == 0 {
		t.Skip("test process has a single thread")
	}
	rec := newRecorder()
	tr, err := New(Config{Handler: rec, By: ByPID, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Admit(uint32(tid)); err != nil {
		t.Skip("thread exited:", err)
	}
	owner := MakeOwner(ByPID, self)
	if b, _ := rec.counts(owner); b != 1 {
		t.Fatalf("thread %d not attributed to %s: %v", tid, owner, rec.begins)
	}
	tr.Sweep()
	if _, e := rec.counts(owner); e != 0 {
		t.Fatal("own process ended by sweep")
	}
	tr.mu.RLock()
	_, cached := tr.pids[uint32(tid)]
	tr.mu.RUnlock()
	if !cached {
		// The thread may have exited in between; that is not a failure.
		if _, err := os.Stat("/proc/" + strconv.Itoa(tid)); err == nil {
			t.Fatal("sweep pruned a live thread id from the cache")
		}
	}
	rec.check(t)
}
