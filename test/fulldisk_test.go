package test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// smallFS makes a file system of size bytes (ext4 on a loop device, no
// blocks reserved for root, so that the daemon, root too, sees it full
// when it is) and returns where it is mounted. It is unmounted and its
// loop device detached when the test ends, failed or not; register it
// before the env whose store lives on it, so that the env's shutdown runs
// first. It skips the test where it cannot be made.
func smallFS(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a loop-mounted file system")
	}
	for _, tool := range []string{"mkfs.ext4", "losetup", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices: %v", err)
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4: %v: %s", err, out)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device to be had: losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	mnt := filepath.Join(dir, "fs")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if slicesContains(mountsOf(), mnt) {
			if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s (detaching it lazily)", mnt, err, out)
				_ = unix.Unmount(mnt, unix.MNT_DETACH)
			}
		}
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	if out, err := exec.Command("mount", dev, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v: %s", dev, err, out)
	}
	return mnt
}

// mountsOf lists every mountpoint (of any file system type).
func mountsOf() []string {
	b, _ := os.ReadFile("/proc/self/mounts")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			out = append(out, strings.ReplaceAll(f[1], `\040`, " "))
		}
	}
	return out
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// freeOn is the space left on the file system of dir.
func freeOn(t *testing.T, dir string) int64 {
	t.Helper()
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil {
		t.Fatal(err)
	}
	return int64(sf.Bavail) * sf.Bsize
}

// fullDiskEnv is a mounted fork whose store is on a 48 MB file system and
// whose mountpoint is elsewhere.
func fullDiskEnv(t *testing.T) (*env, string, string) {
	t.Helper()
	fsDir := smallFS(t, 48<<20)
	e := newMountEnv(t)
	e.store = filepath.Join(fsDir, "store")
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "child")
	return e, fsDir, e.mountAt("child")
}

// seqLines is what `seq 1 n` prints.
func seqLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// captureState is the capture object of status --json's row.
type captureState struct {
	State       string `json:"state"`
	NoSpace     bool   `json:"no_space"`
	Store       string `json:"store"`
	NeededBytes int64  `json:"needed_bytes"`
	FreeBytes   int64  `json:"free_bytes"`
	Attempts    int    `json:"attempts"`
}

