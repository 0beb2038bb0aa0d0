package test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// linkInfo returns the inode number and link count of each path below root.
func linkInfo(t *testing.T, root string, paths ...string) ([]uint64, []uint64) {
	t.Helper()
	var inos, nlinks []uint64
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, p), &st); err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		inos = append(inos, st.Ino)
		nlinks = append(nlinks, uint64(st.Nlink))
	}
	return inos, nlinks
}

// wantLinked fails unless every path below root is one inode with
// len(paths) links.
func wantLinked(t *testing.T, what, root string, paths ...string) {
	t.Helper()
	inos, nlinks := linkInfo(t, root, paths...)
	for i := range paths {
		if inos[i] != inos[0] || nlinks[i] != uint64(len(paths)) {
			t.Fatalf("%s: %v are not one file with %d links: inodes %v, link counts %v", what, paths, len(paths), inos, nlinks)
		}
	}
}

// TestHardLinksKept: two names of one file stay one file (one inode,
// shared content, link count 2) after the session that made them ends, a
// remount, a fork, a rebase onto a parent that changed another file, and
// an export (link(2)); an import of a directory with hard links keeps
// them. FIFOs and symlinks with two names too.
func TestHardLinksKept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mounts")
	}
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"a.txt": "shared\n", "other.txt": "other\n", "sub/keep.txt": "k\n"})
	if err := os.Link(filepath.Join(src, "a.txt"), filepath.Join(src, "sub", "imported-link.txt")); err != nil {
		t.Fatal(err)
	}
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")
	wantLinked(t, "import", mp, "a.txt", "sub/imported-link.txt")
	inSession(t, mp, `set -e
		mkdir -p d/deep
		echo one > x.txt
		ln x.txt d/deep/y.txt
		mkfifo pipe
		ln pipe d/pipe2
		ln -s x.txt sym
		ln -P sym d/sym2`)
	// The session ended: its capture is published. A remount shows both
	// groups as one file each.
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: outcome %q, want current", o)
	}
	mp = e.mountAt("w")
	wantLinked(t, "remount", mp, "x.txt", "d/deep/y.txt")
	wantLinked(t, "remount (imported group)", mp, "a.txt", "sub/imported-link.txt")
	wantLinked(t, "remount (FIFO)", mp, "pipe", "d/pipe2")
	wantLinked(t, "remount (symlink)", mp, "sym", "d/sym2")
	if out := inSession(t, mp, `set -e
		echo two >> x.txt
		cat d/deep/y.txt
		echo three >> sub/imported-link.txt
		cat a.txt`); out != "one\ntwo\nshared\nthree\n" {
		t.Fatalf("a write via one name shows via the other: %q", out)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: outcome %q, want current", o)
	}

	// A fork sees the groups.
	e.ok("fork", "w", "c")
	mc := e.mountAt("c")
	wantLinked(t, "fork", mc, "x.txt", "d/deep/y.txt")
	inSession(t, mc, `echo child > child.txt`)
	if o, _ := e.unmount(mc); o != "current" {
		t.Fatalf("unmount c: outcome %q", o)
	}

	// The parent changes an unrelated file; the rebased child keeps them.
	mp = e.mountAt("w")
	inSession(t, mp, `echo changed > other.txt`)
	e.unmount(mp)
	if r := e.run("rebase", "c"); r.code != 0 || r.line() != "rebased" {
		t.Fatalf("rebase c: %s", r)
	}
	mc = e.mountAt("c")
	wantLinked(t, "rebased child", mc, "x.txt", "d/deep/y.txt")
	wantLinked(t, "rebased child (imported group)", mc, "a.txt", "sub/imported-link.txt")
	if b, err := os.ReadFile(filepath.Join(mc, "other.txt")); err != nil || string(b) != "changed\n" {
		t.Fatalf("rebased child other.txt: %q %v", b, err)
	}
	e.unmount(mc)

	// Export recreates them with link(2); an import of the export keeps them.
	exp := e.exportTo("c", "export")
	wantLinked(t, "export", exp, "x.txt", "d/deep/y.txt")
	wantLinked(t, "export (imported group)", exp, "a.txt", "sub/imported-link.txt")
	wantLinked(t, "export (FIFO)", exp, "pipe", "d/pipe2")
	wantLinked(t, "export (symlink)", exp, "sym", "d/sym2")
	if b, err := os.ReadFile(filepath.Join(exp, "d/deep/y.txt")); err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("export y.txt: %q %v", b, err)
	}
	e.ok("create", "imp", "--from", exp)
	exp2 := e.exportTo("imp", "export2")
	wantLinked(t, "export of the import", exp2, "x.txt", "d/deep/y.txt")
	wantLinked(t, "export of the import (FIFO)", exp2, "pipe", "d/pipe2")
	wantLinked(t, "export of the import (symlink)", exp2, "sym", "d/sym2")

	// A name taken out of the group leaves the rest a plain file.
	mc = e.mountAt("c")
	inSession(t, mc, `set -e; rm d/deep/y.txt; echo apart > d/deep/y.txt`)
	e.unmount(mc)
	mc = e.mountAt("c")
	inos, nlinks := linkInfo(t, mc, "x.txt", "d/deep/y.txt")
	if inos[0] == inos[1] || nlinks[0] != 1 || nlinks[1] != 1 {
		t.Fatalf("after the link was broken: inodes %v, link counts %v", inos, nlinks)
	}
	if out := inSession(t, mc, `cat x.txt d/deep/y.txt`); !strings.HasPrefix(out, "one\ntwo\napart\n") {
		t.Fatalf("after the link was broken: %q", out)
	}
	e.unmount(mc)
	e.ok("gc")
	e.fsck()
}

