package fusefs

import (
	"os"
	"path/filepath"
	"runtime"
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
