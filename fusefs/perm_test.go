package fusefs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

func TestMountOptionsKernelPermissions(t *testing.T) {
	for _, c := range []struct {
		allowOther bool
		euid       int
		want       []string
	}{
		{false, 0, []string{"dev"}},
		{true, 0, []string{"default_permissions"}},
		{false, 1000, []string{"default_permissions"}},
		{true, 1000, []string{"default_permissions"}},
	} {
		if got := mountOptions(c.allowOther, c.euid); !slices.Equal(got, c.want) {
			t.Errorf("mountOptions(%v, %d) = %q, want %q", c.allowOther, c.euid, got, c.want)
		}
	}
}

func TestAccessAllowed(t *testing.T) {
	root := &fuse.Caller{}
	user := &fuse.Caller{Owner: fuse.Owner{Uid: 1000, Gid: 100}}
	for _, c := range []struct {
		c         *fuse.Caller
		mode      uint32
		uid, gid  uint32
		dir       bool
		mask      uint32
		want      bool
		situation string
	}{
		{root, 0o000, 5, 5, false, 6, true, "root reads and writes anything"},
		{nil, 0o000, 5, 5, false, 6, true, "no caller is root"},
		{root, 0o644, 5, 5, false, 1, false, "root execs only with an exec bit"},
		{root, 0o010, 5, 5, false, 1, true, "any exec bit will do for root"},
		{root, 0o000, 5, 5, true, 1, true, "root searches any directory"},
		{user, 0o600, 1000, 5, false, 6, true, "owner bits"},
		{user, 0o060, 1000, 100, false, 4, false, "owner bits win over group bits"},
		{user, 0o040, 5, 100, false, 4, true, "group bits"},
		{user, 0o004, 5, 5, false, 4, true, "other bits"},
		{user, 0o004, 5, 5, false, 2, false, "other bits, no write"},
		{user, 0o755, 5, 5, false, 0, true, "existence only"},
	} {
		if got := accessAllowed(c.c, c.mode, c.uid, c.gid, c.dir, c.mask); got != c.want {
			t.Errorf("%s: accessAllowed = %v, want %v", c.situation, got, c.want)
		}
	}
}

// countingAdmitter admits everyone and counts the requests it saw.
type countingAdmitter struct{ n atomic.Int64 }

func (c *countingAdmitter) Admit(uint32) error { c.n.Add(1); return nil }

// TestRootMountPermissions: a root-only mount serves without the kernel's
// permission check (no GETATTR of the directory before each create), yet
// root sees what it sees on a native directory: it reads and writes
// regardless of mode bits, execs only what has an exec bit, and a
// permission probe opens no lease.
func TestRootMountPermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the mount options differ for other users")
	}
	objs := newFakeObjects(t)
	adm := &countingAdmitter{}
	m, mnt := mountT(t, objs, objs.build(t, lowerSpec), &mountOpts{admitter: adm})

	// Creating files in a directory asks nothing about the directory.
	dir := filepath.Join(mnt, "many")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 50
	g := m.daemonGetattrs.Load()
	for i := range n {
		mustWrite(t, filepath.Join(dir, fmt.Sprintf("f%d", i)), "x")
	}
	if got := m.daemonGetattrs.Load() - g; got >= n/2 {
		t.Errorf("%d creates sent %d GETATTRs: the kernel still checks permissions itself", n, got)
	}

	// Root ignores mode bits for reading and writing, as natively.
	ro := filepath.Join(mnt, "ro.txt")
	mustWrite(t, ro, "before")
	if err := os.Chmod(ro, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Access(ro, 2); err != nil {
		t.Errorf("access(W_OK) of a 0444 file as root: %v", err)
	}
	if err := os.WriteFile(ro, []byte("after"), 0o644); err != nil {
		t.Errorf("root writes a 0444 file: %v", err)
	}
	closed := filepath.Join(mnt, "closed")
	if err := os.Mkdir(closed, 0o000); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(closed, "in"), "x")
	if ents, err := os.ReadDir(closed); err != nil || len(ents) != 1 {
		t.Errorf("root lists a mode-000 directory: %v %v", ents, err)
	}

	// Exec needs an exec bit, for access(2) and for execve alike. A shell
	// execs: a Go process that forks holds its thread (and its P) until
	// the child's execve returns, and an execve that reads from this very
	// process's mount can then wait on a stop-the-world forever.
	runIn := func(args ...string) int {
		t.Helper()
		err := exec.Command(args[0], args[1:]...).Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	script := filepath.Join(mnt, "script.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Access(script, 1); err != syscall.EACCES {
		t.Errorf("access(X_OK) of a 0644 file = %v, want EACCES", err)
	}
	if code := runIn("sh", "-c", `"$1"`, "sh", script); code != 126 {
		t.Errorf("exec of a 0644 file: exit %d, want 126 (permission denied)", code)
	}
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	if code := runIn("sh", "-c", `"$1"`, "sh", script); code != 0 {
		t.Errorf("exec after chmod +x: exit %d", code)
	}
	if code := runIn("sh", "-c", `"$1"`, "sh", filepath.Join(mnt, "bin/run")); code != 0 {
		t.Errorf("exec of a stored executable: exit %d", code)
	}

	// A permission probe reads no content: it opens no lease.
	sub := filepath.Join(mnt, "dir/sub")
	if _, err := os.Stat(sub); err != nil {
		t.Fatal(err)
	}
	before := adm.n.Load()
	if err := syscall.Access(sub, 1); err != nil {
		t.Fatal(err)
	}
	if code := runIn("env", "-C", sub, "true"); code != 0 { // chdir asks ACCESS of sub
		t.Fatalf("env -C %s: exit %d", sub, code)
	}
	if got := adm.n.Load() - before; got != 0 {
		t.Errorf("access and chdir admitted %d requests", got)
	}
}

// TestChownDropsSetID: a root-only mount clears set-id bits itself
// (killprivCaps), so a chown asks nothing first, and the bits end as a
// chown leaves them on a native directory.
func TestChownDropsSetID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chown")
	}
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, lowerSpec), nil)
	native := t.TempDir()
	modes := []os.FileMode{
		0o755 | os.ModeSetuid,
		0o755 | os.ModeSetgid,
		0o644 | os.ModeSetgid, // no group exec: not set-gid, kept
		0o755 | os.ModeSetuid | os.ModeSetgid | os.ModeSticky,
	}
	// chown as root, then the mode it leaves.
	chown := func(p string, mode os.FileMode) os.FileMode {
		t.Helper()
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 0, 0); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode()
	}
	chownAll := func(root string) []os.FileMode {
		var got []os.FileMode
		for i, mode := range modes {
			p := filepath.Join(root, fmt.Sprintf("f%d", i))
			mustWrite(t, p, "x")
			got = append(got, chown(p, mode))
		}
		d := filepath.Join(root, "d")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return append(got, chown(d, 0o755|os.ModeSetgid))
	}
	g := m.daemonGetattrs.Load()
	got := chownAll(mnt)
	if n := m.daemonGetattrs.Load() - g; n > 1 {
		t.Errorf("%d chowns sent %d GETATTRs", len(modes)+1, n)
	}
	want := chownAll(native)
	if !slices.Equal(got, want) {
		t.Errorf("modes after chown: mount %v, native %v", got, want)
	}
	if want[0]&os.ModeSetuid != 0 {
		t.Fatalf("native chown kept set-uid (%v): the comparison proves nothing", want[0])
	}
}
