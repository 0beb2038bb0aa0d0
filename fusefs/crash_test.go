package fusefs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

const crashChildEnv = "FUSEFS_CRASH_CHILD"

// startCrashChild runs crashChild in a child process serving root (from
// the objects in objDir) at a new mountpoint with a new state directory,
// and waits until it serves. kill sends it SIGKILL and reaps it; a child
// not killed by the test is killed at cleanup, and the mountpoint is
// detached either way.
func startCrashChild(t *testing.T, objDir string, root store.ID, pt bool) (state, mnt string, kill func() error) {
	t.Helper()
	state, mnt = t.TempDir(), t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"=1", "FUSEFS_ROOT="+root.String(),
		"FUSEFS_OBJS="+objDir, "FUSEFS_MNT="+mnt, "FUSEFS_STATE="+state)
	if pt {
		cmd.Env = append(cmd.Env, "FUSEFS_PT=1")
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child: %q %v", line, err)
	}
	kill = func() error {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return err
		}
		cmd.Wait()
		killed = true
		return nil
	}
	return state, mnt, kill
}

// crashChild serves a mount until it is killed (run by TestCrashRecovery
// through a re-exec of the test binary).
func crashChild() {
	root, err := store.ParseID(os.Getenv("FUSEFS_ROOT"))
	if err != nil {
		fmt.Println("bad root:", err)
		os.Exit(2)
	}
	objs := newFakeObjectsAt(os.Getenv("FUSEFS_OBJS"))
	_, err = MountAt(os.Getenv("FUSEFS_MNT"), Config{Objects: objs, Root: root,
		StateDir: os.Getenv("FUSEFS_STATE"), FsName: "fusefs-test", Passthrough: os.Getenv("FUSEFS_PT") != ""})
	if err != nil {
		fmt.Println("mount:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	select {}
}

func fsyncPath(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func writeSync(t *testing.T, p, content string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestCrashRecovery(t *testing.T) {
	for _, pt := range []bool{false, true} {
		t.Run(fmt.Sprintf("passthrough=%v", pt), func(t *testing.T) { testCrashRecovery(t, pt) })
	}
}

func testCrashRecovery(t *testing.T, pt bool) {
	objDir := t.TempDir()
	objs := newFakeObjectsAt(objDir)
	root := objs.build(t, spec{"keep.txt": "lower", "d/old.txt": "old", "big/a": "a"})
	state, mnt, kill := startCrashChild(t, objDir, root, pt)
	p := func(s string) string { return filepath.Join(mnt, s) }

	writeSync(t, p("new.txt"), "fsynced data")
	writeSync(t, p("gone"), "removed after the last fsync")
	writeSync(t, p("keep.txt"), "rewritten")
	if err := os.Mkdir(p("nd"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeSync(t, p("nd/inner"), "inner")
	writeSync(t, p("nd/we\nird\xff"), "odd name")
	if err := os.Rename(p("d/old.txt"), p("nd/renamed.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p("big"), p("nd/big")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("inner", p("nd/sl")); err != nil {
		t.Fatal(err)
	}
	fsyncPath(t, p("nd"))
	// Written but never fsynced: may or may not survive; must not break replay.
	mustWrite(t, p("unsynced"), "maybe")
	// Removed after the last snapshot, which still names its upper file.
	if err := os.Remove(p("gone")); err != nil {
		t.Fatal(err)
	}

	if err := kill(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
		t.Fatalf("detach dead mount: %v", err)
	}

	// Offline recovery sees the fsynced state.
	want := map[string]string{
		"new.txt": "file:fsynced data", "keep.txt": "file:rewritten", "nd/": "dir", "nd/inner": "file:inner",
		"nd/renamed.txt": "file:old", "nd/big/": "dir", "nd/big/a": "file:a", "nd/sl": "symlink:inner", "d/": "dir",
		"nd/we\nird\xff": "file:odd name",
	}
	objs2 := newFakeObjectsAt(objDir)
	rid, changed, err := RecoverCapture(state, objs2, root)
	if err != nil || !changed {
		t.Fatalf("recover capture: %v %v", changed, err)
	}
	got := objs2.flatten(t, rid)
	delete(got, "unsynced")
	delete(got, "gone")
	if d := diffMaps(got, want); d != "" {
		t.Fatalf("recovered capture differs:\n%s", d)
	}
	// The killed mount's upper-file pool (files named by reserved inode
	// numbers) is gone: every upper file left belongs to an inode.
	ov, err := openOverlay(state, objs2, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	uppers := map[string]bool{}
	var walk func(d *inode)
	walk = func(d *inode) {
		for _, c := range d.children {
			if c.upper {
				uppers[strconv.FormatUint(c.num, 10)] = true
			}
			if c.isDir() {
				walk(c)
			}
		}
	}
	walk(ov.root)
	ents, err := os.ReadDir(filepath.Join(state, "upper"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !uppers[e.Name()] {
			t.Errorf("upper file %s left after recovery, no inode has it", e.Name())
		}
	}

	// Remounting the same StateDir replays it.
	_, mnt2 := mountT(t, objs2, root, &mountOpts{stateDir: state})
	got = flattenDir(t, mnt2)
	delete(got, "unsynced")
	delete(got, "gone")
	if d := diffMaps(got, want); d != "" {
		t.Fatalf("remounted view differs:\n%s", d)
	}
}

// TestCrashKeepsUnsyncedChanges: nothing is fsynced, and the daemon is
// killed with SIGKILL; every change a request completed survives, from the
// overlay log (wal.go), offline and on remount.
func TestCrashKeepsUnsyncedChanges(t *testing.T) {
	for _, pt := range []bool{false, true} {
		t.Run(fmt.Sprintf("passthrough=%v", pt), func(t *testing.T) { testCrashKeepsUnsynced(t, pt) })
	}
}

func testCrashKeepsUnsynced(t *testing.T, pt bool) {
	objDir := t.TempDir()
	objs := newFakeObjectsAt(objDir)
	s := spec{"keep.txt": "lower", "d/old.txt": "old", "big/a": "a", "gone.txt": "bye", "x/y/z.txt": "deep"}
	for i := 0; i < 50; i++ {
		s[fmt.Sprintf("many/f%02d", i)] = "m"
	}
	root := objs.build(t, s)
	state, mnt, kill := startCrashChild(t, objDir, root, pt)
	p := func(s string) string { return filepath.Join(mnt, s) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, p("new.txt"), "new")
	mustWrite(t, p("keep.txt"), "rewritten")
	must(os.MkdirAll(p("nd/sub"), 0o755))
	mustWrite(t, p("nd/sub/inner"), "inner")
	must(os.Rename(p("d/old.txt"), p("nd/renamed.txt")))
	must(os.Rename(p("big"), p("nd/big")))
	must(os.Symlink("inner", p("nd/sub/sl")))
	must(os.Remove(p("gone.txt")))
	mustWrite(t, p("tmp"), "created and removed")
	must(os.Remove(p("tmp")))
	must(os.Chmod(p("x/y/z.txt"), 0o755))
	must(os.Link(p("new.txt"), p("x/hard")))
	for i := 0; i < 50; i += 2 {
		must(os.Remove(p(fmt.Sprintf("many/f%02d", i))))
	}
	mustWrite(t, p("many/added"), "added")
	f, err := os.OpenFile(p("x/y/z.txt"), os.O_APPEND|os.O_WRONLY, 0)
	must(err)
	_, err = f.WriteString("+appended")
	must(err)
	must(f.Close())
	must(os.Rename(p("nd/sub"), p("moved")))

	must(kill())
	must(syscall.Unmount(mnt, syscall.MNT_DETACH))

	want := map[string]string{
		"new.txt": "file:new", "keep.txt": "file:rewritten", "nd/": "dir", "moved/": "dir", "moved/inner": "file:inner",
		"moved/sl": "symlink:inner", "nd/renamed.txt": "file:old", "nd/big/": "dir", "nd/big/a": "file:a", "d/": "dir",
		"x/": "dir", "x/y/": "dir", "x/y/z.txt": "exec:deep+appended", "x/hard": "file:new", "many/": "dir", "many/added": "file:added",
	}
	for i := 1; i < 50; i += 2 {
		want[fmt.Sprintf("many/f%02d", i)] = "file:m"
	}
	objs2 := newFakeObjectsAt(objDir)
	rid, _, err := RecoverCapture(state, objs2, root)
	if err != nil {
		t.Fatalf("recover capture: %v", err)
	}
	if d := diffMaps(objs2.flatten(t, rid), want); d != "" {
		t.Fatalf("recovered capture differs:\n%s", d)
	}
	_, mnt2 := mountT(t, objs2, root, &mountOpts{stateDir: state})
	got := flattenDir(t, mnt2)
	if d := diffMaps(got, want); d != "" {
		t.Fatalf("remounted view differs:\n%s", d)
	}
}

// TestRecoveryReportsDroppedUppers: an upper file with data that no
// record names (a create whose request a crash interrupted) is deleted at
// recovery and reported with its count and bytes; the empty files of the
// dead mount's pool are not.
func TestRecoveryReportsDroppedUppers(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"a": "lower"})
	state := t.TempDir()
	m, mnt := mountT(t, objs, root, &mountOpts{stateDir: state})
	mustWrite(t, filepath.Join(mnt, "kept"), "kept")
	waitReleased(m)
	crashed := copyStateDir(t, state)
	if err := os.WriteFile(filepath.Join(crashed, "upper", "99999"), []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, "upper", "99998"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	id, _, notes, err := RecoverCaptureReport(crashed, objs, root)
	if err != nil {
		t.Fatal(err)
	}
	if got := objs.flatten(t, id)["kept"]; got != "file:kept" {
		t.Fatalf("recovered kept = %q", got)
	}
	if len(notes) != 1 || !stringsContains(notes[0], "dropped 1 upper file (5 bytes)") {
		t.Fatalf("recovery notes: %q", notes)
	}
	if _, err := os.Stat(filepath.Join(crashed, "upper", "99999")); !os.IsNotExist(err) {
		t.Fatalf("stray upper file left: %v", err)
	}
}
