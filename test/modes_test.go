package test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// modesOf returns `stat -c '%a %n'` of names under dir, one per line.
func modesOf(t *testing.T, dir string, names ...string) string {
	t.Helper()
	var b strings.Builder
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		m := uint32(fi.Mode().Perm())
		if fi.Mode()&os.ModeSetuid != 0 {
			m |= 0o4000
		}
		if fi.Mode()&os.ModeSetgid != 0 {
			m |= 0o2000
		}
		if fi.Mode()&os.ModeSticky != 0 {
			m |= 0o1000
		}
		b.WriteString(strconv.FormatUint(uint64(m), 8) + " " + n + "\n")
	}
	return b.String()
}

// TestModesSurviveRemountAndExport (issue #38): the full permission bits
// — set-uid, set-gid and sticky included, of files and directories — are
// kept by an import, a chmod in a mount, an unmount and remount, a fork
// and an export, and another user cannot read a 0600 file after a
// remount with --allow-other.
func TestModesSurviveRemountAndExport(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	for _, d := range []string{filepath.Dir(e.dir), e.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{".env": "KEY=hunter2\n", "open": "public\n", "priv/key": "k\n",
		"a": "a\n", "b": "b\n", "c": "c\n", "z": "z\n", "f": "f\n", "d/x": "x\n", "tmp/y": "y\n", "g/w": "w\n"})
	for p, m := range map[string]os.FileMode{".env": 0o600, "priv": 0o700} {
		if err := os.Chmod(filepath.Join(src, p), m); err != nil {
			t.Fatal(err)
		}
	}
	e.ok("create", "w", "--from", src)

	mp := e.mountAt("w", "--allow-other")
	if err := os.Chmod(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := modesOf(t, mp, ".env", "priv", "open"); got != "600 .env\n700 priv\n644 open\n" {
		t.Fatalf("create --from: the mount shows\n%s", got)
	}
	inSession(t, mp, `chmod 600 a && chmod 4755 b && chmod 2755 c && chmod 000 z && chmod 640 f &&
		chmod 700 d && chmod 1777 tmp && chmod 2750 g`)
	names := []string{".env", "priv", "open", "a", "b", "c", "z", "f", "d", "tmp", "g"}
	want := "600 .env\n700 priv\n644 open\n600 a\n4755 b\n2755 c\n0 z\n640 f\n700 d\n1777 tmp\n2750 g\n"
	if got := modesOf(t, mp, names...); got != want {
		t.Fatalf("after chmod the mount shows\n%s", got)
	}
	e.unmount(mp)

	mp = e.mountAt("w", "--allow-other")
	if got := modesOf(t, mp, names...); got != want {
		t.Fatalf("after a remount the mount shows\n%s\nwant\n%s", got, want)
	}
	if r := asNobody(t, "cat", filepath.Join(mp, "open")); r.stdout != "public\n" {
		t.Fatalf("another user cannot read a 0644 file (the check is void): %s", r)
	}
	for _, p := range []string{".env", "a", "priv/key", "d/x"} {
		if r := asNobody(t, "cat", filepath.Join(mp, p)); r.code == 0 || strings.Contains(r.stdout, "\n") {
			t.Fatalf("another user read %s after a remount: %s", p, r)
		}
	}
	e.unmount(mp)

	e.ok("fork", "w", "child")
	mp = e.mountAt("child")
	if got := modesOf(t, mp, names...); got != want {
		t.Fatalf("a fork shows\n%s\nwant\n%s", got, want)
	}
	e.unmount(mp)

	out := e.exportTo("w", "out")
	if got := modesOf(t, out, names...); got != want {
		t.Fatalf("export wrote\n%s\nwant\n%s", got, want)
	}
	if got := readFile(t, filepath.Join(out, "priv/key")); got != "k\n" {
		t.Fatalf("export of a 0700 directory: %q", got)
	}
	e.fsck()
}

// TestModeOnlyChangeIsADiff: `diff` shows a chmod as a change with the
// old and new modes, and a rebase keeps a mode change of one side with a
// content change of the other.
func TestModeOnlyChangeIsADiff(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"s": "1\n2\n3\n", "d/x": "x\n"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "child")
	mp := e.mountAt("child")
	inSession(t, mp, `chmod 600 s && chmod 700 d`)
	e.unmount(mp)
	stat := e.run("diff", "child").stdout
	for _, w := range []string{"old mode 100644", "new mode 100600", "old mode 040755", "new mode 040700"} {
		if !strings.Contains(stat, w) {
			t.Fatalf("diff of a chmod lacks %q:\n%s", w, stat)
		}
	}
	// main changes the content; child's rebase keeps both.
	mm := e.mountAt("main")
	inSession(t, mm, `printf '1\n2\nthree\n' > s`)
	e.unmount(mm)
	e.ok("rebase", "child")
	mp = e.mountAt("child")
	if got := modesOf(t, mp, "s", "d"); got != "600 s\n700 d\n" {
		t.Fatalf("after the rebase: %s", got)
	}
	if got := readFile(t, filepath.Join(mp, "s")); got != "1\n2\nthree\n" {
		t.Fatalf("after the rebase s = %q", got)
	}
	e.unmount(mp)
}

// TestInPlaceModes: an in-place workspace shows DIR's modes, writes a
// changed file back with its mode (a 0600 file stays 0600, a chmod alone
// is written), makes a new directory with its mode and chmods a directory
// whose mode alone changed, and takes an external chmod in as a change.
func TestInPlaceModes(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	dir := filepath.Join(e.dir, "work")
	writeTree(t, dir, map[string]string{".env": "KEY=1\n", "f": "f\n", "sub/k": "k\n"})
	for p, m := range map[string]os.FileMode{".env": 0o600, "sub": 0o700} {
		if err := os.Chmod(filepath.Join(dir, p), m); err != nil {
			t.Fatal(err)
		}
	}
	e.ok("create", "ws", "--in-place", dir)
	e.ok("mount", "ws")
	if got := modesOf(t, dir, ".env", "f", "sub"); got != "600 .env\n644 f\n700 sub\n" {
		t.Fatalf("the in-place mount shows\n%s", got)
	}
	e.execOK(dir, "echo KEY=2 >> .env && chmod 640 f && mkdir -m 700 new && echo s > new/s && chmod 750 sub")
	e.unmount(dir)
	if got := modesOf(t, dir, ".env", "f", "sub", "new"); got != "600 .env\n640 f\n750 sub\n700 new\n" {
		t.Fatalf("DIR after the unmount\n%s", got)
	}
	if got := readFile(t, filepath.Join(dir, ".env")); got != "KEY=1\nKEY=2\n" {
		t.Fatalf(".env after the unmount: %q", got)
	}
	if err := os.Chmod(filepath.Join(dir, "f"), 0o604); err != nil {
		t.Fatal(err)
	}
	e.ok("mount", "ws")
	if got := modesOf(t, dir, "f", "sub", "new"); got != "604 f\n750 sub\n700 new\n" {
		t.Fatalf("an external chmod: the mount shows %s", got)
	}
	e.unmount(dir)
	e.fsck()
}
