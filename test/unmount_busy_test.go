package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startInside starts sh -c script in its own session with working
// directory dir and returns it running; the test's cleanup kills it. The
// script holds dir open (fd 9) throughout, as a tool at work holds its
// files: a session that only waits for input with its working directory
// in a mount lets its lease go after --idle-close (docs/windows.md "Idle
// sessions"), and these tests need a session that is still at work.
func startInside(t *testing.T, dir, script string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "exec 9< . || exit 1; "+script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd
}

// TestUnmountRefusesWhileInUse: while a process still works inside the
// mount, unmount does nothing at all — ending its lease would capture and
// switch the view under it (a git gc running there read corrupt objects),
// and detaching the mount would let it write into a view nothing captures:
// it exits 4 naming the process, and the mount, the window and the head
// stay as they were. Once the process is done, unmount (which also takes
// the workspace's name) captures everything it wrote. --lazy detaches a
// mount in use.
func TestUnmountRefusesWhileInUse(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base.txt": "base\n"})
	gate := e.fifo("gate")
	done := filepath.Join(e.dir, "done")
	p := startInside(t, mp, `echo early > early.txt && read x < "$G" && echo late > late.txt && cat early.txt > copy.txt && touch "$D"`, "G="+gate.path, "D="+done)
	w := gate.opened(30 * time.Second)
	head := e.head("child")
	r := e.fails(4, "unmount", mp)
	want := fmt.Sprintf("in use by pid %d (sh)", p.Process.Pid)
	if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "hint: ") || !strings.Contains(r.stderr, "nothing was done") {
		t.Fatalf("unmount of a mount in use: %s, want %q and a hint", r, want)
	}
	if !isMountpoint(mp) {
		t.Fatal("the refused unmount detached the mount")
	}
	if st := e.statusOf("child"); e.head("child") != head || len(st.Leases) != 1 {
		t.Fatalf("the refused unmount touched the workspace: head %s (was %s), leases %+v", e.head("child"), head, st.Leases)
	}
	release(t, w)
	if err := p.Wait(); err != nil {
		t.Fatalf("the process inside the mount failed after the refused unmount: %v", err)
	}
	if _, err := os.Stat(done); err != nil {
		t.Fatal(err)
	}
	if o, _ := e.unmount("child"); o == "" {
		t.Fatal("no outcome")
	}
	if isMountpoint(mp) {
		t.Fatal("unmount by the workspace's name left it mounted")
	}
	got := e.exportTo("child", "after-unmount")
	for name, want := range map[string]string{"early.txt": "early\n", "late.txt": "late\n", "copy.txt": "early\n"} {
		if b := readFile(t, filepath.Join(got, name)); b != want {
			t.Fatalf("%s after the unmount: %q, want %q", name, b, want)
		}
	}

	// --lazy detaches at once.
	e.mountAt("child")
	q := startInside(t, mp, `exec sleep 600`)
	_ = q
	r = e.run("unmount", "--lazy", mp)
	if r.code != 0 || isMountpoint(mp) {
		t.Fatalf("unmount --lazy of a mount in use: %s (still mounted: %v)", r, isMountpoint(mp))
	}
	e.fsck()
}

// TestInPlaceUnmountIgnoresProcessesUnderneath: a process whose working
// directory is DIR from before the in-place mount uses the directory
// underneath, under the same path: it does not make the unmount busy.
func TestInPlaceUnmountIgnoresProcessesUnderneath(t *testing.T) {
	t.Parallel()
	e, dir := newInPlaceEnv(t, map[string]string{"a": "a\n"})
	startInside(t, dir, `exec sleep 600`) // before the mount: underneath
	e.ok("mount", "ws")
	e.execOK(dir, "echo b > b")
	if o, _ := e.unmount(dir); o != "current" {
		t.Fatalf("unmount: %s", o)
	}
	if got := readFile(t, filepath.Join(dir, "b")); got != "b\n" {
		t.Fatalf("DIR's b: %q", got)
	}
}
