package sessions

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeProc is a minimal proc tree: <root>/<pid>/stat, optional status, cwd
// and fd/<n> symlinks.
type fakeProc struct {
	t    testing.TB
	root string
}

func newFakeProc(t testing.TB) *fakeProc {
	return &fakeProc{t: t, root: t.TempDir()}
}

func statLine(pid int, comm string, pgid, sid int, start uint64) string {
	return fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 %d 123456 789 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
		pid, comm, pgid, sid, start)
}

// add creates process pid in group pgid and session sid, with start time
// pid*7 so that a re-added pid can be given a different one via addStart.
func (f *fakeProc) add(pid, pgid, sid int) { f.addStart(pid, pgid, sid, uint64(pid)*7) }

func (f *fakeProc) addStart(pid, pgid, sid int, start uint64) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	line := statLine(pid, "tool) (x y", pgid, sid, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// thread makes tid a thread of process tgid (status Tgid line).
func (f *fakeProc) thread(tid, tgid int) {
	f.t.Helper()
	st := fmt.Sprintf("Name:\tx\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nNgid:\t0\nPid:\t%d\n", tgid, tid)
	if err := os.WriteFile(filepath.Join(f.root, strconv.Itoa(tid), "status"), []byte(st), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) remove(pid int) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.root, strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) setCwd(pid int, target string) {
	f.t.Helper()
	p := filepath.Join(f.root, strconv.Itoa(pid), "cwd")
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) setFd(pid, fd int, target string) {
	f.t.Helper()
	p := filepath.Join(f.root, strconv.Itoa(pid), "fd", strconv.Itoa(fd))
	_ = os.Remove(p)
	if target == "" {
		return
	}
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
}

// recorder is a Handler that counts calls and flags contract violations:
// Begin for an owner that holds a lease, End without one, or Begin and End
// overlapping for one owner.
type recorder struct {
	mu         sync.Mutex // guards every field below
	begins     map[Owner]int
	ends       map[Owner]int
	active     map[Owner]bool
	inCall     map[Owner]bool
	violations []string
	failBegin  map[Owner]error

	// beginHook/endHook, when set, run inside the call (outside mu).
	beginHook func(Owner)
	endHook   func(Owner)
}

var _ Handler = (*recorder)(nil)

func newRecorder() *recorder {
	return &recorder{
		begins:    map[Owner]int{},
		ends:      map[Owner]int{},
		active:    map[Owner]bool{},
		inCall:    map[Owner]bool{},
		failBegin: map[Owner]error{},
	}
}

func (r *recorder) enter(o Owner, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inCall[o] {
		r.violations = append(r.violations, what+" overlaps another call for "+string(o))
	}
	r.inCall[o] = true
}

func (r *recorder) Begin(o Owner) error {
	r.enter(o, "Begin")
	if h := r.beginHook; h != nil {
		h(o)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inCall[o] = false
	r.begins[o]++
	if err := r.failBegin[o]; err != nil {
		return err
	}
	if r.active[o] {
		r.violations = append(r.violations, "Begin while active: "+string(o))
	}
	r.active[o] = true
	return nil
}

func (r *recorder) End(o Owner) {
	r.enter(o, "End")
	if h := r.endHook; h != nil {
		h(o)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inCall[o] = false
	r.ends[o]++
	if !r.active[o] {
		r.violations = append(r.violations, "End without lease: "+string(o))
	}
	r.active[o] = false
}

func (r *recorder) counts(o Owner) (begins, ends int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.begins[o], r.ends[o]
}

func (r *recorder) check(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Errorf("handler contract violated: %s", v)
	}
}

// fakeClock is an injectable clock.
type fakeClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// newTestTracker builds a Tracker over fp without a background loop; the
// test drives sweeps. It closes the tracker and checks the recorder at
// cleanup.
func newTestTracker(t testing.TB, fp *fakeProc, rec *recorder, mod func(*Config)) *Tracker {
	t.Helper()
	cfg := Config{
		Handler:       rec,
		ProcRoot:      fp.root,
		SweepInterval: -1,
		MountPoint:    "/mnt/ws",
	}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tr.Close()
		rec.check(t)
	})
	return tr
}

func mustAdmit(t testing.TB, tr *Tracker, pid int) {
	t.Helper()
	if err := tr.Admit(uint32(pid)); err != nil {
		t.Fatalf("Admit(%d): %v", pid, err)
	}
}

var errTestBegin = errors.New("test: begin refused")
