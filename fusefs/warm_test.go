package fusefs

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// gridSpec is dirs directories of files files each (names from the two
// formats), plus top files at the root.
func gridSpec(dirs, files, top int, dirFmt, fileFmt string) spec {
	s := spec{}
	for d := range dirs {
		for f := range files {
			s[fmt.Sprintf(dirFmt, d)+"/"+fmt.Sprintf(fileFmt, f)] = fmt.Sprintf("%d/%d", d, f)
		}
	}
	for f := range top {
		s[fmt.Sprintf("top%d", f)] = "t"
	}
	return s
}

// warmTree is 8 directories of 25 files each, plus 3 files at the root:
// 211 names.
func warmTree() spec { return gridSpec(8, 25, 3, "d%d", "f%02d") }

// waitWarm blocks until the warm-up has ended.
func waitWarm(t *testing.T, m *Mount) {
	t.Helper()
	if m.warm.done == nil {
		t.Fatal("no warm-up started")
	}
	<-m.warm.done
}

// TestWarmCachesEntries: after the warm-up, stat of every path of the view
// sends no LOOKUP and no GETATTR, and the warm-up itself was admitted
// without consulting the Admitter (it opens no lease).
func TestWarmCachesEntries(t *testing.T) {
	objs := newFakeObjects(t)
	adm := &recordingAdmitter{pids: map[uint32]bool{}}
	m, mnt := mountT(t, objs, objs.build(t, warmTree()), &mountOpts{admitter: adm, warm: 10000})
	waitWarm(t, m)
	if n, running := m.Warmed(); n != 211 || running {
		t.Fatalf("warmed %d names (running %v), want 211", n, running)
	}
	adm.mu.Lock()
	asked := len(adm.pids)
	adm.mu.Unlock()
	if asked != 0 {
		t.Fatalf("the warm-up consulted the admitter for %d pids", asked)
	}
	lookups, getattrs := m.daemonLookups.Load(), m.daemonGetattrs.Load()
	seen := 0
	for d := range 8 {
		for f := range 25 {
			if _, err := os.Lstat(filepath.Join(mnt, fmt.Sprintf("d%d/f%02d", d, f))); err != nil {
				t.Fatal(err)
			}
			seen++
		}
	}
	if seen != 200 {
		t.Fatal("walked too little")
	}
	if dl, dg := m.daemonLookups.Load()-lookups, m.daemonGetattrs.Load()-getattrs; dl != 0 || dg != 0 {
		t.Fatalf("stat after the warm-up sent %d LOOKUPs and %d GETATTRs, want none", dl, dg)
	}
}

// TestWarmColdWithout is the control: without the warm-up the same stats
// each send a LOOKUP (so the test above can fail).
func TestWarmColdWithout(t *testing.T) {
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, warmTree()), nil)
	if _, running := m.Warmed(); running {
		t.Fatal("a warm-up runs although none was asked for")
	}
	lookups := m.daemonLookups.Load()
	for f := range 25 {
		if _, err := os.Lstat(filepath.Join(mnt, fmt.Sprintf("d3/f%02d", f))); err != nil {
			t.Fatal(err)
		}
	}
	if dl := m.daemonLookups.Load() - lookups; dl < 25 {
		t.Fatalf("cold stats sent %d LOOKUPs, want at least 25", dl)
	}
}

// TestWarmLimit: the warm-up stops once it has listed the limit. It checks
// before each directory, so it may finish the listings in flight: the root
// (43 names), then at most one directory (25) per walker.
func TestWarmLimit(t *testing.T) {
	objs := newFakeObjects(t)
	m, _ := mountT(t, objs, objs.build(t, gridSpec(40, 25, 3, "d%02d", "f%02d")), &mountOpts{warm: 50})
	waitWarm(t, m)
	if n, _ := m.Warmed(); n < 50 || n > 43+warmWalkers*25 {
		t.Fatalf("warmed %d names, want 50..%d of 1043", n, 43+warmWalkers*25)
	}
}

