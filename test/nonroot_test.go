package test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nonRootUser is created (once per machine) for TestNonRootMountThroughFusermount.
const nonRootUser = "acyclicfs-test"

// nonRoot is an unprivileged user's set-up: the user acyclicfs-test
// (created once per machine), a scratch directory it owns (with the
// binary copied in, src/ holding a, and mnt/), and its store there.
type nonRoot struct {
	root, store, bin, fm string
	uid, gid             int
}

// newNonRoot makes the set-up, or skips where it cannot be made (not
// root, no fusermount3 or useradd). Its cleanup shuts the user's daemon down.
func newNonRoot(t *testing.T) *nonRoot {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create the unprivileged test user")
	}
	fm, err := exec.LookPath("fusermount3")
	if err != nil {
		t.Skip("fusermount3 not installed (Debian package fuse3)")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("useradd not available")
	}
	u, err := user.Lookup(nonRootUser)
	if err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", nonRootUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd: %v\n%s", err, out)
		}
		if u, err = user.Lookup(nonRootUser); err != nil {
			t.Fatal(err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// fusermount3 opens /dev/fuse as the calling user: Debian ships it
	// 0666; some sandboxes narrow it. Widen it for this test only.
	if fi, err := os.Stat("/dev/fuse"); err == nil && fi.Mode().Perm()&0o006 != 0o006 {
		old := fi.Mode().Perm()
		if err := os.Chmod("/dev/fuse", 0o666); err != nil {
			t.Skipf("cannot make /dev/fuse usable by other users: %v", err)
		}
		t.Cleanup(func() { os.Chmod("/dev/fuse", old) })
	}

	// Everything the user touches lives in a directory it owns.
	root, err := os.MkdirTemp("", "acyclicfs-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	envMu.Lock()
	envDirs = append(envDirs, root)
	envMu.Unlock()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	userBin := filepath.Join(root, "acyclicfs")
	copyFile(t, bin, userBin, 0o755)
	for _, d := range []string{"src", "mnt"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "src", "a"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
	nr := &nonRoot{root: root, store: filepath.Join(root, "store"), bin: userBin, fm: fm, uid: uid, gid: gid}
	t.Cleanup(func() {
		nr.run(t, root, "shutdown")
		if b, err := os.ReadFile(filepath.Join(nr.store, "daemon.pid")); err == nil {
			var pid int
			fmt.Sscan(string(b), &pid)
			if pid > 0 && waitGone(pid, 10*time.Second) != nil {
				t.Errorf("daemon %d still running after shutdown", pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return nr
}

// run is `acyclicfs --store STORE ARGS…` as the user, in dir, in a
// session of its own, bounded.
func (nr *nonRoot) run(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(nr.bin, append([]string{"--store", nr.store}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+nr.root, "ACYCLICFS_STORE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(nr.uid), Gid: uint32(nr.gid)}, Setsid: true}
	r, err := runLimited(cmd, 2*time.Minute)
	if err != nil {
		t.Fatalf("run %v as %s: %v", args, nonRootUser, err)
	}
	return r
}

// must is run that fails the test unless the command exits 0.
func (nr *nonRoot) must(t *testing.T, args ...string) string {
	t.Helper()
	r := nr.run(t, nr.root, args...)
	if r.code != 0 {
		t.Fatalf("acyclicfs %s as %s: %s", strings.Join(args, " "), nonRootUser, r)
	}
	return r.stdout
}

// TestNonRootMountThroughFusermount: a user without privileges mounts
// through fusermount3 (Debian's fuse3), runs a tool session, and unmounts;
// the write is captured. Runs as root (to create the user) where useradd
// and fusermount3 exist.
func TestNonRootMountThroughFusermount(t *testing.T) {
	nr := newNonRoot(t)
	mp := filepath.Join(nr.root, "mnt")
	t.Cleanup(func() {
		if isMountpoint(mp) {
			t.Errorf("mount leaked: %s", mp)
			exec.Command(nr.fm, "-u", "-z", mp).Run()
		}
	})
	must := func(args ...string) string { t.Helper(); return nr.must(t, args...) }
	must("create", "main", "--from", filepath.Join(nr.root, "src"))
	must("fork", "main", "child")
	if got := strings.TrimSpace(must("mount", "child", mp)); got != mp {
		t.Fatalf("mount printed %q", got)
	}
	if !isMountpoint(mp) {
		t.Fatalf("%s is not mounted", mp)
	}
	r := nr.run(t, nr.root, "exec", mp, "--", "sh", "-c", "cat a && echo written > b")
	if r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("exec as %s: %s", nonRootUser, r)
	}
	if out := must("unmount", mp); strings.TrimSpace(out) != "current" {
		t.Fatalf("unmount printed %q", out)
	}
	if isMountpoint(mp) {
		t.Fatalf("%s still mounted after unmount", mp)
	}
	if out := must("diff", "child", "--stat"); out != "A\tb\n" {
		t.Fatalf("diff after unmount: %q", out)
	}
	must("fsck")
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