// captureOf is the capture state status --json reports for ws (nil: none).
func (e *env) captureOf(ws string) *captureState {
	e.t.Helper()
	r := e.run("--json", "status", ws)
	if r.code != 0 {
		e.t.Fatalf("status --json: %s", r)
	}
	var rep struct {
		Workspaces []struct {
			Window  string        `json:"window"`
			Capture *captureState `json:"capture"`
		} `json:"workspaces"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Workspaces) != 1 {
		e.t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return rep.Workspaces[0].Capture
}

// TestFullStoreDiskCaptureFailsAndRecovers: a tool fills the store's disk
// through a mount (ENOSPC) after fsyncing a smaller file, and its session
// ends. The capture fails for space: the lease ends all the same (the
// window goes idle instead of staying active past its expiry), status
// says so in text and JSON (store path, bytes needed), unmount and
// unmount --lazy refuse naming the store and leave the mount as it was,
// and land refuses (the head lacks what the mount holds).
// Once a tool deletes the big file the capture is stored (status says
// so), gc leaves no retired upper file behind, unmount succeeds, every
// fsynced byte is kept and fsck is clean.
func TestFullStoreDiskCaptureFailsAndRecovers(t *testing.T) {
	e, fsDir, mp := fullDiskEnv(t)
	kept := seqLines(20000)
	// The big write fails with ENOSPC, as it should; the shell goes on.
	if r, err := sessionRun(mp, `seq 1 20000 > kept.txt && sync kept.txt && { head -c 80000000 /dev/zero > big; true; }`); err != nil || r.code != 0 {
		t.Fatalf("fill the disk through the mount: %v %s", err, r)
	}
	if free := freeOn(t, fsDir); free > 1<<20 {
		t.Fatalf("the store's disk is not full: %d bytes free", free)
	}
	var c *captureState
	waitFor(t, 20*time.Second, "status to report the failed capture", func() bool {
		c = e.captureOf("child")
		return c != nil
	})
	if c.State != "failed" || !c.NoSpace || c.Store != e.store || c.NeededBytes < 30<<20 || c.Attempts < 1 {
		t.Fatalf("status --json capture: %+v, want failed for space in %s needing > 30 MB", c, e.store)
	}
	st := e.statusOf("child")
	if st.Window != "idle" || len(st.Leases) != 0 {
		t.Fatalf("the failed capture left the window %s with leases %+v; want the dead session's lease ended", st.Window, st.Leases)
	}
	text := e.run("status").stdout
	if !strings.Contains(text, "capture child failed") || !strings.Contains(text, "no space left on the store's disk") || !strings.Contains(text, e.store) {
		t.Fatalf("status text does not say the capture failed for space:\n%s", text)
	}

	// Nothing can be unmounted without storing the changes: both refuse,
	// say what to free, and leave the mount serving.
	for _, args := range [][]string{{"unmount", mp}, {"unmount", "--lazy", mp}} {
		r := e.fails(1, args...)
		if !strings.Contains(r.stderr, "no space left on the store's disk") || !strings.Contains(r.stderr, e.store) ||
			!strings.Contains(r.stderr, "needs up to") || !strings.Contains(r.stderr, "hint: free space") {
			t.Fatalf("%v on a full disk: %s", args, r)
		}
		if !isMountpoint(mp) {
			t.Fatalf("%v failed but detached the mount", args)
		}
		if got := e.statusOf("child"); got.State != "mounted" {
			t.Fatalf("%v failed and left the workspace %s", args, got.State)
		}
	}
	if got := inSession(t, mp, "cat kept.txt"); got != kept {
		t.Fatal("kept.txt changed in the mount")
	}
	// Landing now would publish a head without what the mount holds.
	mainHead := e.head("main")
	if r := e.fails(1, "land", "child"); !strings.Contains(r.stderr, "holds changes no capture could store yet") {
		t.Fatalf("land with a capture owed: %s", r)
	}
	if e.head("main") != mainHead {
		t.Fatal("the refused land moved main")
	}

	// The tool deletes the big file: its session's final close stores the
	// capture, and status says so.
	inSession(t, mp, `rm big`)
	defer func() {
		if t.Failed() {
			t.Log(e.daemonLog())
		}
	}()
	waitFor(t, 20*time.Second, "status to report the stored capture", func() bool {
		c = e.captureOf("child")
		return c != nil && c.State == "stored"
	})
	if text := e.run("status").stdout; !strings.Contains(text, "capture child stored") {
		t.Fatalf("status text does not say the capture was stored:\n%s", text)
	}
	e.ok("gc")
	trash, err := os.ReadDir(filepath.Join(e.store, "mounts", "child", "upper-trash"))
	if err != nil || len(trash) != 0 {
		t.Fatalf("upper-trash after gc: %v %v", trash, err)
	}
	if free := freeOn(t, fsDir); free < 30<<20 {
		t.Fatalf("only %d bytes free after the big file was deleted and gc ran", free)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: %s", o)
	}
	if got := e.run("cat", "child", "kept.txt").stdout; got != kept {
		t.Fatalf("kept.txt after unmount: %d bytes, want %d", len(got), len(kept))
	}
	got := e.exportTo("child", "out")
	if b := readFile(t, filepath.Join(got, "kept.txt")); b != kept {
		t.Fatalf("exported kept.txt: %d bytes, want %d", len(b), len(kept))
	}
	if _, err := os.Stat(filepath.Join(got, "big")); !os.IsNotExist(err) {
		t.Fatalf("the deleted big file came back: %v", err)
	}
	e.fsck()
}

// TestFullStoreDiskDeleteInSession: a tool fsyncs a big file, fills the
// store's disk (ENOSPC) and deletes the file, all in one session. The
// deleted file's upper sits in upper-trash (the durable snapshot still
// names it) and keeps the disk full; the final close frees it and
// captures, the window goes idle, nothing is left in upper-trash, and
// unmount succeeds with every fsynced byte kept.
func TestFullStoreDiskDeleteInSession(t *testing.T) {
	e, fsDir, mp := fullDiskEnv(t)
	kept := seqLines(20000)
	script := `seq 1 20000 > kept.txt && sync kept.txt &&
head -c 8000000 /dev/zero > big && sync big &&
{ head -c 80000000 /dev/zero >> big; true; } && rm big`
	if r, err := sessionRun(mp, script); err != nil || r.code != 0 {
		t.Fatalf("fill the disk through the mount and delete: %v %s", err, r)
	}
	e.waitIdle("child")
	if c := e.captureOf("child"); c != nil && c.State == "failed" {
		t.Fatalf("the capture after the delete failed: %+v", c)
	}
	trash, err := os.ReadDir(filepath.Join(e.store, "mounts", "child", "upper-trash"))
	if err != nil || len(trash) != 0 {
		t.Fatalf("upper-trash after the final close: %d files, %v", len(trash), err)
	}
	if free := freeOn(t, fsDir); free < 30<<20 {
		t.Fatalf("only %d bytes free after the final close", free)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: %s", o)
	}
	if b := readFile(t, filepath.Join(e.exportTo("child", "out"), "kept.txt")); b != kept {
		t.Fatalf("exported kept.txt: %d bytes, want %d", len(b), len(kept))
	}
	e.fsck()
}

// TestShutdownAfterFullDiskFreed: a tool writes and fsyncs a file, then
// another program fills the store's disk before the tool's session ends:
// the capture fails for space. unmount --lazy refuses and leaves the
// mount as it was (it does not detach it with the workspace still
// recorded as mounted); once the other program's file is deleted,
// shutdown stores the capture, unmounts and stops the daemon without a
// restart, and the file is in the workspace's head.
func TestShutdownAfterFullDiskFreed(t *testing.T) {
	e, fsDir, mp := fullDiskEnv(t)
	gate := e.fifo("gate")
	p := startInside(t, mp, `seq 1 200000 > data.txt && sync data.txt && read x < "$G"`, "G="+gate.path)
	w := gate.opened(30 * time.Second)
	fill := filepath.Join(fsDir, "fill")
	if err := exec.Command("sh", "-c", `head -c 100000000 /dev/zero > "$1"; true`, "sh", fill).Run(); err != nil {
		t.Fatal(err)
	}
	release(t, w)
	if err := p.Wait(); err != nil {
		t.Fatalf("the tool failed: %v", err)
	}
	waitFor(t, 20*time.Second, "status to report the failed capture", func() bool {
		c := e.captureOf("child")
		return c != nil && c.State == "failed"
	})
	r := e.fails(1, "unmount", "--lazy", mp)
	if !strings.Contains(r.stderr, "no space left on the store's disk") {
		t.Fatalf("unmount --lazy on a full disk: %s", r)
	}
	if !isMountpoint(mp) || e.statusOf("child").State != "mounted" {
		t.Fatalf("unmount --lazy failed but changed the mount: mounted %v, status %+v", isMountpoint(mp), e.statusOf("child"))
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	pid := e.daemonPID()
	if r := e.run("shutdown"); r.code != 0 {
		t.Fatalf("shutdown after space was freed: %s", r)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if isMountpoint(mp) {
		t.Fatal("shutdown left the mount")
	}
	if got := readFile(t, filepath.Join(e.exportTo("child", "out"), "data.txt")); got != seqLines(200000) {
		t.Fatalf("data.txt after shutdown: %d bytes, want %d", len(got), len(seqLines(200000)))
	}
	e.fsck()
}

// TestUnmountBusyCheckAfterDetach: after the mount was detached from
// outside (umount -l), the busy check of unmount counts only processes
// that use this FUSE mount: a process whose working directory is the
// directory underneath (now the path's file system) does not make it
// busy, and unmount finishes the record.
func TestUnmountBusyCheckAfterDetach(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base.txt": "base\n"})
	e.execOK(mp, "echo a > a.txt")
	if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	// On the parent file system, at the very path of the mountpoint.
	bystander := startInside(t, mp, `exec sleep 600`)
	r := e.run("unmount", mp)
	if r.code != 0 {
		t.Fatalf("unmount after a detach from outside: %s (pid %d only has its working directory under the old mountpoint)", r, bystander.Process.Pid)
	}
	if st := e.statusOf("child"); st.State != "idle" || st.Mountpoint != "" {
		t.Fatalf("after the unmount: state %s mountpoint %q", st.State, st.Mountpoint)
	}
	if got := e.run("cat", "child", "a.txt").stdout; got != "a\n" {
		t.Fatalf("a.txt: %q", got)
	}
	_ = syscall.Kill(-bystander.Process.Pid, syscall.SIGKILL)
}

// TestStatusShowsLeaseIdleTime: status names how long each lease's
// session has made no request of the mount (JSON idle_ms, text "idle D"),
// so a shell left in a mount is told from a tool at work.
func TestStatusShowsLeaseIdleTime(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"log": "1\n"})
	p := startInside(t, mp, `cat log >/dev/null && exec sleep 600`)
	var idle int64
	waitFor(t, 20*time.Second, "status to show the lease idle for a second", func() bool {
		r := e.run("--json", "status", "child")
		var rep struct {
			Workspaces []struct {
				Leases []struct {
					IdleMS *int64 `json:"idle_ms"`
				} `json:"leases"`
			} `json:"workspaces"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r)
		}
		if len(rep.Workspaces) != 1 || len(rep.Workspaces[0].Leases) != 1 || rep.Workspaces[0].Leases[0].IdleMS == nil {
			return false
		}
		idle = *rep.Workspaces[0].Leases[0].IdleMS
		return idle >= 1000
	})
	if idle > 60_000 {
		t.Fatalf("idle_ms %d: the session made a request less than a minute ago", idle)
	}
	if txt := e.run("status", "child").stdout; !strings.Contains(txt, " idle ") {
		t.Fatalf("status text does not show the lease's idle time:\n%s", txt)
	}
	_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
	p.Wait()
	e.waitIdle("child")
	e.unmount(mp)
}