// TestWarmStaysOnItsFilesystem: a filesystem mounted below the mountpoint
// is not listed.
func TestWarmStaysOnItsFilesystem(t *testing.T) {
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, warmTree()), nil)
	sub := filepath.Join(mnt, "d5")
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	for i := range 40 {
		mustWrite(t, filepath.Join(sub, fmt.Sprintf("x%d", i)), "x")
	}
	m.startWarm(10000, 0)
	waitWarm(t, m)
	if n, _ := m.Warmed(); n != 211-25 {
		t.Fatalf("warmed %d names, want %d (d5 is another filesystem now)", n, 211-25)
	}
}

// TestWarmSwitchOverlap: a view switch during a listing makes the walker
// invalidate what it listed (after the switch's own invalidations); the
// view afterwards is the new one.
func TestWarmSwitchOverlap(t *testing.T) {
	if !warmOverlap(1, 0, 1) || !warmOverlap(1, 1, 2) || warmOverlap(2, 2, 2) {
		t.Fatal("warmOverlap misjudges the counters")
	}
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, spec{"d/a": "old", "d/b": "b"}), nil)
	newRoot := objs.build(t, spec{"d/a": "new, longer", "d/c": "c"})
	switched := false
	m.warm.afterList = func([]string) {
		if !switched {
			switched = true
			if err := m.SwitchView(newRoot); err != nil {
				t.Error(err)
			}
		}
	}
	before := m.switchStarted.Load()
	m.startWarm(100, 0)
	waitWarm(t, m)
	if m.switchStarted.Load() != before+1 || m.switchNotified.Load() != before+1 {
		t.Fatalf("switch counters %d/%d after one switch from %d", m.switchStarted.Load(), m.switchNotified.Load(), before)
	}
	if n := m.warm.reinvalidated.Load(); n != 1 {
		t.Fatalf("%d listings invalidated again, want 1 (the one the switch overlapped)", n)
	}
	got := flattenDir(t, mnt)
	if _, stale := got["d/b"]; stale || got["d/a"] != "file:new, longer" || got["d/c"] != "file:c" {
		t.Fatalf("view after switch and warm-up: %v", got)
	}
}

