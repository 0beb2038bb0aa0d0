package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Write attribution and the session log (issue #29 items 1-2): which
// tool session changed which path, through the binary and a real mount.

// The JSON shapes of `blame --json`, `sessions --json` and `log --paths
// --json`, as docs/cli.md documents them: decoded with unknown fields
// refused, so that a change of shape fails here.
type writerJSON struct {
	PID           uint32   `json:"pid"`
	Comm          string   `json:"comm"`
	Argv          []string `json:"argv"`
	ArgvTruncated bool     `json:"argv_truncated"`
	Session       string   `json:"session"`
	Lease         string   `json:"lease"`
	First         int64    `json:"first"`
	Last          int64    `json:"last"`
}

type blameJSON struct {
	Generation string       `json:"generation"`
	Workspace  string       `json:"workspace"`
	Time       int64        `json:"time"`
	Writers    []writerJSON `json:"writers"`
	// NotRecorded: a capture of a mount with --no-attribution.
	NotRecorded bool `json:"not_recorded"`
}

type sessionJSON struct {
	Workspace  string   `json:"workspace"`
	Lease      string   `json:"lease"`
	Owner      string   `json:"owner"`
	Kind       string   `json:"kind"`
	Leader     []string `json:"leader"`
	Start      int64    `json:"start"`
	End        int64    `json:"end"`
	Outcome    string   `json:"outcome"`
	PathCount  int      `json:"path_count"`
	Paths      []string `json:"paths"`
	Generation string   `json:"generation"`
	StartNS    int64    `json:"start_ns"`
}

type logPathsJSON struct {
	Seq       uint64   `json:"seq"`
	Gen       string   `json:"gen"`
	Base      string   `json:"base"`
	Kind      string   `json:"kind"`
	Operation string   `json:"operation"`
	Time      int64    `json:"time"`
	Paths     []string `json:"paths"`
	Sessions  []string `json:"sessions"`
}

// out runs a command that must succeed and returns all of stdout.
func (e *env) out(args ...string) string {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("acyclicfs %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

func decodeStrict(t *testing.T, what, s string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: decode %q: %v", what, s, err)
	}
}

// runTool runs argv in a session of its own with working directory dir
// and returns its pid (its session id).
func runTool(t *testing.T, dir string, argv ...string) int {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	r, err := runLimited(cmd, sessionLimit)
	if err != nil || r.code != 0 {
		t.Fatalf("%q: %v %s", argv, err, r)
	}
	return cmd.Process.Pid
}

func (e *env) blame(ws, path string) []blameJSON {
	e.t.Helper()
	var out []blameJSON
	decodeStrict(e.t, "blame", e.out("blame", ws, path, "--json"), &out)
	return out
}

func (e *env) sessions(ws string) []sessionJSON {
	e.t.Helper()
	var out []sessionJSON
	decodeStrict(e.t, "sessions", e.out("sessions", ws, "--json"), &out)
	return out
}

func TestAttributionBlameAndSessions(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"keep": "k\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")
	cpSrc := filepath.Join(e.dir, "cp-src")
	if err := os.WriteFile(cpSrc, []byte("copied\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	shArgv := []string{"sh", "-c", "echo one > a; echo one > both"}
	shPID := runTool(t, mp, shArgv...)
	e.waitIdle("w")
	cpArgv := []string{"cp", cpSrc, filepath.Join(mp, "b")}
	cpPID := runTool(t, e.dir, cpArgv...)
	e.waitIdle("w")
	sh2Argv := []string{"sh", "-c", "echo two >> both"}
	sh2PID := runTool(t, mp, sh2Argv...)
	e.waitIdle("w")
	_, execRes := e.execOK(mp, "echo e > d")
	_ = execRes
	e.waitIdle("w")

	sid := func(pid int) string { return fmt.Sprintf("sid:%d", pid) }
	one := func(path string, pid int, argv []string) blameJSON {
		t.Helper()
		bl := e.blame("w", path)
		if len(bl) != 1 || len(bl[0].Writers) != 1 {
			t.Fatalf("blame %s: %+v, want one generation with one writer", path, bl)
		}
		w := bl[0].Writers[0]
		if w.Session != sid(pid) || !slices.Equal(w.Argv, argv) || w.Lease == "" || w.First == 0 || w.Last < w.First {
			t.Fatalf("blame %s: writer %+v, want session %s, argv %q, a lease, first <= last", path, w, sid(pid), argv)
		}
		if bl[0].Workspace != "w" || bl[0].Generation == "" {
			t.Fatalf("blame %s: %+v", path, bl[0])
		}
		return bl[0]
	}
	ba := one("a", shPID, shArgv)
	if ba.Writers[0].Comm != "sh" {
		t.Errorf("blame a: comm %q, want sh", ba.Writers[0].Comm)
	}
	bb := one("b", cpPID, cpArgv)
	if bb.Writers[0].Comm != "cp" {
		t.Errorf("blame b: comm %q, want cp", bb.Writers[0].Comm)
	}
	if bb.Generation == ba.Generation {
		t.Errorf("a and b were written in separate windows but blame names one generation %s", ba.Generation)
	}
	if bl := e.blame("w", "keep"); len(bl) != 0 {
		t.Errorf("blame keep (never written): %+v, want none", bl)
	}

	// Both sessions wrote "both": newest first.
	both := e.blame("w", "both")
	if len(both) != 2 {
		t.Fatalf("blame both: %+v, want two generations", both)
	}
	if both[0].Writers[0].Session != sid(sh2PID) || both[1].Writers[0].Session != sid(shPID) {
		t.Errorf("blame both: sessions %s then %s, want %s then %s", both[0].Writers[0].Session, both[1].Writers[0].Session, sid(sh2PID), sid(shPID))
	}

	// One entry per session, newest first, with its paths.
	ss := e.sessions("w")
	if len(ss) != 4 {
		t.Fatalf("sessions: %d entries, want 4: %+v", len(ss), ss)
	}
	want := []struct {
		kind, owner string
		leader      []string
		paths       []string
	}{
		{"exec", "", []string{"sh", "-c", "echo e > d"}, []string{"d"}},
		{"session", sid(sh2PID), sh2Argv, []string{"both"}},
		{"session", sid(cpPID), cpArgv, []string{"b"}},
		{"session", sid(shPID), shArgv, []string{"a", "both"}},
	}
	for i, w := range want {
		s := ss[i]
		if s.Kind != w.kind || w.owner != "" && s.Owner != w.owner || !slices.Equal(s.Leader, w.leader) ||
			!slices.Equal(s.Paths, w.paths) || s.PathCount != len(w.paths) || s.Generation == "" ||
			s.Outcome != "current" || s.End < s.Start || s.Workspace != "w" || s.Lease == "" {
			t.Errorf("sessions[%d] = %+v, want kind %s owner %q leader %q paths %q", i, s, w.kind, w.owner, w.leader, w.paths)
		}
	}
	if got := e.out("sessions", "w", "-n", "1", "--json"); strings.Count(got, "\"lease\"") != 1 {
		t.Errorf("sessions -n 1 printed %d entries", strings.Count(got, "\"lease\""))
	}
	if bb.Writers[0].Lease != ss[2].Lease {
		t.Errorf("blame b names lease %s, the session log %s", bb.Writers[0].Lease, ss[2].Lease)
	}

	// log --paths: the newest entry is the exec's capture, changing d.
	var lg []logPathsJSON
	decodeStrict(t, "log --paths", e.out("log", "w", "--paths", "--json"), &lg)
	if len(lg) < 4 || !slices.Equal(lg[0].Paths, []string{"d"}) || !slices.Equal(lg[1].Paths, []string{"both"}) ||
		!slices.Equal(lg[2].Paths, []string{"b"}) || len(lg[0].Sessions) != 1 || lg[0].Sessions[0] != ss[0].Lease {
		t.Errorf("log --paths: %+v", lg)
	}
	text := e.out("blame", "w", "b")
	if !bytes.Contains([]byte(text), []byte(cpSrc)) || !strings.Contains(text, sid(cpPID)) {
		t.Errorf("blame w b printed %q, want the cp command line and session", text)
	}
	if r := e.fails(2, "blame", "w", "../x"); !strings.Contains(r.stderr, "../x") {
		t.Errorf("blame of a path leaving the workspace: %s", r.stderr)
	}
	e.fails(2, "sessions", "w", "-n", "-1")
	e.unmount(mp)
}

// Two sessions write in one window (a lease holds it open): the one
// capture of its final close names both on the file both wrote, and each
// session's entry lists only its own paths.
func TestAttributionOneWindowTwoWriters(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"shared": "0\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")
	lease := e.ok("lease", "begin", mp, "--owner", "agent")

	p1 := runTool(t, mp, "sh", "-c", "echo one >> shared; echo x > only1")
	p2 := runTool(t, mp, "sh", "-c", "echo two >> shared; echo y > only2")
	waitFor(t, 10*time.Second, "both tool sessions to end", func() bool {
		return len(e.statusOf("w").Leases) == 1
	})
	e.ok("lease", "end", mp, lease)
	e.waitIdle("w")

	bl := e.blame("w", "shared")
	if len(bl) != 1 || len(bl[0].Writers) != 2 {
		t.Fatalf("blame shared: %+v, want one generation with two writers", bl)
	}
	got := []string{bl[0].Writers[0].Session, bl[0].Writers[1].Session}
	if want := []string{fmt.Sprintf("sid:%d", p1), fmt.Sprintf("sid:%d", p2)}; !slices.Equal(got, want) {
		t.Errorf("blame shared: sessions %q, want %q (oldest first)", got, want)
	}
	ss := e.sessions("w")
	if len(ss) != 3 {
		t.Fatalf("sessions: %+v, want 3 entries", ss)
	}
	paths := map[string][]string{}
	for _, s := range ss {
		if s.Generation != bl[0].Generation {
			t.Errorf("session %s: generation %s, want the window's %s", s.Owner, s.Generation, bl[0].Generation)
		}
		paths[s.Owner] = s.Paths
	}
	if !slices.Equal(paths[fmt.Sprintf("sid:%d", p1)], []string{"only1", "shared"}) ||
		!slices.Equal(paths[fmt.Sprintf("sid:%d", p2)], []string{"only2", "shared"}) ||
		len(paths["explicit:agent"]) != 0 {
		t.Errorf("sessions' paths: %q", paths)
	}
	e.unmount(mp)
}

// Fork and land keep the records: a fork shows its ancestors' sessions on
// request, and the parent's land entry names the landed sessions.
func TestAttributionForkAndLand(t *testing.T) {
	e, mp := forkMounted(t, map[string]string{"base": "b\n"})
	argv := []string{"sh", "-c", "echo c > c"}
	pid := runTool(t, mp, argv...)
	e.waitIdle("child")
	sid := fmt.Sprintf("sid:%d", pid)
	ss := e.sessions("child")
	if len(ss) != 1 || ss[0].Owner != sid {
		t.Fatalf("child's sessions: %+v", ss)
	}

	e.ok("fork", "child", "grand")
	if bl := e.blame("grand", "c"); len(bl) != 0 {
		t.Errorf("blame grand c without --ancestors: %+v, want none (grand captured nothing)", bl)
	}
	var bl []blameJSON
	decodeStrict(t, "blame --ancestors", e.out("blame", "grand", "c", "--ancestors", "--json"), &bl)
	if len(bl) != 1 || bl[0].Workspace != "child" || bl[0].Writers[0].Session != sid || !slices.Equal(bl[0].Writers[0].Argv, argv) {
		t.Errorf("blame grand c --ancestors: %+v, want child's capture by %s", bl, sid)
	}
	var gs []sessionJSON
	decodeStrict(t, "sessions --ancestors", e.out("sessions", "grand", "--ancestors", "--json"), &gs)
	if len(gs) != 1 || gs[0].Lease != ss[0].Lease {
		t.Errorf("sessions grand --ancestors: %+v, want child's session %s", gs, ss[0].Lease)
	}
	if got := e.sessions("grand"); len(got) != 0 {
		t.Errorf("sessions grand: %+v, want none of its own", got)
	}

	e.unmount(mp)
	e.ok("land", "child")
	var lg []logPathsJSON
	decodeStrict(t, "log main --paths", e.out("log", "main", "--paths", "--json"), &lg)
	if len(lg) < 2 || lg[0].Kind != "land" || !slices.Equal(lg[0].Paths, []string{"c"}) || !slices.Equal(lg[0].Sessions, []string{ss[0].Lease}) {
		t.Errorf("main's land entry: %+v, want paths [c] and the landed session %s", lg, ss[0].Lease)
	}
	decodeStrict(t, "blame main --ancestors", e.out("blame", "main", "c", "--ancestors", "--json"), &bl)
	if len(bl) != 1 || bl[0].Writers[0].Session != sid {
		t.Errorf("blame main c --ancestors: %+v", bl)
	}
}

// A session whose changes cancel out captures nothing: its entry names no
// generation and no path, and nothing it did is blamed on the next
// session's capture.
func TestAttributionUndoneChangesNotCarried(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"keep": "k\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")
	p1 := runTool(t, mp, "sh", "-c", "echo x > x; rm x")
	e.waitIdle("w")
	p2 := runTool(t, mp, "sh", "-c", "echo b > b")
	e.waitIdle("w")
	if bl := e.blame("w", "x"); len(bl) != 0 {
		t.Errorf("blame x (created and removed in one window): %+v", bl)
	}
	if bl := e.blame("w", "."); len(bl) != 0 {
		t.Errorf("blame . (the root's removal was undone): %+v", bl)
	}
	ss := e.sessions("w")
	if len(ss) != 2 || ss[1].Owner != fmt.Sprintf("sid:%d", p1) || ss[1].PathCount != 0 || strings.Trim(ss[1].Generation, "0") != "" {
		t.Fatalf("sessions: %+v, want the first with no paths and no generation", ss)
	}
	if ss[0].Owner != fmt.Sprintf("sid:%d", p2) || !slices.Equal(ss[0].Paths, []string{"b"}) {
		t.Errorf("sessions[0]: %+v, want paths [b]", ss[0])
	}
	e.unmount(mp)
}

// Removed names (issue #29): `rm f` is blamed on f and `mv a b` on a (removed)
// and b (created), not only on their directory; a name made and removed
// within one window is no change and is blamed on nobody.
func TestAttributionRemovedNames(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "f\n", "a": "a\n", "d/g": "g\n", "keep": "k\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")
	argv := []string{"sh", "-c", "rm f; mv a b; rm d/g; rmdir d; echo t > tmp; rm tmp; echo n > new"}
	pid := runTool(t, mp, argv...)
	e.waitIdle("w")
	sid := fmt.Sprintf("sid:%d", pid)
	for p, want := range map[string][]string{"f": {"rm", "f"}, "a": {"mv", "a", "b"}, "b": {"mv", "a", "b"},
		"d/g": {"rm", "d/g"}, "d": {"rmdir", "d"}, "new": argv} {
		bl := e.blame("w", p)
		if len(bl) != 1 || len(bl[0].Writers) != 1 || bl[0].Writers[0].Session != sid || !slices.Equal(bl[0].Writers[0].Argv, want) {
			t.Errorf("blame %s: %+v, want %q of session %s", p, bl, want, sid)
		}
	}
	if bl := e.blame("w", "."); len(bl) != 1 || len(bl[0].Writers) == 0 {
		t.Errorf("blame .: %+v, want the session's changes of the root's listing", bl)
	}
	for _, p := range []string{"tmp", "keep"} {
		if bl := e.blame("w", p); len(bl) != 0 {
			t.Errorf("blame %s: %+v, want none", p, bl)
		}
	}
	ss := e.sessions("w")
	if want := []string{".", "a", "b", "d", "d/g", "f", "new"}; len(ss) != 1 || !slices.Equal(ss[0].Paths, want) {
		t.Errorf("sessions: %+v, want one entry with paths %q", ss, want)
	}
	text := e.out("blame", "w", "f")
	if !strings.Contains(text, sid) {
		t.Errorf("blame w f printed %q, want the removing session", text)
	}
	e.unmount(mp)
}

