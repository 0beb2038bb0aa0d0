package sessions

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestFirstRequestBeginsOnce(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(100, 100, 100)
	fp.add(101, 100, 100)
	rec := newRecorder()
	tr := newTestTracker(t, fp, rec, nil)

	mustAdmit(t, tr, 100)
	mustAdmit(t, tr, 100)
	mustAdmit(t, tr, 101)
	if b, e := rec.counts("sid:100"); b != 1 || e != 0 {
		t.Fatalf("begins=%d ends=%d, want 1, 0", b, e)
	}
	got := tr.Owners()
	if len(got) != 1 || got[0].Owner != "sid:100" || got[0].Explicit || got[0].Pending {
		t.Fatalf("Owners() = %+v", got)
	}
}

func TestConcurrentFirstRequestsShareOneBegin(t *testing.T) {
	fp := newFakeProc(t)
	const n = 50
	for i := range n {
		fp.add(1000+i, 1000, 1000)
	}
	rec := newRecorder()
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	rec.beginHook = func(Owner) {
		once.Do(func() { close(entered) })
		<-release
	}
	tr := newTestTracker(t, fp, rec, nil)

	var started, done sync.WaitGroup
	errs := make(chan error, n)
	started.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			started.Done()
			errs <- tr.Admit(uint32(1000 + i))
		}()
	}
	started.Wait()
	<-entered
	close(release)
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Admit: %v", err)
		}
	}
	if b, _ := rec.counts("sid:1000"); b != 1 {
		t.Fatalf("begins = %d, want exactly 1", b)
	}
}

func TestWaitersShareBeginError(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(10, 10, 10)
	fp.add(11, 10, 10)
	rec := newRecorder()
	rec.failBegin["sid:10"] = errTestBegin
	entered := make(chan struct{})
	release := make(chan struct{})
	rec.beginHook = func(Owner) {
		close(entered)
		<-release
	}
	tr := newTestTracker(t, fp, rec, nil)

	first := make(chan error, 1)
	go func() { first <- tr.Admit(10) }()
	<-entered
	second := make(chan error, 1)
	go func() { second <- tr.Admit(11) }()
	// The second Admit either waits on the pending Begin (shares its error)
	// or arrives after it failed and tries again; both must fail, and a
	// second Begin must not overlap the first (recorder checks).
	rec.mu.Lock()
	rec.beginHook = nil
	rec.mu.Unlock()
	close(release)
	for _, ch := range []chan error{first, second} {
		if err := <-ch; !errors.Is(err, errTestBegin) {
			t.Fatalf("Admit error = %v, want errTestBegin", err)
		}
	}
	if got := tr.Owners(); len(got) != 0 {
		t.Fatalf("failed owner recorded: %+v", got)
	}
}

func TestBeginFailureIsNotRecorded(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(10, 10, 10)
	rec := newRecorder()
	rec.failBegin["sid:10"] = errTestBegin
	tr := newTestTracker(t, fp, rec, nil)

	if err := tr.Admit(10); !errors.Is(err, errTestBegin) {
		t.Fatalf("Admit = %v, want errTestBegin", err)
	}
	if len(tr.Owners()) != 0 {
		t.Fatal("owner recorded after failed Begin")
	}
	tr.Sweep() // no End for a lease that never opened
	rec.mu.Lock()
	delete(rec.failBegin, "sid:10")
	rec.mu.Unlock()
	mustAdmit(t, tr, 10)
	if b, e := rec.counts("sid:10"); b != 2 || e != 0 {
		t.Fatalf("begins=%d ends=%d, want 2, 0", b, e)
	}
}

func TestSecondSessionSecondBegin(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(100, 100, 100)
	fp.add(200, 200, 200)
	rec := newRecorder()
	tr := newTestTracker(t, fp, rec, nil)
	mustAdmit(t, tr, 100)
	mustAdmit(t, tr, 200)
	for _, o := range []Owner{"sid:100", "sid:200"} {
		if b, _ := rec.counts(o); b != 1 {
			t.Fatalf("%s begins = %d, want 1", o, b)
		}
	}
}