// TestWarmUnmountPrompt: unmounting while the warm-up runs ends it before
// Unmount returns, and leaves no mount behind.
func TestWarmUnmountPrompt(t *testing.T) {
	objs := newFakeObjects(t)
	mnt := t.TempDir()
	m, err := MountAt(mnt, Config{Objects: objs, Root: objs.build(t, gridSpec(200, 1, 0, "d%03d", "f%d")), StateDir: t.TempDir(), WarmEntries: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	if n, running := m.Warmed(); running {
		t.Fatalf("Unmount returned while the warm-up still runs (%d names listed)", n)
	}
	m.Wait()
	if n, where := fuseMounts(); n != 0 {
		t.Fatalf("mount left behind: %s", where)
	}
}

// dirent encodes one linux_dirent64 record.
func dirent(name string, typ uint8) []byte {
	reclen := (19 + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint64(b[0:], 1)
	binary.NativeEndian.PutUint64(b[8:], 2)
	binary.NativeEndian.PutUint16(b[16:], uint16(reclen))
	b[18] = typ
	copy(b[19:], name)
	return b
}

func TestParseDirents(t *testing.T) {
	var b []byte
	for _, r := range []struct {
		name string
		typ  uint8
	}{{".", syscall.DT_DIR}, {"..", syscall.DT_DIR}, {"sub", syscall.DT_DIR}, {"file.go", syscall.DT_REG}, {"l", syscall.DT_LNK}} {
		b = append(b, dirent(r.name, r.typ)...)
	}
	got := parseDirents(b, nil)
	want := []warmEntry{{"sub", true}, {"file.go", false}, {"l", false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	// A truncated record ends the parse without a panic.
	if got := parseDirents(b[:len(b)-3], nil); len(got) != 2 {
		t.Fatalf("truncated: %v", got)
	}
}

func FuzzParseDirents(f *testing.F) {
	f.Add(append(dirent("a", syscall.DT_DIR), dirent("bb", syscall.DT_REG)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ents := parseDirents(b, nil)
		for _, e := range ents {
			if e.name == "" || e.name == "." || e.name == ".." {
				t.Fatalf("parsed %q", e.name)
			}
		}
		if len(ents) > len(b)/19 {
			t.Fatalf("%d entries from %d bytes", len(ents), len(b))
		}
	})
}

// TestHoldWarm: while held, a walker with work queued waits instead of
// taking it; the release lets it go on.
func TestHoldWarm(t *testing.T) {
	m := &Mount{doneC: make(chan struct{})}
	if release := m.HoldWarm(); release == nil {
		t.Fatal("HoldWarm without a warm-up returned nil")
	} else {
		release() // a no-op
	}
	w := &m.warm
	w.stop = make(chan struct{})
	w.cond = sync.NewCond(&w.mu)
	w.queue = [][]string{{"a"}}
	w.limit = 100
	release := m.HoldWarm()
	got := make(chan []string, 1)
	go func() {
		dir, _, _, ok := w.next(m.doneC)
		if !ok {
			dir = []string{"<none>"}
		}
		got <- dir
	}()
	for {
		w.mu.Lock()
		parked := w.parked
		w.mu.Unlock()
		if parked > 0 {
			break
		}
		select {
		case d := <-got:
			t.Fatalf("a held warm-up handed out %v", d)
		default:
		}
		runtime.Gosched()
	}
	release()
	release() // idempotent
	if d := <-got; len(d) != 1 || d[0] != "a" {
		t.Fatalf("after the release the walker got %v, want [a]", d)
	}
	w.mu.Lock()
	held := w.held
	w.mu.Unlock()
	if held != 0 {
		t.Fatalf("held = %d after one hold and its release", held)
	}
}

// TestWarmSkippable: errors about one directory skip it; others end the
// walk.
func TestWarmSkippable(t *testing.T) {
	for _, err := range []error{errOtherFS, unix.ENOENT, unix.ENOTDIR, unix.EACCES, unix.EPERM, unix.ELOOP, unix.ESTALE,
		fmt.Errorf("open: %w", unix.ENOENT)} {
		if !warmSkippable(err) {
			t.Errorf("%v ends the walk; it concerns one directory", err)
		}
	}
	for _, err := range []error{unix.ENOTCONN, unix.EIO, unix.ENOMEM} {
		if warmSkippable(err) {
			t.Errorf("%v is skipped; it must end the walk", err)
		}
	}
}

// TestWarmBudgetInDirectory: one huge directory is not listed far past
// the limit (listWarm stops between getdents chunks).
func TestWarmBudgetInDirectory(t *testing.T) {
	objs := newFakeObjects(t)
	big := gridSpec(1, 3000, 0, "big%d", "f%05d-with-a-longer-name-to-fill-chunks")
	m, _ := mountT(t, objs, objs.build(t, big), &mountOpts{warm: 20})
	waitWarm(t, m)
	// root: 1 name; big: chunks of a 128 KiB buffer until past 19 names.
	if n, _ := m.Warmed(); n < 20 || n >= 3001 {
		t.Fatalf("warmed %d names, want at least 20 and not all 3001", n)
	}
}

// TestWarmStopWhileHeld: walkers parked by a hold end as soon as the
// warm-up is stopped (stopWarm wakes them), with the mount still up.
func TestWarmStopWhileHeld(t *testing.T) {
	objs := newFakeObjects(t)
	m, _ := mountT(t, objs, objs.build(t, gridSpec(300, 2, 0, "d%03d", "f%d")), nil)
	held := make(chan func(), 1)
	var once sync.Once
	m.warm.afterList = func([]string) { once.Do(func() { held <- m.HoldWarm() }) } // after the root
	m.startWarm(1<<20, 0)
	release := <-held
	defer release()
	w := &m.warm
	for { // every walker parked: nothing in flight will wake them
		w.mu.Lock()
		parked, busy := w.parked, w.busy
		w.mu.Unlock()
		if parked == warmWalkers && busy == 0 {
			break
		}
		runtime.Gosched()
	}
	m.stopWarm()
	if n, running := m.Warmed(); running {
		t.Fatalf("the held warm-up still runs after stopWarm (%d names listed)", n)
	}
}

// gitTree is a git work tree: .git at the root, .gitignore in a only.
func gitTree(withGit bool) spec {
	s := spec{"a/.gitignore": "*.o\n", "a/x": "x", "b/y": "y", "c/d/z": "z", "top": "t"}
	if withGit {
		s[".git/HEAD"] = "ref: refs/heads/main\n"
	}
	return s
}

// gitignoreLookups stats .gitignore in every directory of gitTree and
// returns how many LOOKUPs that sent.
func gitignoreLookups(t *testing.T, m *Mount, mnt string) int64 {
	t.Helper()
	before := m.daemonLookups.Load()
	for _, d := range []string{"", "a", "b", "c", "c/d"} {
		_, err := os.Lstat(filepath.Join(mnt, d, ".gitignore"))
		if want := d == "a"; (err == nil) != want {
			t.Fatalf("stat %s/.gitignore: %v", d, err)
		}
	}
	return m.daemonLookups.Load() - before
}

// TestWarmProbesGitignore: in a git work tree the warm-up caches the
// absence of .gitignore wherever a listing lacks it, so git's misses send
// no LOOKUP; without .git at the root it probes nothing (the control).
func TestWarmProbesGitignore(t *testing.T) {
	for _, withGit := range []bool{true, false} {
		t.Run(fmt.Sprintf("git=%v", withGit), func(t *testing.T) {
			objs := newFakeObjects(t)
			m, mnt := mountT(t, objs, objs.build(t, gitTree(withGit)), &mountOpts{warm: 10000})
			waitWarm(t, m)
			n := gitignoreLookups(t, m, mnt)
			if withGit && n != 0 {
				t.Fatalf("misses of .gitignore after the warm-up sent %d LOOKUPs, want 0", n)
			}
			if !withGit && n < 4 {
				t.Fatalf("without .git: %d LOOKUPs for 4 misses, want 4 (nothing probed)", n)
			}
		})
	}
}

// TestWarmProbeThenSwitchAddsName: a cached miss does not outlive a view
// switch that adds the name.
func TestWarmProbeThenSwitchAddsName(t *testing.T) {
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, gitTree(true)), &mountOpts{warm: 10000})
	waitWarm(t, m)
	if n := gitignoreLookups(t, m, mnt); n != 0 {
		t.Fatalf("%d LOOKUPs after the warm-up, want 0 (misses cached)", n)
	}
	next := gitTree(true)
	next["c/d/.gitignore"] = "new\n"
	if err := m.SwitchView(objs.build(t, next)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(mnt, "c/d/.gitignore"))
	if err != nil || string(b) != "new\n" {
		t.Fatalf("c/d/.gitignore after the switch: %q, %v", b, err)
	}
}

// TestWarmSkipsLooseObjects: in a git work tree the warm-up does not list
// the 256 fan-out directories of loose objects (objects/pack and a name
// that only looks like one are listed), and probes no .gitignore inside
// .git (git does not scan it).
func TestWarmSkipsLooseObjects(t *testing.T) {
	s := gridSpec(12, 2, 0, "w%02d/sub/deeper", "f%d")
	s[".git/HEAD"] = "ref: refs/heads/main\n"
	s[".git/objects/pack/p.pack"] = "p"
	for _, o := range []string{"00", "3f", "ab", "ff"} {
		s[".git/objects/"+o+"/0123456789"] = "o"
	}
	s[".git/objects/abc/not-fan-out"] = "x"
	s["w00/objects/ab/not-in-git"] = "x"
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, s), nil)
	var mu sync.Mutex
	listed := map[string]bool{}
	m.warm.afterList = func(dir []string) {
		mu.Lock()
		listed[filepath.Join(dir...)] = true
		mu.Unlock()
	}
	m.startWarm(10000, 0)
	waitWarm(t, m)
	// 1 root + 12*3 work tree + w00/objects/ab + .git, objects, pack, abc.
	if len(listed) != 43 || !listed[".git/objects/abc"] || !listed[".git/objects/pack"] || !listed["w00/objects/ab"] || listed[".git/objects/ab"] {
		t.Fatalf("listed %d directories %v, want 43: all but the loose objects' fan-out", len(listed), listed)
	}
	before := m.daemonLookups.Load()
	for _, d := range []string{".git", ".git/objects/ab", "w03/sub"} {
		if _, err := os.Lstat(filepath.Join(mnt, d, ".gitignore")); err == nil {
			t.Fatalf("%s/.gitignore exists", d)
		}
	}
	// The work tree's miss is cached; the two inside .git were not probed.
	if n := m.daemonLookups.Load() - before; n != 2 {
		t.Fatalf("misses of .gitignore in .git, .git/objects/ab and w03/sub sent %d LOOKUPs, want 2", n)
	}
}
