package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestOverlayCrashRecovery kills the daemon at the overlay's durability
// steps (writing the snapshot an fsync asks for, switching the view after
// a capture) and checks that the next mount recovers a consistent
// workspace: an fsync that returned is never lost, a file is either whole
// or absent, and fsck is clean.
func TestOverlayCrashRecovery(t *testing.T) {
	cases := []struct {
		point string
		// mustHave: the file's write must survive (its fsync reached the
		// durable snapshot, or its session was captured and published).
		mustHave bool
	}{
		{"overlay.before-snapshot", false},
		{"overlay.after-snapshot", true},
		{"switch.before", true},
		{"switch.after-overlay", true},
	}
	for _, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			e := newEnv(t)
			src := filepath.Join(e.dir, "src")
			writeTree(t, src, map[string]string{"base.txt": "base\n"})
			e.ok("create", "main", "--from", src)
			e.ok("fork", "main", "child")
			mp := filepath.Join(e.dir, "mnt")
			os.Mkdir(mp, 0o755)
			e.mountWithFailpoint(c.point, "child", mp, "--lease-ttl", "300ms")
			pid := e.daemonPID()
			// One session writes and fsyncs a file, then ends: its fsync
			// writes the snapshot; its end captures and switches the view.
			// The tool enters the mount itself, inside its own session:
			// with cmd.Dir, os/exec would stat mp from this test's process,
			// and that request would open a lease for the test's session,
			// which outlives the tool.
			tool := exec.Command("setsid", "-w", "sh", "-c", `cd "$1" && printf 'payload\n' > f.txt && sync f.txt`, "sh", mp)
			toolErr := tool.Run()
			if err := waitGone(pid, 20*time.Second); err != nil {
				t.Fatalf("daemon did not die at %s: %v", c.point, err)
			}
			if c.point == "overlay.after-snapshot" && toolErr == nil {
				// Fine either way: the daemon died after the snapshot, before
				// or after answering the fsync.
				t.Log("tool's fsync returned before the kill")
			}
			time.Sleep(400 * time.Millisecond) // let the dead daemon's 300ms leases expire (a clock deadline, no event)
			if r := e.run("mount", "child", mp); r.code != 0 {
				t.Fatalf("remount after crash at %s: %s", c.point, r)
			}
			if r := e.run("unmount", mp); r.code != 0 {
				t.Fatalf("unmount: %s", r)
			}
			got := e.content("child", "f.txt")
			switch {
			case got == "payload\n":
			case got == "<missing>" && !c.mustHave:
			default:
				t.Fatalf("after a crash at %s, f.txt = %q (fsync returned: %v)", c.point, got, toolErr == nil)
			}
			if toolErr == nil && got != "payload\n" {
				t.Fatalf("an fsync that returned was lost at %s", c.point)
			}
			if b := e.content("child", "base.txt"); b != "base\n" {
				t.Fatalf("base.txt = %q", b)
			}
			e.fsck()
		})
	}
}