func TestSessionGoneEndsOnceOnNextSweep(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(100, 100, 100)
	fp.add(101, 101, 100)
	rec := newRecorder()
	tr := newTestTracker(t, fp, rec, nil)
	mustAdmit(t, tr, 101)

	tr.Sweep()
	if _, e := rec.counts("sid:100"); e != 0 {
		t.Fatal("ended while processes live")
	}
	if got := tr.Owners(); len(got) != 1 || got[0].LivePIDs != 2 {
		t.Fatalf("Owners() = %+v, want 2 live pids", got)
	}
	fp.remove(101)
	tr.Sweep()
	if _, e := rec.counts("sid:100"); e != 0 {
		t.Fatal("ended while the session leader lives")
	}
	fp.remove(100)
	tr.Sweep()
	tr.Sweep()
	if b, e := rec.counts("sid:100"); b != 1 || e != 1 {
		t.Fatalf("begins=%d ends=%d, want 1, 1", b, e)
	}
	if len(tr.Owners()) != 0 {
		t.Fatal("owner still listed after End")
	}
	// The pid cache entries went with the processes.
	tr.mu.RLock()
	n := len(tr.pids)
	tr.mu.RUnlock()
	if n != 0 {
		t.Fatalf("pid cache has %d entries, want 0", n)
	}
}

func TestRequestAfterEndOpensNewLease(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(100, 100, 100)
	rec := newRecorder()
	tr := newTestTracker(t, fp, rec, nil)
	mustAdmit(t, tr, 100)
	fp.remove(100)
	tr.Sweep()
	fp.add(100, 100, 100)
	mustAdmit(t, tr, 100)
	if b, e := rec.counts("sid:100"); b != 2 || e != 1 {
		t.Fatalf("begins=%d ends=%d, want 2, 1", b, e)
	}
}

func TestRequestDuringEndWaitsThenBegins(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(100, 100, 100)
	rec := newRecorder()
	endEntered := make(chan struct{})
	endRelease := make(chan struct{})
	rec.endHook = func(Owner) {
		close(endEntered)
		<-endRelease
	}
	tr := newTestTracker(t, fp, rec, nil)
	mustAdmit(t, tr, 100)
	fp.remove(100)
	swept := make(chan struct{})
	go func() { tr.Sweep(); close(swept) }()
	<-endEntered
	fp.add(100, 100, 100) // the session is back (same pid, for simplicity)
	admitted := make(chan error, 1)
	go func() { admitted <- tr.Admit(100) }()
	close(endRelease)
	if err := <-admitted; err != nil {
		t.Fatal(err)
	}
	<-swept
	if b, e := rec.counts("sid:100"); b != 2 || e != 1 {
		t.Fatalf("begins=%d ends=%d, want 2, 1", b, e)
	}
}

