package fusefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

type recordingAdmitter struct {
	mu     sync.Mutex // protects pids and refuse
	pids   map[uint32]bool
	refuse error
}

func (a *recordingAdmitter) Admit(pid uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pids[pid] = true
	return a.refuse
}

func TestAdmitter(t *testing.T) {
	objs := newFakeObjects(t)
	adm := &recordingAdmitter{pids: map[uint32]bool{}}
	_, mnt := mountT(t, objs, objs.build(t, spec{"a": "x"}), &mountOpts{admitter: adm})
	mustWrite(t, filepath.Join(mnt, "b"), "y")
	adm.mu.Lock()
	saw := 0
	for pid := range adm.pids {
		// The kernel reports the calling thread's id; it belongs to us.
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", pid)); err == nil {
			saw++
		}
	}
	adm.refuse = fmt.Errorf("window reconciling: %w", ErrNotAdmitted)
	adm.mu.Unlock()
	if saw == 0 {
		t.Fatalf("admitter never saw one of our threads: %v", adm.pids)
	}
	_, err := os.Lstat(filepath.Join(mnt, "new-name"))
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("refused request: %v, want EAGAIN", err)
	}
	adm.mu.Lock()
	adm.refuse = errors.New("boom")
	adm.mu.Unlock()
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); !errors.Is(err, syscall.EIO) {
		t.Fatalf("refused mkdir: %v, want EIO", err)
	}
	adm.mu.Lock()
	adm.refuse = nil
	adm.mu.Unlock()
}

func TestToErrno(t *testing.T) {
	cases := []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{fmt.Errorf("x: %w", syscall.ENOTEMPTY), syscall.ENOTEMPTY},
		{&os.PathError{Op: "open", Path: "p", Err: syscall.EACCES}, syscall.EACCES},
		{fmt.Errorf("a: %w", os.ErrNotExist), syscall.ENOENT},
		{fmt.Errorf("a: %w", ErrNotAdmitted), syscall.EAGAIN},
		{errors.New("other"), syscall.EIO},
	}
	for _, c := range cases {
		if got := toErrno(c.err); got != c.want {
			t.Errorf("toErrno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