// TestUnmountOnFullDiskWithNothingToWrite: everything the mount holds is
// captured, then another program fills the store's disk: unmount needs
// to write nothing (no overlay snapshot for a state directory it resets)
// and succeeds, and so does fsck.
func TestUnmountOnFullDiskWithNothingToWrite(t *testing.T) {
	e, fsDir, mp := fullDiskEnv(t)
	e.execOK(mp, "echo x > f.txt")
	fill := filepath.Join(fsDir, "fill")
	if err := exec.Command("sh", "-c", `head -c 100000000 /dev/zero > "$1"; true`, "sh", fill).Run(); err != nil {
		t.Fatal(err)
	}
	if free := freeOn(t, fsDir); free > 64<<10 {
		t.Fatalf("the store's disk is not full: %d bytes free", free)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount on a full disk: %s", o)
	}
	if isMountpoint(mp) {
		t.Fatal("still mounted")
	}
	if st := e.statusOf("child"); st.State != "idle" {
		t.Fatalf("after the unmount: %s", st.State)
	}
	if got := e.run("cat", "child", "f.txt").stdout; got != "x\n" {
		t.Fatalf("f.txt: %q", got)
	}
	e.fsck()
}

// TestGCFreesMountScratch: gc gives back mount scratch no overlay needs:
// the retired upper file of a file that was fsynced and deleted while its
// session still runs (upper-trash, kept for the snapshot that names it),
// and a state directory under STORE/mounts that no mount record names.
// The mount's own state and the running session are left alone.
func TestGCFreesMountScratch(t *testing.T) {
	t.Parallel()
	e, mp := forkMounted(t, map[string]string{"base.txt": "base\n"})
	gate := e.fifo("gate")
	p := startInside(t, mp, `head -c 4000000 /dev/zero > big && sync big && rm big && echo kept > kept.txt && read x < "$G"`, "G="+gate.path)
	w := gate.opened(30 * time.Second)
	trashDir := filepath.Join(e.store, "mounts", "child", "upper-trash")
	if ents, err := os.ReadDir(trashDir); err != nil || len(ents) != 1 {
		t.Fatalf("upper-trash while the session runs: %d entries, %v; want the deleted file's", len(ents), err)
	}
	ghost := filepath.Join(e.store, "mounts", "ghost", "upper")
	if err := os.MkdirAll(ghost, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ghost, "7"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Freed int64 `json:"freed_bytes"`
	}
	if r := e.run("--json", "gc"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
		t.Fatalf("gc: %s", r)
	}
	if out.Freed < 4000000+1<<20 {
		t.Fatalf("gc freed %d bytes, want the deleted file's 4000000 and the orphan's 1 MiB", out.Freed)
	}
	if ents, _ := os.ReadDir(trashDir); len(ents) != 0 {
		t.Fatalf("upper-trash after gc: %d entries", len(ents))
	}
	if _, err := os.Stat(filepath.Dir(ghost)); !os.IsNotExist(err) {
		t.Fatalf("the orphaned state directory survived gc: %v", err)
	}
	release(t, w)
	if err := p.Wait(); err != nil {
		t.Fatalf("the session failed after gc: %v", err)
	}
	e.waitIdle("child")
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: %s", o)
	}
	got := e.exportTo("child", "out")
	if b := readFile(t, filepath.Join(got, "kept.txt")); b != "kept\n" {
		t.Fatalf("kept.txt: %q", b)
	}
	if _, err := os.Stat(filepath.Join(got, "big")); !os.IsNotExist(err) {
		t.Fatalf("big came back: %v", err)
	}
	e.fsck()
}