// A process that execs (issue #29): its changes before the exec are
// attributed with the command line it had then, the ones after with the
// program it exec'd — one pid, two command lines.
func TestAttributionExec(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"keep": "k\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")
	cpSrc := filepath.Join(e.dir, "cp-src")
	if err := os.WriteFile(cpSrc, []byte("copied\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// bash (5.1 and later) also execs the last command of a list itself.
	for _, c := range []struct{ shell, before, after, exec string }{{"sh", "a", "b", "exec "}, {"bash", "c", "d", "exec "}, {"bash", "e", "g", ""}} {
		if _, err := exec.LookPath(c.shell); err != nil {
			t.Logf("no %s: %v", c.shell, err)
			continue
		}
		argv := []string{c.shell, "-c", "echo one > " + c.before + "; " + c.exec + "cp " + cpSrc + " " + c.after}
		pid := runTool(t, mp, argv...)
		e.waitIdle("w")
		check := func(path, comm string, want []string) {
			t.Helper()
			bl := e.blame("w", path)
			if len(bl) != 1 || len(bl[0].Writers) != 1 {
				t.Fatalf("blame %s: %+v, want one writer", path, bl)
			}
			w := bl[0].Writers[0]
			if w.PID != uint32(pid) || w.Comm != comm || !slices.Equal(w.Argv, want) || w.Session != fmt.Sprintf("sid:%d", pid) {
				t.Errorf("blame %s: writer %+v, want pid %d comm %s argv %q", path, w, pid, comm, want)
			}
		}
		check(c.before, c.shell, argv)
		if bl := e.blame("w", c.after); c.exec == "" && len(bl) == 1 && len(bl[0].Writers) == 1 && bl[0].Writers[0].PID != uint32(pid) {
			t.Logf("%s ran the last command of its list in a child: nothing exec'd", c.shell)
			continue
		}
		check(c.after, "cp", []string{"cp", cpSrc, c.after})
	}
	e.unmount(mp)
}

// attributionRun writes in w: a first window that closes after one tool
// session, then two more tool sessions while a lease holds the window
// open. crash is where the daemon dies: "" nowhere; "kill" by SIGKILL
// before the second window closes; a failpoint (the daemon exits there)
// at the first final close. The next mount recovers and the run goes on.
// It returns blame of each path and the session log, keyed by command
// line (pids and directories differ between runs).
func attributionRun(t *testing.T, crash string) (blames map[string][]string, sessions map[string][]string, ss []sessionJSON, e *env) {
	e = newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "f\n", "keep": "k\n"})
	e.ok("create", "w", "--from", src)
	mp := filepath.Join(e.dir, "mnt-w")
	if crash != "" && crash != "kill" {
		if err := os.MkdirAll(mp, 0o755); err != nil {
			t.Fatal(err)
		}
		e.mountWithFailpoint(crash, "w", mp, "--lease-ttl", "300ms")
	} else {
		e.mountAt("w", "--lease-ttl", "300ms")
	}
	cpSrc := filepath.Join(e.dir, "cp-src")
	if err := os.WriteFile(cpSrc, []byte("copied\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	died := func() {
		t.Helper()
		pid := e.daemonPID()
		if crash == "kill" {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		if err := waitGone(pid, 20*time.Second); err != nil {
			t.Fatalf("daemon did not die at %s: %v", crash, err)
		}
		time.Sleep(400 * time.Millisecond) // let the dead daemon's 300ms leases expire (a clock deadline, no event)
		if r := e.run("mount", "w", mp, "--lease-ttl", "300ms"); r.code != 0 {
			t.Fatalf("remount after a crash at %s: %s", crash, r)
		}
	}
	runTool(t, mp, "sh", "-c", "echo x > x")
	if crash != "" && crash != "kill" {
		died()
	} else {
		e.waitIdle("w")
	}
	lease := e.ok("lease", "begin", mp, "--owner", "agent", "--ttl", "300ms")
	runTool(t, mp, "sh", "-c", "echo one > a; rm f; echo both > both")
	runTool(t, e.dir, "cp", cpSrc, filepath.Join(mp, "b"))
	runTool(t, mp, "sh", "-c", "echo two >> both")
	waitFor(t, 10*time.Second, "the tool sessions to end", func() bool {
		return len(e.statusOf("w").Leases) == 1
	})
	if crash == "kill" {
		died()
	} else {
		e.ok("lease", "end", mp, lease)
		e.waitIdle("w")
	}
	blames = map[string][]string{}
	for _, p := range []string{"x", "a", "f", "b", "both", "keep", "."} {
		for _, bl := range e.blame("w", p) {
			var ws []string
			for _, w := range bl.Writers {
				if w.Lease == "" || w.Session == "" || w.First == 0 {
					t.Errorf("blame %s: writer %+v without session, lease or time", p, w)
				}
				ws = append(ws, strings.ReplaceAll(strings.Join(w.Argv, " "), e.dir, "$DIR"))
			}
			blames[p] = append(blames[p], strings.Join(ws, " | "))
		}
	}
	sessions = map[string][]string{}
	ss = e.sessions("w")
	for _, s := range ss {
		k := s.Kind + ": " + strings.ReplaceAll(strings.Join(s.Leader, " "), e.dir, "$DIR")
		if _, dup := sessions[k]; dup {
			t.Errorf("sessions: two entries for %s: %+v", k, ss)
		}
		sessions[k] = s.Paths
	}
	e.unmount(mp)
	return blames, sessions, ss, e
}

// Across a daemon kill -9 (issue #29): the overlay log records each
// change's writer, and the recovery attributes what it captures to them
// and gives the dead daemon's leases session entries; a crash inside a
// final close (after its capture, after its publish, before its ticket
// completes) neither loses nor repeats anything: blame and sessions say
// what they say without the crash, except outcomes.
func TestAttributionSurvivesKill(t *testing.T) {
	wantB, wantS, _, _ := attributionRun(t, "")
	if len(wantB["a"]) != 1 || len(wantB["f"]) != 1 || len(wantB["x"]) != 1 || len(wantS) != 5 {
		t.Fatalf("the run without the crash: blame %v, sessions %v", wantB, wantS)
	}
	for _, c := range []struct {
		crash     string
		recovered int // session entries the recovery wrote
	}{{"kill", 4}, {"reconcile.after-capture", 1}, {"reconcile.after-publish", 1}, {"reconcile.before-complete", 1}} {
		t.Run(c.crash, func(t *testing.T) {
			gotB, gotS, ss, e := attributionRun(t, c.crash)
			if fmt.Sprint(gotB) != fmt.Sprint(wantB) {
				t.Errorf("blame after a crash at %s and recovery:\n%v\nwithout the crash:\n%v", c.crash, gotB, wantB)
			}
			if fmt.Sprint(gotS) != fmt.Sprint(wantS) {
				t.Errorf("sessions after a crash at %s and recovery:\n%v\nwithout the crash:\n%v", c.crash, gotS, wantS)
			}
			recovered := 0
			for _, s := range ss {
				if s.Outcome == "recovered" {
					recovered++
					if strings.Trim(s.Generation, "0") == "" {
						t.Errorf("recovered session %+v names no generation", s)
					}
				}
			}
			if recovered != c.recovered {
				t.Errorf("sessions: %d recovered entries, want %d: %+v\n%s", recovered, c.recovered, ss, e.daemonLog())
			}
		})
	}
}

// A mount with --no-attribution records no writers: its captures get no
// attribution record, so blame names them "not recorded", and its
// sessions' entries are logged without paths. A later mount with
// attribution on records again.
func TestAttributionOff(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"keep": "k\n", "old": "o\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w", "--no-attribution")
	pid := runTool(t, mp, "sh", "-c", "echo one > a; rm old")
	e.waitIdle("w")

	ss := e.sessions("w")
	if len(ss) != 1 || ss[0].Kind != "session" || ss[0].Owner != fmt.Sprintf("sid:%d", pid) || ss[0].PathCount != 0 ||
		len(ss[0].Paths) != 0 || ss[0].Generation == "" || strings.Trim(ss[0].Generation, "0") == "" || ss[0].Outcome != "current" {
		t.Fatalf("sessions with attribution off: %+v, want one session entry with its generation and no paths", ss)
	}
	gen := ss[0].Generation
	for _, p := range []string{"a", "old", "."} {
		bl := e.blame("w", p)
		if len(bl) != 1 || !bl[0].NotRecorded || len(bl[0].Writers) != 0 || bl[0].Generation != gen || bl[0].Workspace != "w" {
			t.Errorf("blame %s with attribution off: %+v, want generation %s not recorded", p, bl, gen)
		}
	}
	if bl := e.blame("w", "keep"); len(bl) != 0 {
		t.Errorf("blame keep (never written): %+v, want none", bl)
	}
	if text := e.out("blame", "w", "a"); !strings.HasPrefix(text, gen[:12]+"\t") || !strings.HasSuffix(text, "\tnot recorded\n") {
		t.Errorf("blame w a printed %q, want GEN<TAB>TIME<TAB>not recorded", text)
	}
	e.unmount(mp)

	// Attribution on again: the new capture names its writer, the old
	// one stays not recorded, newest first.
	mp = e.mountAt("w")
	pid2 := runTool(t, mp, "sh", "-c", "echo two >> a")
	e.waitIdle("w")
	bl := e.blame("w", "a")
	if len(bl) != 2 || bl[0].NotRecorded || len(bl[0].Writers) != 1 || bl[0].Writers[0].Session != fmt.Sprintf("sid:%d", pid2) ||
		!bl[1].NotRecorded || bl[1].Generation != gen {
		t.Errorf("blame a after a mount with attribution on: %+v, want its writer, then %s not recorded", bl, gen)
	}
	e.unmount(mp)

	// Off across a daemon kill -9: the overlay log holds no writers, so
	// the recovery stores no attribution either; the dead daemon's lease
	// gets its entry, without paths.
	mp = e.mountAt("w", "--no-attribution", "--lease-ttl", "300ms")
	e.ok("lease", "begin", mp, "--owner", "agent", "--ttl", "300ms")
	runTool(t, mp, "sh", "-c", "echo c > c")
	dpid := e.daemonPID()
	if err := syscall.Kill(dpid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(dpid, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // let the dead daemon's 300ms leases expire (a clock deadline, no event)
	if r := e.run("mount", "w", mp, "--no-attribution"); r.code != 0 {
		t.Fatalf("remount after kill -9: %s", r)
	}
	// The lease and the tool session it ran, both still held when it died.
	var recGen string
	n := 0
	for _, s := range e.sessions("w") {
		if s.Outcome != "recovered" {
			continue
		}
		n++
		if s.PathCount != 0 || len(s.Paths) != 0 || strings.Trim(s.Generation, "0") == "" || recGen != "" && s.Generation != recGen {
			t.Errorf("recovered entry %+v: want the recovered capture and no paths", s)
		}
		recGen = s.Generation
	}
	if n == 0 {
		t.Fatalf("no recovered session entry: %+v", e.sessions("w"))
	}
	if bl := e.blame("w", "c"); len(bl) != 1 || !bl[0].NotRecorded || bl[0].Generation != recGen {
		t.Errorf("blame c after a recovery with attribution off: %+v, want %s not recorded", bl, recGen)
	}
	e.unmount(mp)
}