// TestHardLinksSurviveKill: a link made in a mount whose daemon is then
// killed -9 (after an fsync, and again without one) is kept by the
// recovery, with the group the pinned generation already had.
func TestHardLinksSurviveKill(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mounts")
	}
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"a.txt": "shared\n", "far/away/z.txt": "z\n"})
	if err := os.Link(filepath.Join(src, "a.txt"), filepath.Join(src, "far", "away", "b.txt")); err != nil {
		t.Fatal(err)
	}
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w", "--lease-ttl", "1s")
	t.Cleanup(func() {
		if t.Failed() {
			abortFuse(mp)
		}
	})
	pid := e.daemonPID()
	r, err := sessionRun(mp, `set -e
		mkdir n
		ln a.txt n/c.txt
		printf 'more\n' >> n/c.txt
		sync n/c.txt
		kill -9 `+strconv.Itoa(pid))
	if err != nil || r.code != 0 {
		t.Fatalf("writer: %v %s", err, r)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatalf("daemon survived kill -9: %v", err)
	}
	e.waitLeasesExpired("w")
	waitDead(t, mp)
	if r := e.run("mount", "w", mp); r.code != 0 {
		t.Fatalf("remount after kill -9: %s", r)
	}
	wantLinked(t, "recovered", mp, "a.txt", "far/away/b.txt", "n/c.txt")
	if out := inSession(t, mp, "cat far/away/b.txt"); out != "shared\nmore\n" {
		t.Fatalf("recovered content: %q", out)
	}
	// Again without any sync: the overlay log keeps the completed link.
	pid = e.daemonPID()
	if r, err := sessionRun(mp, "ln n/c.txt d.txt && kill -9 "+strconv.Itoa(pid)); err != nil || r.code != 0 {
		t.Fatalf("second writer: %v %s", err, r)
	}
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatalf("daemon survived kill -9: %v", err)
	}
	e.waitLeasesExpired("w")
	waitDead(t, mp)
	if r := e.run("mount", "w", mp); r.code != 0 {
		t.Fatalf("second remount after kill -9: %s", r)
	}
	wantLinked(t, "recovered without sync", mp, "a.txt", "d.txt", "far/away/b.txt", "n/c.txt")
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: %q", o)
	}
	wantLinked(t, "export after recovery", e.exportTo("w", "out"), "a.txt", "d.txt", "far/away/b.txt", "n/c.txt")
	e.fsck()
}
