package test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountWithFailpoint mounts ws with a failpoint armed in the daemon that
// mount starts (the daemon inherits the environment).
func (e *env) mountWithFailpoint(point, ws, mp string, extra ...string) {
	e.t.Helper()
	cmd := exec.Command(bin, append([]string{"--store", e.store, "mount", ws, mp}, extra...)...)
	cmd.Env = append(os.Environ(), "ACYCLICFS_FAILPOINT_ARMED=1", "ACYCLICFS_FAILPOINT="+point)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("mount with failpoint %s: %v\n%s", point, err, out)
	}
}

// TestReconcileCrashRecovery kills the daemon at each step of the final
// close and checks that the next mount recovers: the workspace holds the
// tools' writes exactly once, the parent's change is merged, and fsck is
// clean. The head is either the old or a complete new one — never torn.
func TestReconcileCrashRecovery(t *testing.T) {
	for _, point := range []string{"reconcile.after-capture", "reconcile.after-publish", "reconcile.before-complete"} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			src := filepath.Join(e.dir, "src")
			writeTree(t, src, map[string]string{"base.txt": "base\n"})
			e.ok("create", "main", "--from", src)
			e.ok("fork", "main", "child")
			mp := filepath.Join(e.dir, "mnt")
			os.Mkdir(mp, 0o755)
			e.mountWithFailpoint(point, "child", mp, "--lease-ttl", "500ms")
			pid := e.daemonPID()
			if pid == 0 {
				t.Fatal("no daemon pid")
			}
			// Open a window, advance the parent meanwhile, then close it.
			// The tool says it wrote through a FIFO outside the mount: a
			// probe of the mount from another session would open a lease of
			// its own, and if it ended before the tool's lease was bound,
			// its final close would hit the failpoint first.
			gate, ready := filepath.Join(e.dir, "gate"), filepath.Join(e.dir, "ready")
			for _, f := range []string{gate, ready} {
				if err := syscall.Mkfifo(f, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// Opened read-write, the FIFO does not block the open here,
			// and closing it ends a read that waits for a tool that died.
			rf, err := os.OpenFile(ready, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer rf.Close()
			// big.bin is big enough that the capture adopts its upper
			// file as the blob (a hard link): the crash leaves the state
			// directory sharing it with the store.
			big := bytes.Repeat([]byte("big file of the tool\n"), 9<<20/21+1)
			bigSrc := filepath.Join(e.dir, "big.src")
			if err := os.WriteFile(bigSrc, big, 0o600); err != nil {
				t.Fatal(err)
			}
			tool := exec.Command(bin, "--store", e.store, "exec", mp, "--", "sh", "-c",
				`echo "tool wrote" > mine.txt && cp `+bigSrc+` big.bin && sync mine.txt big.bin && echo wrote > `+ready+` && read x < `+gate)
			tool.Stderr = os.Stderr
			if err := tool.Start(); err != nil {
				t.Fatal(err)
			}
			toolDone := make(chan error, 1)
			go func() { toolDone <- tool.Wait() }()
			said := make(chan string, 1)
			go func() {
				line, _ := bufio.NewReader(rf).ReadString('\n')
				said <- line
			}()
			select {
			case line := <-said:
				if line != "wrote\n" {
					t.Fatalf("tool said %q", line)
				}
			case err := <-toolDone:
				t.Fatalf("tool ended before it wrote: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("tool never wrote")
			}
			e.edit("main", map[string]string{"parent.txt": "from parent\n"})
			os.WriteFile(gate, []byte("go\n"), 0o600) // let the tool finish: final close → failpoint
			<-toolDone
			if err := waitGone(pid, 20*time.Second); err != nil {
				t.Fatalf("daemon did not die at %s: %v", point, err)
			}
			// The next mount recovers.
			time.Sleep(600 * time.Millisecond) // let the dead daemon's 500ms leases expire (a real clock deadline)
			if r := e.run("mount", "child", mp); r.code != 0 {
				t.Fatalf("remount after crash at %s: %s", point, r)
			}
			r := e.run("unmount", mp)
			if r.code != 0 {
				t.Fatalf("unmount: %s", r)
			}
			if got := e.content("child", "mine.txt"); got != "tool wrote\n" {
				t.Fatalf("tool's write after recovery = %q", got)
			}
			if got := e.content("child", "big.bin"); got != string(big) {
				t.Fatalf("tool's big file after recovery: %d bytes, want %d", len(got), len(big))
			}
			if got := e.content("child", "parent.txt"); got != "from parent\n" {
				t.Fatalf("parent's change after recovery = %q (status:\n%s)", got, e.run("status").stdout)
			}
			log := e.run("log", "child").stdout
			if n := strings.Count(log, "\trebase\t"); n != 1 {
				t.Fatalf("want exactly one rebase after recovery, log:\n%s", log)
			}
			e.fsck()
		})
	}
}
