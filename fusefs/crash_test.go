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
	state := t.TempDir()
	mnt := t.TempDir()

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

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
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
