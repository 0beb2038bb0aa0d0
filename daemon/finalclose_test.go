package daemon

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/fusefs"
	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// The final close (capture -> publish -> finish -> rebase -> switch view)
// driven without FUSE: a real store in t.TempDir (its window coordinator
// included) and a fake view standing for the mount's overlay.
//
// Each test runs on two metadata planes: the store's meta.db (bbolt) and
// an in-memory plane (meta.NewMemory, store.Options.Meta) with the blobs
// in t.TempDir. On both, the window coordinator is window.MetaStore over
// the store's own plane (workspace.Manager.Windows), never
// window.MemoryStore: a lease's gate must live in the same transactional
// space as the heads, because store.CompareAndAppend checks the permit
// against the gate in the transaction that appends the head. A
// MemoryStore keeps its windows apart from the store, so closing or
// expiring a lease there cannot fence an append already in flight on the
// store (see daemon/doc.go).

// planes are the metadata planes the final-close tests run on; nil plane:
// the store's meta.db.
var planes = []struct {
	name  string
	plane func() meta.Store
}{
	{"bolt", nil},
	{"memory", func() meta.Store { return meta.NewMemory() }},
}

// onPlanes runs test once per metadata plane, with the workspace options
// that open a store on it.
func onPlanes(t *testing.T, test func(t *testing.T, opt workspace.Options)) {
	for _, p := range planes {
		t.Run(p.name, func(t *testing.T) {
			opt := workspace.Options{NoSync: true}
			if p.plane != nil {
				opt.Meta = p.plane()
			}
			test(t, opt)
		})
	}
}

// fakeView is a mount's overlay: a capture returns root (changed while
// set), and switches are recorded.
type fakeView struct {
	mu       sync.Mutex
	root     store.ID // what the next capture returns; zero: nothing changed
	err      error    // the next captures fail with this
	captures int
	switched []store.ID
	// during runs inside each capture (before it returns).
	during func()
	// onSwitch, if set, is called with each switch request.
	onSwitch func(root store.ID)
}

func (v *fakeView) HoldWarm() func() { return func() {} }

func (v *fakeView) CaptureDeferredLinks() (store.ID, [][]string, bool, []*store.Tree, func(), error) {
	v.mu.Lock()
	v.captures++
	root, err, during := v.root, v.err, v.during
	v.mu.Unlock()
	if during != nil {
		during()
	}
	if err != nil {
		return store.ID{}, nil, false, nil, nil, err
	}
	if root.IsZero() {
		return store.ID{}, nil, false, nil, func() {}, nil
	}
	done := func() {
		v.mu.Lock()
		v.root = store.ID{} // the overlay is now the published head
		v.mu.Unlock()
	}
	return root, nil, true, nil, done, nil
}

func (v *fakeView) FreeScratch() (int64, error)       { return 0, nil }
func (v *fakeView) TakeWriters() []fusefs.PathWriters { return nil }
func (v *fakeView) WritersRecorded()                  {}
func (v *fakeView) PendingBytes() int64               { return 1 << 20 }

func (v *fakeView) SwitchViewQueuedLinks(root store.ID, _ [][]string) (<-chan struct{}, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.switched = append(v.switched, root)
	if v.onSwitch != nil {
		v.onSwitch(root)
	}
	ch := make(chan struct{})
	close(ch)
	return ch, nil
}

// tb is what the fixture needs of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type fixture struct {
	t    tb
	dir  string
	opt  workspace.Options // how the store was opened (and is reopened)
	m    *workspace.Manager
	d    *Daemon
	s    *Mount
	v    *fakeView
	edit store.ID // root of the tree the "mount" wrote: parent's files plus edit.txt
}

const testTTL = 300 * time.Millisecond

// newFixture makes workspaces p and its child c, and serves c through a
// fake view. edit is a tree c's session "writes".
func newFixture(t *testing.T, opt workspace.Options) *fixture {
	t.Helper()
	f := newFixtureOn(t, t.TempDir(), opt)
	t.Cleanup(f.close)
	return f
}

