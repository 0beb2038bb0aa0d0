package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// asNobody runs argv as uid/gid 65534 with no supplementary groups.
func asNobody(t *testing.T, argv ...string) result {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	needTool(t, "setpriv")
	r, err := runCmd(exec.Command("setpriv", append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups", "--"}, argv...)...))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStoreSecretsArePrivate: a 0600 secret imported into a store cannot
// be read by another user through the store's objects, and a store made
// open to others before is made private at the next command, with a
// warning.
func TestStoreSecretsArePrivate(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "sec")
	writeTree(t, src, map[string]string{".env": "KEY=hunter2\n"})
	if err := os.Chmod(filepath.Join(src, ".env"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The test's scratch directory must be passable for the other user to
	// get as far as the store.
	for _, d := range []string{filepath.Dir(e.dir), e.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	control := filepath.Join(e.dir, "public")
	writeTree(t, control, map[string]string{"f": "readable\n"})
	if r := asNobody(t, "cat", filepath.Join(control, "f")); r.stdout != "readable\n" {
		t.Fatalf("the other user cannot reach the test's directory at all: %s", r)
	}
	e.ok("create", "s", "--from", src)
	if r := asNobody(t, "grep", "-r", "hunter2", e.store); r.code == 0 || strings.Contains(r.stdout, "hunter2") {
		t.Fatalf("another user read the secret from the store: %s", r)
	}
	if fi, err := os.Stat(e.store); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store mode: %v %v", fi.Mode(), err)
	}
	if err := os.Chmod(e.store, 0o755); err != nil {
		t.Fatal(err)
	}
	r := e.run("list")
	if r.code != 0 || !strings.Contains(r.stderr, "made it private") {
		t.Fatalf("list on a store open to others: %s", r)
	}
	if fi, _ := os.Stat(e.store); fi.Mode().Perm() != 0o700 {
		t.Fatalf("store mode after list: %04o", fi.Mode().Perm())
	}
}

// TestModeZeroIsEnforced: a file or directory its owner made mode 000
// shows as 000 and another user can neither read nor list it through an
// --allow-other mount (pjdfstest open/26.t).
func TestModeZeroIsEnforced(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	for _, d := range []string{filepath.Dir(e.dir), e.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"open": "public\n", "closed": "secret\n", "dir/inner": "x\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w", "--allow-other")
	if err := os.Chmod(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	got := inSession(t, mp, `chmod 644 open && chmod 000 closed && chmod 000 dir && stat -c '%a %n' open closed dir`)
	if got != "644 open\n0 closed\n0 dir\n" {
		t.Fatalf("modes in the mount: %q", got)
	}
	if r := asNobody(t, "cat", filepath.Join(mp, "open")); r.stdout != "public\n" {
		t.Fatalf("another user cannot read a 0644 file (the check is void): %s", r)
	}
	if r := asNobody(t, "cat", filepath.Join(mp, "closed")); r.code == 0 || strings.Contains(r.stdout, "secret") {
		t.Fatalf("another user read a mode 000 file: %s", r)
	}
	if r := asNobody(t, "ls", filepath.Join(mp, "dir")); r.code == 0 {
		t.Fatalf("another user listed a mode 000 directory: %s", r)
	}
	e.unmount(mp)
}
