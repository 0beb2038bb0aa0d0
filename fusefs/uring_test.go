package fusefs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onCPU runs f on a thread bound to cpu, so that its requests go to that
// CPU's io_uring queue.
func onCPU(cpu int, f func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &old)
	f()
	return nil
}

// A lock wait (SETLKW) is answered off its queue's thread: while one
// waits, further requests from the same CPU are answered, including the
// one that releases the lock. Answered inline, the release would queue
// behind the wait for ever.
func TestUringLockWaitDoesNotBlockItsQueue(t *testing.T) {
	needUring(t)
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"f": "x"})
	m, mnt := mountT(t, objs, root, &mountOpts{uring: true})
	p := filepath.Join(mnt, "f")
	holder, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	if err := unix.Flock(int(holder.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		if err := onCPU(0, func() { got <- unix.Flock(int(waiter.Fd()), unix.LOCK_EX) }); err != nil {
			got <- err
		}
	}()
	// The waiter's SETLKW reaches the daemon: wait until it is in flight.
	deadline := time.Now().Add(10 * time.Second)
	for m.lockWaits.Load() == 0 {
		if len(got) > 0 {
			t.Fatalf("flock returned while the other description held the lock: %v", <-got)
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting flock never reached the daemon")
		}
		time.Sleep(time.Millisecond) // no event tells that a lock request is blocked in the kernel
	}
	before := m.UringRequests()
	served := make(chan error, 1)
	go func() {
		var ferr error
		if err := onCPU(0, func() {
			for i := range 20 {
				if _, ferr = os.Stat(filepath.Join(mnt, "f")); ferr != nil {
					return
				}
				if ferr = os.WriteFile(filepath.Join(mnt, "g"), []byte{byte(i)}, 0o644); ferr != nil {
					return
				}
			}
		}); err != nil {
			ferr = err
		}
		served <- ferr
	}()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("a request from the waiter's CPU while the lock waits: %v", err)
		}
	case <-time.After(10 * time.Second):
		_ = unix.Flock(int(holder.Fd()), unix.LOCK_UN) // let the test unwind
		t.Fatal("requests from the waiter's CPU were not answered while its lock waited")
	}
	if m.UringRequests() == before {
		t.Fatal("the requests made while the lock waited did not go over io_uring")
	}
	if err := unix.Flock(int(holder.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiting flock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting flock did not get the lock after its release")
	}
}

// PreferUring serves over io_uring where the kernel offers it.
func TestPreferUringServesOverRings(t *testing.T) {
	needUring(t)
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"f": "x"})
	m, mnt := mountT(t, objs, root, &mountOpts{preferUring: true})
	if got := m.Transport(); got != "io_uring" {
		t.Fatalf("Transport() = %q, want io_uring", got)
	}
	before := m.UringRequests()
	if b, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(b) != "x" {
		t.Fatalf("read f: %q, %v", b, err)
	}
	if m.UringRequests() == before {
		t.Fatal("reading a file through the mount sent no request over the rings")
	}
}

// A kernel that offers io_uring at INIT but refuses the rings' setup
// (io_uring turned off by sysctl, say): with PreferUring the aborted
// mount is taken down and the view mounted again over /dev/fuse, fully
// usable; with Uring alone the mount fails with ErrUringUnavailable and
// leaves no mount behind.
func TestPreferUringFallsBackWhenRingsFail(t *testing.T) {
	needUring(t)
	uringSetupFault = func() error { return errors.New("injected: io_uring_setup: operation not permitted") }
	t.Cleanup(func() { uringSetupFault = nil })
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"d/f": "x"})

	mnt := t.TempDir()
	_, err := MountAt(mnt, Config{Objects: objs, Root: root, StateDir: t.TempDir(), Uring: true})
	if !errors.Is(err, ErrUringUnavailable) {
		t.Fatalf("Uring with failing rings: err = %v, want ErrUringUnavailable", err)
	}
	if mounted(t, mnt) {
		t.Fatalf("a failed mount left %s mounted", mnt)
	}

	m, mnt := mountT(t, objs, root, &mountOpts{preferUring: true})
	if got := m.Transport(); got != "dev-fuse" {
		t.Fatalf("Transport() = %q, want dev-fuse", got)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "d", "f")); err != nil || string(b) != "x" {
		t.Fatalf("read d/f: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "d", "g"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m.UringRequests() != 0 {
		t.Fatalf("%d requests over rings that were never set up", m.UringRequests())
	}
}

// mounted reports whether dir is a mountpoint (in /proc/self/mountinfo).
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// slowAdmitter admits everyone but never "now": as for a tracker that has
// not seen a pid yet, every tool request over io_uring is answered off its
// queue's thread.
type slowAdmitter struct{}

func (slowAdmitter) Admit(uint32) error        { return nil }
func (slowAdmitter) AdmitsNow(pid uint32) bool { return pid == 0 }

// The warm-up's walkers are admitted without a lease, so their listings
// over io_uring are answered on the queue's thread: a handful of requests
// (the mount's own probe, say) go off the thread, not one or more per
// directory listed.
func TestUringWarmUpAnsweredInline(t *testing.T) {
	needUring(t)
	objs := newFakeObjects(t)
	root := objs.build(t, gridSpec(40, 5, 3, "d%02d", "f%02d"))
	m, _ := mountT(t, objs, root, &mountOpts{uring: true, admitter: slowAdmitter{}, warm: 10000})
	waitWarm(t, m)
	if n, _ := m.Warmed(); n < 200 {
		t.Fatalf("warm-up listed %d names, want all 240", n)
	}
	if off := m.uringOffThread(); off > 10 {
		t.Fatalf("%d requests answered off their queue's thread during a warm-up of 41 directories; want the walkers' answered inline", off)
	}
}