// close stops what the fixture started.
func (f *fixture) close() {
	f.s.goneOnce.Do(func() { close(f.s.gone) })
	f.m.Close()
}

func newFixtureIn(t tb, dir string) *fixture {
	t.Helper()
	return newFixtureOn(t, dir, workspace.Options{NoSync: true})
}

// newFixtureOn is newFixtureIn with the store opened with opt.
func newFixtureOn(t tb, dir string, opt workspace.Options) *fixture {
	t.Helper()
	m, err := workspace.Open(filepath.Join(dir, "store"), opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "store", "meta.db")); (opt.Meta != nil) != errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("meta.db with plane %T: %v", opt.Meta, err)
	}
	src := filepath.Join(dir, "src")
	write(t, src, "a.txt", "a\n")
	if _, _, err := m.Create(context.Background(), "p", src); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Fork("p", "c", ""); err != nil {
		t.Fatal(err)
	}
	write(t, src, "edit.txt", "edited in the mount\n")
	if _, _, err := m.Create(context.Background(), "edits", src); err != nil {
		t.Fatal(err)
	}
	e, _ := m.Get("edits")
	edit, err := m.RootOf(e.Head)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, dir: dir, opt: opt, m: m, edit: edit}
	f.serve()
	return f
}

// serve (re)builds the daemon and c's mount on f.m.
func (f *fixture) serve() {
	f.t.Helper()
	f.d = &Daemon{m: f.m, dir: f.m.Dir(), logger: log.New(io.Discard, "", 0), mounts: map[string]*Mount{}, quit: make(chan struct{})}
	f.m.SetHooks(workspace.Hooks{ParentAdvanced: f.d.parentAdvanced})
	w, err := f.m.Get("c")
	if err != nil {
		f.t.Fatal(err)
	}
	stateDir := filepath.Join(f.m.Dir(), workspace.MountScratchDir, "c")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		f.t.Fatal(err)
	}
	f.v = &fakeView{}
	f.s = &Mount{d: f.d, ws: "c", mp: filepath.Join(f.dir, "mnt"), stateDir: stateDir, ttl: testTTL,
		view: f.v, lock: make(chan struct{}, 1), leases: map[sessions.Owner]*heldLease{}, pinned: w.Head, gone: make(chan struct{})}
	if err := f.m.PutMountRecord(workspace.MountRecord{Workspace: "c", Mountpoint: f.s.mp, StateDir: stateDir,
		Pinned: w.Head.String(), DaemonPID: os.Getpid(), Since: time.Now().UnixMilli()}); err != nil {
		f.t.Fatal(err)
	}
	f.d.mounts["c"] = f.s
}