// fillDisk writes a file into dir until its file system is full and
// returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	fill := filepath.Join(dir, "fill")
	if err := exec.Command("sh", "-c", `head -c 100000000 /dev/zero > "$1"; true`, "sh", fill).Run(); err != nil {
		t.Fatal(err)
	}
	return fill
}

// tmpFiles counts the files under the store's tmp/ (blobs being written).
func tmpFiles(t *testing.T, store string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(filepath.Join(store, "tmp"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// toFreeRe is what a full-disk message says to free.
var toFreeRe = regexp.MustCompile(`store disk full: free (\d+) MiB on `)

// captureOnFullDisk: a tool writes and fsyncs a.bin (2 MB) and b.bin
// (6 MB); another program fills the store's disk to 5 MiB of free space
// (room for a.bin's blob, not for both); the tool's session ends and its
// capture fails for space. It returns the filler file and the two files'
// checksums.
func captureOnFullDisk(t *testing.T, e *env, fsDir, mp string) (string, map[string]string) {
	t.Helper()
	gate := e.fifo("gate")
	p := startInside(t, mp, `head -c 2000000 /dev/urandom > a.bin && head -c 6000000 /dev/urandom > b.bin && sync a.bin b.bin && read x < "$G"`, "G="+gate.path)
	w := gate.opened(30 * time.Second)
	fill := fillDisk(t, fsDir)
	fi, err := os.Stat(fill)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(fill, fi.Size()-5<<20); err != nil {
		t.Fatal(err)
	}
	release(t, w)
	if err := p.Wait(); err != nil {
		t.Fatalf("the tool failed: %v", err)
	}
	waitFor(t, 20*time.Second, "status to report the failed capture", func() bool {
		c := e.captureOf("child")
		return c != nil && c.State == "failed"
	})
	return fill, map[string]string{"a.bin": inSession(t, mp, "sha256sum a.bin"), "b.bin": inSession(t, mp, "sha256sum b.bin")}
}

// freeAsTold parses what msg says to free and frees that much of fill.
func freeAsTold(t *testing.T, fill, msg string) {
	t.Helper()
	m := toFreeRe.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("the message does not say how much to free: %s", msg)
	}
	var mib int64
	fmt.Sscan(m[1], &mib)
	fi, err := os.Stat(fill)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(fill, max(fi.Size()-mib<<20, 0)); err != nil {
		t.Fatal(err)
	}
}

// storeDev is the device the file system mounted at dir is on.
func storeDev(t *testing.T, dir string) string {
	t.Helper()
	for _, m := range strings.Split(readFile(t, "/proc/self/mounts"), "\n") {
		if f := strings.Fields(m); len(f) > 1 && f[1] == dir {
			return f[0]
		}
	}
	t.Fatalf("%s is no mountpoint", dir)
	return ""
}

// TestFullDiskUnmountAndLandAfterSpaceFreed: a capture fails for space
// (captureOnFullDisk); what it needs does not count a file an earlier
// capture stored. unmount says how much to free on which device and
// leaves nothing behind in the store (a failed capture's blobs are
// dropped, not kept in tmp/ where each attempt would take more space);
// once that much is freed — exactly what the message says, no more —
// unmount and land succeed and the files are in the parent.
func TestFullDiskUnmountAndLandAfterSpaceFreed(t *testing.T) {
	e, fsDir, mp := fullDiskEnv(t)
	// Captured and stored before the disk fills: not needed again.
	e.execOK(mp, "head -c 4000000 /dev/urandom > early.bin")
	fill, want := captureOnFullDisk(t, e, fsDir, mp)
	if c := e.captureOf("child"); c.NeededBytes != 8000000 {
		t.Errorf("the failed capture needs up to %d bytes: want a.bin's and b.bin's 8000000 (early.bin is stored)", c.NeededBytes)
	}
	r := e.fails(1, "unmount", mp)
	for _, says := range []string{"store disk full: free ", " MiB on " + storeDev(t, fsDir) + " (mounted at " + fsDir + "), then retry", "needs up to", "hint: free space"} {
		if !strings.Contains(r.stderr, says) {
			t.Errorf("unmount while full does not say %q: %s", says, r.stderr)
		}
	}
	if n := tmpFiles(t, e.store); n != 0 {
		t.Errorf("the failed captures left %d files in the store's tmp/", n)
	}
	freeAsTold(t, fill, r.stderr)
	if r := e.run("unmount", mp); r.code != 0 {
		t.Fatalf("unmount after freeing what the message said: %s", r)
	}
	e.ok("land", "child")
	for name, sum := range want {
		if got := e.run("cat", "main", name); fmt.Sprintf("%x", sha256.Sum256([]byte(got.stdout))) != strings.Fields(sum)[0] {
			t.Errorf("main's %s after land differs", name)
		}
	}
	e.fsck()
}

// TestFullDiskKillRecover: the daemon is killed (SIGKILL) while the
// store's disk is full and its mount holds a capture it could not store
// (captureOnFullDisk). Mounting or unmounting the workspace then says
// how much to free on which device and what to run then, and leaves
// nothing behind; gc, while the disk is still full, frees what nothing
// references (a removed workspace's blobs); once space is freed as the
// message says, mounting the workspace again recovers every change, and
// it lands.
func TestFullDiskKillRecover(t *testing.T) {
	e, fsDir, mp := fullDiskEnv(t)
	// A workspace made and removed: its blob is referenced by nothing.
	writeTree(t, filepath.Join(e.dir, "scrap"), map[string]string{"scrap.bin": strings.Repeat("scrap\n", 500000)})
	e.ok("create", "scrap", "--from", filepath.Join(e.dir, "scrap"))
	e.ok("rm", "scrap")
	fill, want := captureOnFullDisk(t, e, fsDir, mp)
	pid := e.daemonPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	dev := storeDev(t, fsDir)
	var last result
	for _, args := range [][]string{{"unmount", mp}, {"mount", "child", mp}} {
		last = e.run(args...)
		if last.code != 1 {
			t.Fatalf("%v while full: %s", args, last)
		}
		for _, says := range []string{"store disk full: free ", " MiB on " + dev + " (mounted at " + fsDir + "), then run 'acyclicfs mount child " + mp + "'", "needs up to", "hint: free space"} {
			if !strings.Contains(last.stderr, says) {
				t.Errorf("%v while full does not say %q: %s", args, says, last.stderr)
			}
		}
	}
	if n := tmpFiles(t, e.store); n != 0 {
		t.Errorf("the failed recoveries left %d files in the store's tmp/", n)
	}
	// gc while the disk is full frees the removed workspace's blob.
	var out struct {
		Freed int64 `json:"freed_bytes"`
	}
	if r := e.run("--json", "gc"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
		t.Fatalf("gc while full: %s", r)
	}
	if out.Freed < 3000000 {
		t.Errorf("gc while full freed %d bytes, want at least the removed workspace's 3000000", out.Freed)
	}
	freeAsTold(t, fill, last.stderr)
	if r := e.run("mount", "child", mp); r.code != 0 || !strings.Contains(r.stderr, "recovered unpublished changes of child") {
		t.Fatalf("mount after freeing what the message said: %s", r)
	}
	for name, sum := range want {
		if got := inSession(t, mp, "sha256sum "+name); got != sum {
			t.Errorf("%s after the recovery: %s, want %s", name, got, sum)
		}
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: %s", o)
	}
	e.ok("land", "child")
	if got := len(e.run("cat", "main", "b.bin").stdout); got != 6000000 {
		t.Fatalf("main's b.bin: %d bytes", got)
	}
	e.fsck()
}
