package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/lockfile"
)

func TestTaskState(t *testing.T) {
	for stat, want := range map[string]byte{
		"12 (acyclicfs) S 1 12":       'S',
		"12 (odd ) Z (name) D 1 12":   'D', // the name may hold ") Z ("
		"13 (acyclicfs) Z 1 12 0 0 0": 'Z',
		"garbage":                     0,
		"1 (x)":                       0,
	} {
		if got := taskState([]byte(stat)); got != want {
			t.Errorf("taskState(%q) = %q, want %q", stat, got, want)
		}
	}
}

func TestSigkillPending(t *testing.T) {
	// Fields 3 to 30, then the pending set (31st), then more.
	stat := func(name, pending string) string {
		f := make([]string, 0, 40)
		f = append(f, "D")
		for range 27 {
			f = append(f, "0")
		}
		return "77 (" + name + ") " + strings.Join(append(f, pending, "0", "0", "0"), " ")
	}
	for s, want := range map[string]bool{
		stat("acyclicfs", "256"):   true,
		stat("a) D (b", "256"):     true,  // the name may hold ") D ("
		stat("acyclicfs", "16640"): true,  // with SIGINT's bit
		stat("acyclicfs", "128"):   false, // SIGSEGV's bit
		stat("acyclicfs", "0"):     false,
		"77 (x) D 1 2":             false,
		"garbage":                  false,
	} {
		if got := sigkillPending([]byte(s)); got != want {
			t.Errorf("sigkillPending(%q) = %v, want %v", s, got, want)
		}
	}
	// This process's own stat parses, and shows nothing pending.
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip(err)
	}
	if sigkillPending(b) {
		t.Fatalf("/proc/self/stat shows SIGKILL pending: %s", b)
	}
}

// TestDying: a live process is not dying; a zombie is; a pid that does
// not exist is not (nothing holds a lock then).
func TestDying(t *testing.T) {
	if dying(os.Getpid()) {
		t.Fatal("this live process counts as dying")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	pid := cmd.Process.Pid
	if dying(pid) {
		t.Fatal("a sleeping child counts as dying")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Unreaped, it becomes a zombie: no event tells when.
	deadline := time.Now().Add(10 * time.Second)
	for !dying(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("killed child %d not seen as dying within 10s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Wait()
	if dying(pid) {
		t.Fatal("a reaped pid counts as dying")
	}
}

// TestReapDeadLeavesLiveDaemons: no lock file, a free lock, a lock held by
// a live process: ReapDead does nothing and says nothing.
func TestReapDeadLeavesLiveDaemons(t *testing.T) {
	dir := t.TempDir()
	if notes, err := ReapDead(dir); err != nil || notes != nil {
		t.Fatalf("no daemon ever: %q %v", notes, err)
	}
	lock := lockfile.New(filepath.Join(dir, LockName), os.O_RDONLY|os.O_CREATE)
	if ok, err := lock.TryLock(lockfile.Exclusive); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if err := os.WriteFile(filepath.Join(dir, PIDName), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeConns(filepath.Join(dir, MountsName), []ConnRecord{{Workspace: "w", Mountpoint: dir, Conn: "999999"}}); err != nil {
		t.Fatal(err)
	}
	if notes, err := ReapDead(dir); err != nil || notes != nil {
		t.Fatalf("a live holder: %q %v", notes, err)
	}
	if err := lock.Unlock(); err != nil {
		t.Fatal(err)
	}
	if notes, err := ReapDead(dir); err != nil || notes != nil {
		t.Fatalf("a free lock: %q %v", notes, err)
	}
	recs, err := readConns(filepath.Join(dir, MountsName))
	if err != nil || len(recs) != 1 || recs[0].Conn != "999999" {
		t.Fatalf("readConns: %+v %v", recs, err)
	}
	// Not a mountpoint: nothing to abort.
	if _, ok := connAt(recs[0]); ok {
		t.Fatalf("connAt found a FUSE connection at %s", dir)
	}
}

// BenchmarkReapDeadLive is what every CLI command pays when a live daemon
// serves the store: a flock attempt, the pid file, the holder's threads.
func BenchmarkReapDeadLive(b *testing.B) {
	dir := b.TempDir()
	lock := lockfile.New(filepath.Join(dir, LockName), os.O_RDONLY|os.O_CREATE)
	if ok, err := lock.TryLock(lockfile.Exclusive); !ok || err != nil {
		b.Fatalf("lock: %v %v", ok, err)
	}
	defer lock.Unlock()
	if err := os.WriteFile(filepath.Join(dir, PIDName), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if notes, err := ReapDead(dir); notes != nil || err != nil {
			b.Fatalf("%q %v", notes, err)
		}
	}
}