func TestLeaseByModes(t *testing.T) {
	cases := []struct {
		by   By
		pids []int
		want []Owner // owners after admitting pids, in order of first Begin
	}{
		{BySID, []int{100, 101, 102}, []Owner{"sid:100"}},
		{ByPGID, []int{100, 101, 102}, []Owner{"pgid:100", "pgid:101"}},
		{ByPID, []int{100, 101, 102, 103}, []Owner{"pid:100", "pid:101", "pid:102"}},
	}
	for _, c := range cases {
		t.Run(c.by.String(), func(t *testing.T) {
			fp := newFakeProc(t)
			fp.add(100, 100, 100)
			fp.add(101, 101, 100)
			fp.add(102, 101, 100)
			fp.add(103, 101, 100) // a thread of 102 (listed here; real /proc hides it)
			fp.thread(103, 102)
			rec := newRecorder()
			tr := newTestTracker(t, fp, rec, func(c2 *Config) { c2.By = c.by })
			for _, p := range c.pids {
				mustAdmit(t, tr, p)
			}
			var got []Owner
			for _, o := range tr.Owners() {
				got = append(got, o.Owner)
				if b, _ := rec.counts(o.Owner); b != 1 {
					t.Errorf("%s begins = %d", o.Owner, b)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("owners = %v, want %v", got, c.want)
			}
			// Removing pid 101 ends pid:101 / nothing else.
			fp.remove(101)
			tr.Sweep()
			for _, o := range c.want {
				want := 0
				if o == "pid:101" {
					want = 1
				}
				if _, e := rec.counts(o); e != want {
					t.Errorf("%s ends = %d, want %d", o, e, want)
				}
			}
		})
	}
}

func TestBindNeverSweptAndUnbind(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(300, 300, 300)
	rec := newRecorder()
	clk := newFakeClock()
	tr := newTestTracker(t, fp, rec, func(c *Config) { c.IdleClose = time.Minute; c.Now = clk.Now })

	tr.Bind("sid:300")
	tr.Bind("sid:300") // nested
	mustAdmit(t, tr, 300)
	if b, _ := rec.counts("sid:300"); b != 0 {
		t.Fatal("Begin called for a bound owner")
	}
	fp.remove(300)
	clk.Advance(time.Hour)
	tr.Sweep()
	tr.Sweep()
	if got := tr.Owners(); len(got) != 1 || !got[0].Explicit {
		t.Fatalf("Owners() = %+v, want one explicit owner", got)
	}
	tr.Unbind("sid:300")
	tr.Sweep()
	if len(tr.Owners()) != 1 {
		t.Fatal("first Unbind of two released the owner")
	}
	tr.Unbind("sid:300")
	tr.Unbind("sid:300") // extra Unbind is a no-op
	if len(tr.Owners()) != 0 {
		t.Fatal("owner listed after last Unbind")
	}
	if _, e := rec.counts("sid:300"); e != 0 {
		t.Fatal("End called for an explicit owner")
	}
	fp.add(300, 300, 300)
	mustAdmit(t, tr, 300) // back to implicit
	if b, _ := rec.counts("sid:300"); b != 1 {
		t.Fatal("no implicit Begin after Unbind")
	}
}

func TestBindReplacesImplicitLease(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(300, 300, 300)
	rec := newRecorder()
	tr := newTestTracker(t, fp, rec, nil)
	mustAdmit(t, tr, 300)
	tr.Bind("sid:300")
	if b, e := rec.counts("sid:300"); b != 1 || e != 1 {
		t.Fatalf("begins=%d ends=%d, want the implicit lease ended", b, e)
	}
	mustAdmit(t, tr, 300)
	if b, _ := rec.counts("sid:300"); b != 1 {
		t.Fatal("Begin after Bind")
	}
	tr.EndAll()
	if _, e := rec.counts("sid:300"); e != 1 {
		t.Fatal("EndAll ended an explicit owner")
	}
}

func TestIdleClose(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(100, 100, 100)
	fp.setCwd(100, "/home/u")
	fp.setFd(100, 0, "/dev/pts/1")
	rec := newRecorder()
	clk := newFakeClock()
	tr := newTestTracker(t, fp, rec, func(c *Config) {
		c.IdleClose = time.Minute
		c.Now = clk.Now
		c.MountPoint = "/mnt/ws"
	})
	ends := func() int { _, e := rec.counts("sid:100"); return e }

	mustAdmit(t, tr, 100)
	clk.Advance(50 * time.Second)
	tr.Sweep()
	mustAdmit(t, tr, 100) // request at +50s; stamped by the next sweep
	clk.Advance(time.Second)
	tr.Sweep() // lastRequest = +51s
	clk.Advance(59 * time.Second)
	tr.Sweep()
	if ends() != 0 {
		t.Fatal("idle-closed before IdleClose elapsed since the last request")
	}

	// Busy: cwd inside the mount.
	fp.setCwd(100, "/mnt/ws/src")
	clk.Advance(time.Hour)
	tr.Sweep()
	if ends() != 0 {
		t.Fatal("idle-closed with cwd inside the mount")
	}
	// Busy: an open fd inside the mount (a sibling path must not count).
	fp.setCwd(100, "/mnt/ws2")
	fp.setFd(100, 3, "/mnt/ws/a.txt (deleted)")
	tr.Sweep()
	if ends() != 0 {
		t.Fatal("idle-closed with an open fd inside the mount")
	}
	fp.setFd(100, 3, "")
	tr.Sweep()
	if ends() != 1 {
		t.Fatalf("ends = %d, want 1 once idle and unused", ends())
	}
	tr.Sweep()
	if ends() != 1 {
		t.Fatal("ended twice")
	}
	mustAdmit(t, tr, 100) // the live process comes back: new lease
	if b, _ := rec.counts("sid:100"); b != 2 {
		t.Fatalf("begins = %d, want 2", b)
	}
}

func TestPidReusePrunedBySweep(t *testing.T) {
	fp := newFakeProc(t)
	fp.addStart(100, 100, 100, 5)
	rec := newRecorder()
	tr := newTestTracker(t, fp, rec, nil)
	mustAdmit(t, tr, 100)
	// pid 100 exits and is reused by a process of session 200.
	fp.addStart(100, 200, 200, 9)
	tr.Sweep()
	mustAdmit(t, tr, 100)
	if b, e := rec.counts("sid:100"); b != 1 || e != 1 {
		t.Fatalf("sid:100 begins=%d ends=%d, want 1, 1", b, e)
	}
	if b, _ := rec.counts("sid:200"); b != 1 {
		t.Fatal("reused pid not attributed to its new session")
	}
}

func TestIgnoredAndZeroPIDs(t *testing.T) {
	fp := newFakeProc(t)
	rec := newRecorder()
	tr := newTestTracker(t, fp, rec, func(c *Config) { c.IgnorePIDs = []int{42} })
	if err := tr.Admit(0); err != nil {
		t.Fatal(err)
	}
	if err := tr.Admit(42); err != nil {
		t.Fatal(err) // no stat file needed
	}
	tr.Sweep()
	if err := tr.Admit(42); err != nil {
		t.Fatal("ignored pid pruned by sweep:", err)
	}
	if err := tr.Admit(43); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("Admit(unknown) = %v, want ErrNoProcess", err)
	}
	if len(tr.Owners()) != 0 {
		t.Fatal("owners recorded")
	}
}