func write(t tb, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// session opens a lease as a tool session's first request does.
func (f *fixture) session(owner string) {
	f.t.Helper()
	if err := f.s.Begin(sessions.Owner(owner)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) phase() window.PhaseKind {
	f.t.Helper()
	snap, err := f.m.Windows().Inspect(context.Background(), "c")
	if err != nil {
		f.t.Fatal(err)
	}
	return snap.Phase.Kind
}

// kinds counts c's generations by kind.
func (f *fixture) kinds() map[store.GenKind]int {
	f.t.Helper()
	log, err := f.m.Log("c", 100)
	if err != nil {
		f.t.Fatal(err)
	}
	n := map[store.GenKind]int{}
	for _, e := range log {
		n[e.Kind]++
	}
	return n
}

// hasFile reports whether c's head has name at its root.
func (f *fixture) hasFile(name string) bool {
	f.t.Helper()
	w, err := f.m.Get("c")
	if err != nil {
		f.t.Fatal(err)
	}
	root, err := f.m.RootOf(w.Head)
	if err != nil {
		f.t.Fatal(err)
	}
	tr, err := f.m.Store().GetTree(root)
	if err != nil {
		f.t.Fatal(err)
	}
	_, ok := tr.Lookup(name)
	return ok
}

// moveParent commits a new file into p.
func (f *fixture) moveParent(name string) store.ID {
	f.t.Helper()
	src := filepath.Join(f.dir, "src-"+name)
	write(f.t, src, "a.txt", "a\n")
	write(f.t, src, name, name+"\n")
	gen, _, err := f.m.Commit(context.Background(), "p", src)
	if err != nil {
		f.t.Fatal(err)
	}
	return gen
}

func TestFinalClosePublishesAndSwitches(t *testing.T) {
	onPlanes(t, testFinalClosePublishesAndSwitches)
}

func testFinalClosePublishesAndSwitches(t *testing.T, opt workspace.Options) {
	f := newFixture(t, opt)
	f.session("sid:1")
	f.v.root = f.edit
	res, err := f.s.EndLease("sid:1")
	if err != nil {
		t.Fatal(err)
	}
	w, _ := f.m.Get("c")
	if !f.hasFile("edit.txt") || res.Head != w.Head {
		t.Fatalf("the capture was not published: result %+v, head %s", res, w.Head)
	}
	if got := f.kinds()[store.GenCapture]; got != 1 {
		t.Errorf("%d capture generations, want 1", got)
	}
	if len(f.v.switched) != 1 || f.s.pinned != w.Head {
		t.Errorf("view switched %d times, pinned %s; want once, at the head %s", len(f.v.switched), f.s.pinned, w.Head)
	}
	if k := f.phase(); k != window.PhaseIdle {
		t.Errorf("window %s after the final close, want idle", k)
	}
}

// Only the last lease's end closes finally: with two sessions the first
// end captures nothing.
func TestFinalCloseOnlyAtLastLease(t *testing.T) { onPlanes(t, testFinalCloseOnlyAtLastLease) }

func testFinalCloseOnlyAtLastLease(t *testing.T, opt workspace.Options) {
	f := newFixture(t, opt)
	f.session("sid:1")
	f.session("sid:2")
	f.v.root = f.edit
	res, err := f.s.EndLease("sid:1")
	if err != nil || res.Outcome != workspace.OutcomeStillActive {
		t.Fatalf("first end: %v %v, want still active", res.Outcome, err)
	}
	if f.v.captures != 0 || f.hasFile("edit.txt") {
		t.Fatal("a lease that was not the last captured")
	}
	if _, err := f.s.EndLease("sid:2"); err != nil {
		t.Fatal(err)
	}
	if !f.hasFile("edit.txt") || f.v.captures != 1 {
		t.Fatalf("last end: published %v after %d captures", f.hasFile("edit.txt"), f.v.captures)
	}
}

// A capture that fails publishes nothing, ends the lease all the same
// (the window does not stay pinned), keeps the view, reports the failure;
// the retry stores it.
func TestFinalCloseCaptureFails(t *testing.T) { onPlanes(t, testFinalCloseCaptureFails) }

func testFinalCloseCaptureFails(t *testing.T, opt workspace.Options) {
	f := newFixture(t, opt)
	f.session("sid:1")
	before, _ := f.m.Get("c")
	f.v.root = f.edit
	f.v.err = &os.PathError{Op: "write", Path: "blob", Err: syscall.ENOSPC}
	_, err := f.s.EndLease("sid:1")
	var ns *noSpaceError
	if !errors.As(err, &ns) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("EndLease = %v, want a no-space error", err)
	}
	after, _ := f.m.Get("c")
	if after.Head != before.Head {
		t.Fatal("a failed capture moved the head")
	}
	if k := f.phase(); k != window.PhaseIdle {
		t.Errorf("window %s after a failed final close, want idle", k)
	}
	if len(f.v.switched) != 0 {
		t.Error("the view switched away from changes no capture stored")
	}
	if st := f.s.captureState.Load(); st == nil || st.State != "failed" || !st.NoSpace || st.Attempts != 1 {
		t.Fatalf("status shows %+v, want a failed no-space capture", st)
	}
	// A new session is admitted while the failure stands.
	f.session("sid:2")
	if _, err := f.s.EndLease("sid:2"); err == nil {
		t.Fatal("a second final close with the capture still failing succeeded")
	}
	if st := f.s.captureState.Load(); st.Attempts != 2 {
		t.Errorf("attempts %d, want 2", st.Attempts)
	}
	// Space comes back: the retry stores the changes and switches the view.
	f.v.mu.Lock()
	f.v.err = nil
	f.v.mu.Unlock()
	f.s.acquire(0)
	f.s.retryLocked()
	f.s.release()
	if !f.hasFile("edit.txt") || f.s.failed != nil {
		t.Fatalf("the retry did not store the capture (failed: %v)", f.s.failed)
	}
	if st := f.s.captureState.Load(); st == nil || st.State != "stored" {
		t.Errorf("status shows %+v after the retry, want stored", st)
	}
	if got := f.kinds()[store.GenCapture]; got != 1 {
		t.Errorf("%d capture generations, want 1", got)
	}
}

// A permit that expired before the publish is fenced: nothing is
// published under it, and the daemon reclaims the window and publishes
// once under that claim.
func TestFinalClosePublishFenced(t *testing.T) { onPlanes(t, testFinalClosePublishFenced) }

func testFinalClosePublishFenced(t *testing.T, opt workspace.Options) {
	f := newFixture(t, opt)
	f.session("sid:1")
	hl := f.s.leases["sid:1"]
	lease := hl.holder.Lease()
	// The holder stops renewing (a stalled daemon) and the lease expires
	// before the capture is published.
	hl.holder.Stop()
	f.v.during = func() {
		if f.v.captures == 1 {
			waitExpired(t, f.m, "c", lease)
		}
	}
	f.v.root = f.edit
	reached := 0 // captures that reached the publish
	disarm := failpoint.ArmForTest(func(string) { reached++ }, "reconcile.after-capture")
	defer disarm()
	permit := lease.Permit
	if err := f.s.captureAndPublishOnce(&permit); !workspace.IsFenced(err) {
		t.Fatalf("publish under an expired permit: %v, want fenced", err)
	}
	if f.hasFile("edit.txt") {
		t.Fatal("a fenced publish published")
	}
	// The final close proper: fenced at first, it reclaims the window
	// and publishes once under that claim.
	delete(f.s.leases, "sid:1")
	f.s.acquire(0)
	_, err := f.s.reconcileLast(lease)
	f.s.release()
	if err != nil {
		t.Fatal(err)
	}
	if !f.hasFile("edit.txt") {
		t.Fatal("the reclaimed final close did not publish")
	}
	if got := f.kinds()[store.GenCapture]; got != 1 {
		t.Errorf("%d capture generations, want exactly 1", got)
	}
	if reached != 3 {
		t.Errorf("%d captures reached the publish, want 3 (fenced, fenced in the final close, reclaimed)", reached)
	}
	if k := f.phase(); k != window.PhaseIdle {
		t.Errorf("window %s, want idle", k)
	}
}

// waitExpired waits until lease is past its deadline by the store's
// clock (there is no event for a deadline passing).
func waitExpired(t *testing.T, m *workspace.Manager, ws string, lease window.Lease) {
	t.Helper()
	deadline := time.Now().Add(10 * testTTL)
	for time.Now().Before(deadline) {
		snap, err := m.Windows().Inspect(context.Background(), ws)
		if err != nil {
			t.Fatal(err)
		}
		l, ok := snap.Phase.Leases[lease.ID]
		if !ok || time.Now().UnixMilli() > l.ExpiresAtMillis {
			return
		}
		time.Sleep(time.Until(time.UnixMilli(l.ExpiresAtMillis)) + time.Millisecond)
	}
	t.Fatal("the lease did not expire")
}

// The parent moves while the mount captures: the final close rebases
// onto it exactly once, and the view shows the rebased head.
func TestFinalCloseParentMovesDuringCapture(t *testing.T) {
	onPlanes(t, testFinalCloseParentMovesDuringCapture)
}

func testFinalCloseParentMovesDuringCapture(t *testing.T, opt workspace.Options) {
	f := newFixture(t, opt)
	f.session("sid:1")
	var parentHead store.ID
	f.v.during = func() {
		if f.v.captures == 1 {
			parentHead = f.moveParent("from-parent.txt")
		}
	}
	f.v.root = f.edit
	res, err := f.s.EndLease("sid:1")
	if err != nil {
		t.Fatal(err)
	}
	w, _ := f.m.Get("c")
	if w.Base != parentHead {
		t.Fatalf("c's base %s, want the moved parent %s", w.Base, parentHead)
	}
	if !f.hasFile("edit.txt") || !f.hasFile("from-parent.txt") {
		t.Fatal("the rebased head lacks the capture or the parent's change")
	}
	if got := f.kinds()[store.GenRebase]; got != 1 {
		t.Errorf("%d rebase generations, want exactly 1", got)
	}
	if res.Head != w.Head || f.s.pinned != w.Head || len(f.v.switched) != 1 {
		t.Errorf("result %s, view %s after %d switches; want the head %s once", res.Head, f.s.pinned, len(f.v.switched), w.Head)
	}
	if k := f.phase(); k != window.PhaseIdle {
		t.Errorf("window %s, want idle", k)
	}
}

// crashed stands for the daemon's death at a failpoint.
type crashed struct{ at string }

// A crash between the steps of the final close: recovery of the mount
// record on reopen finishes the work (the published capture kept, the
// pending rebase done once, the window idle, the record gone).
func TestFinalCloseCrashRecovery(t *testing.T) { onPlanes(t, testFinalCloseCrashRecovery) }

func testFinalCloseCrashRecovery(t *testing.T, opt workspace.Options) {
	for _, c := range []struct {
		point     string
		published bool // the capture was published before the crash
	}{
		{"reconcile.after-capture", false},
		{"reconcile.after-publish", true},
		{"reconcile.before-complete", true},
	} {
		t.Run(c.point, func(t *testing.T) {
			opt := opt
			if opt.Meta != nil {
				opt.Meta = meta.NewMemory() // a fresh store per case, as the TempDir is
			}
			f := newFixture(t, opt)
			f.session("sid:1")
			var parentHead store.ID
			f.v.during = func() { parentHead = f.moveParent("from-parent.txt") }
			f.v.root = f.edit
			disarm := failpoint.ArmForTest(func(name string) { panic(crashed{name}) }, c.point)
			func() {
				defer func() {
					if r, ok := recover().(crashed); !ok || r.at != c.point {
						t.Fatalf("the final close did not reach %s (recovered %v)", c.point, r)
					}
				}()
				_, _ = f.s.EndLease("sid:1")
			}()
			disarm()
			// The process is gone: the store is reopened by the next daemon.
			if err := f.m.Close(); err != nil {
				t.Fatal(err)
			}
			m, err := workspace.Open(filepath.Join(f.dir, "store"), f.opt)
			if err != nil {
				t.Fatal(err)
			}
			f.m = m
			rec, found, err := m.MountRecord("c")
			if err != nil || !found {
				t.Fatalf("mount record after the crash: %v %v", found, err)
			}
			rec.DaemonPID = -1 // a dead daemon's
			d := Offline(m)
			d.logger = log.New(io.Discard, "", 0)
			if _, err := d.RecoverMount(rec); err != nil {
				t.Fatal(err)
			}
			if k := f.phase(); k != window.PhaseIdle {
				t.Errorf("window %s after recovery, want idle", k)
			}
			if _, found, _ := m.MountRecord("c"); found {
				t.Error("the mount record outlived recovery")
			}
			if got := f.hasFile("edit.txt"); got != c.published {
				t.Errorf("capture in the head: %v, want %v", got, c.published)
			}
			w, _ := m.Get("c")
			if w.Base != parentHead || !f.hasFile("from-parent.txt") {
				t.Errorf("c's base %s, want the parent's %s: the pending rebase was not finished", w.Base, parentHead)
			}
			if got := f.kinds()[store.GenRebase]; got != 1 {
				t.Errorf("%d rebase generations, want exactly 1", got)
			}
			if got := f.kinds()[store.GenCapture]; c.published && got != 1 {
				t.Errorf("%d capture generations, want 1", got)
			}
			f.s = &Mount{gone: make(chan struct{})} // for the fixture's cleanup
		})
	}
}