func TestEndAllAndClose(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(100, 100, 100)
	fp.add(200, 200, 200)
	fp.add(300, 300, 300)
	rec := newRecorder()
	tr, err := New(Config{Handler: rec, ProcRoot: fp.root, SweepInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tr.Bind("sid:300")
	mustAdmit(t, tr, 100)
	mustAdmit(t, tr, 200)
	mustAdmit(t, tr, 300)
	tr.EndAll()
	for _, o := range []Owner{"sid:100", "sid:200"} {
		if b, e := rec.counts(o); b != 1 || e != 1 {
			t.Errorf("%s begins=%d ends=%d, want 1, 1", o, b, e)
		}
	}
	tr.Close() // waits for the 1ms loop to exit
	tr.Close() // idempotent
	if err := tr.Admit(100); !errors.Is(err, ErrClosed) {
		t.Fatalf("Admit after Close = %v, want ErrClosed", err)
	}
	if err := tr.Admit(300); err != nil {
		t.Fatalf("explicit owner refused after Close: %v", err)
	}
	rec.check(t)
}

func TestNewValidates(t *testing.T) {
	rec := newRecorder()
	bad := []Config{
		{},
		{Handler: rec, By: 7},
		{Handler: rec, MountPoint: "rel/path"},
		{Handler: rec, IdleClose: time.Second},
		{Handler: rec, IdleClose: -1, MountPoint: "/m"},
	}
	for i, c := range bad {
		if _, err := New(c); err == nil {
			t.Errorf("config %d accepted", i)
		}
	}
}

func TestParseBy(t *testing.T) {
	for s, want := range map[string]By{"sid": BySID, "pgid": ByPGID, "pid": ByPID, "": BySID} {
		got, err := ParseBy(s)
		if err != nil || got != want {
			t.Errorf("ParseBy(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseBy("uid"); !errors.Is(err, ErrInvalidLeaseBy) {
		t.Errorf("ParseBy(uid) = %v", err)
	}
	for _, o := range []Owner{"sid:1", "pgid:22", "pid:333"} {
		by, id, ok := parseOwner(o)
		if !ok || MakeOwner(by, id) != o {
			t.Errorf("parseOwner(%q) = %v %d %v", o, by, id, ok)
		}
	}
	for _, o := range []Owner{"", ":1", "sid:", "sid:-1", "job:4", "sid:x"} {
		if _, _, ok := parseOwner(o); ok {
			t.Errorf("parseOwner(%q) accepted", o)
		}
	}
}

func TestAdmitKnownPIDDoesNotAllocate(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(100, 100, 100)
	tr := newTestTracker(t, fp, newRecorder(), nil)
	mustAdmit(t, tr, 100)
	if n := testing.AllocsPerRun(1000, func() { _ = tr.Admit(100) }); n != 0 {
		t.Fatalf("Admit allocates %v times per call", n)
	}
}

func BenchmarkAdmitKnown(b *testing.B) {
	fp := newFakeProc(b)
	for i := range 200 {
		fp.add(100+i, 100, 100)
	}
	tr := newTestTracker(b, fp, newRecorder(), nil)
	for i := range 200 {
		mustAdmit(b, tr, 100+i)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := tr.Admit(150); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := tr.Admit(150); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

func TestInsideMount(t *testing.T) {
	cases := []struct {
		mp, path string
		want     bool
	}{
		{"/mnt/ws", "/mnt/ws", true},
		{"/mnt/ws", "/mnt/ws/a/b", true},
		{"/mnt/ws", "/mnt/ws (deleted)", true},
		{"/mnt/ws", "/mnt/ws2", false},
		{"/mnt/ws", "/mnt", false},
		{"/mnt/ws", "pipe:[1234]", false},
		{"/", "/etc", true},
		{"/", "socket:[1]", false},
	}
	for _, c := range cases {
		tr := &Tracker{mountPt: c.mp}
		if got := tr.inside(c.path); got != c.want {
			t.Errorf("inside(%q) under %q = %v, want %v", c.path, c.mp, got, c.want)
		}
	}
}

// TestReleaseHandsLiveSessionToSweeper: Release of a bound owner whose
// session still has a live process (exec's command left a child behind)
// keeps the owner, unbound, and the sweeper ends it once the child is
// gone; with no process left Release forgets it at once, as Unbind does.
// A child found only by the proc scan (it sent no request) counts too.
func TestReleaseHandsLiveSessionToSweeper(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(400, 400, 400) // exec's command, the session leader
	fp.add(401, 400, 400) // its child, left behind
	rec := newRecorder()
	tr := newTestTracker(t, fp, rec, nil)
	tr.Bind("sid:400")
	rec.mu.Lock()
	rec.active["sid:400"] = true // the daemon opened the lease itself (lease bind)
	rec.mu.Unlock()
	mustAdmit(t, tr, 400)
	fp.remove(400) // the command exits; 401 never sent a request
	if !tr.Release("sid:400") {
		t.Fatal("Release forgot an owner whose session still has a process")
	}
	if got := tr.Owners(); len(got) != 1 || got[0].Explicit {
		t.Fatalf("Owners() = %+v, want one implicit owner", got)
	}
	tr.Sweep()
	if _, e := rec.counts("sid:400"); e != 0 {
		t.Fatal("ended while the child lives")
	}
	fp.remove(401)
	tr.Sweep()
	if _, e := rec.counts("sid:400"); e != 1 {
		t.Fatalf("End called %d times after the child exited, want 1", e)
	}

	fp.add(500, 500, 500)
	tr.Bind("sid:500")
	fp.remove(500)
	if tr.Release("sid:500") || len(tr.Owners()) != 0 {
		t.Fatal("Release kept an owner with no process left")
	}
	tr.Bind("explicit:agent") // not a session: never kept
	if tr.Release("explicit:agent") || len(tr.Owners()) != 0 {
		t.Fatal("Release kept a foreign owner")
	}
}
