package test

import (
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// specialList describes every special file under root: type, permission
// bits and, for a device, its number. Other entries are left out.
func specialList(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFIFO:
			out[rel] = fmt.Sprintf("fifo %o", st.Mode&0o7777)
		case unix.S_IFSOCK:
			out[rel] = fmt.Sprintf("socket %o", st.Mode&0o7777)
		case unix.S_IFCHR:
			out[rel] = fmt.Sprintf("chardev %d,%d %o", unix.Major(st.Rdev), unix.Minor(st.Rdev), st.Mode&0o7777)
		case unix.S_IFBLK:
			out[rel] = fmt.Sprintf("blockdev %d,%d %o", unix.Major(st.Rdev), unix.Minor(st.Rdev), st.Mode&0o7777)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

const socketChildEnv = "ACYCLICFS_TEST_SOCKET_DIR"

// TestSpecialSocketChild is a helper process of TestSpecialFiles: in a
// session of its own, it binds a unix socket in the mount, dials it and
// passes bytes over it.
func TestSpecialSocketChild(t *testing.T) {
	dir := os.Getenv(socketChildEnv)
	if dir == "" {
		t.Skip("helper process of TestSpecialFiles")
	}
	p := filepath.Join(dir, "s0")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatalf("listen in the mount: %v", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		got <- string(b)
	}()
	c, err := net.Dial("unix", p)
	if err != nil {
		t.Fatalf("dial in the mount: %v", err)
	}
	fmt.Fprint(c, "over the socket")
	c.Close()
	if s := <-got; s != "over the socket" {
		t.Fatalf("socket carried %q", s)
	}
	l.Close()
	fmt.Println("SOCKET-OK")
}

// bindSocketIn binds, uses and leaves a socket node s0 in dir, from a
// process in its own session (its lease ends when it exits).
func bindSocketIn(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSpecialSocketChild$", "-test.v")
	cmd.Env = append(os.Environ(), socketChildEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	r, err := runLimited(cmd, sessionLimit)
	if err != nil || r.code != 0 || !strings.Contains(r.stdout, "SOCKET-OK") {
		t.Fatalf("unix socket in the mount: %v %s", err, r)
	}
}

// TestSpecialFiles: FIFOs, unix sockets and device nodes made in a mount
// work there (pjdfstest-style: mkfifo, mknod, bind; rename, unlink, chmod,
// chown of each), survive the session's end and a remount with their kinds
// and device numbers, are seen by a fork, shown by diff, recreated by
// export, taken by an import, and leave the store clean.
func TestSpecialFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts, and mknod of devices (CAP_MKNOD)")
	}
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"seed.txt": "seed\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")

	out := inSession(t, mp, `set -e
		mkfifo pipe
		(echo through the pipe > pipe) &
		cat pipe
		wait
		mknod null c 1 3
		echo gone > null
		wc -c < null
		mknod blk b 7 200
		for k in "p" "c 1 5" "b 7 201"; do
			mknod n2 $k
			mv n2 n3
			chmod 600 n3
			chown 1:2 n3
			stat -c '%F %a %u:%g' n3
			ln n3 n4
			rm n3 n4
		done`)
	want := "through the pipe\n0\nfifo 600 1:2\ncharacter special file 600 1:2\nblock special file 600 1:2\n"
	if out != want {
		t.Fatalf("in the mount:\n got %q\nwant %q", out, want)
	}
	bindSocketIn(t, mp)
	if out := inSession(t, mp, `set -e; mv s0 sock; chmod 700 sock; stat -c '%F %a' sock; ls`); out != "socket 700\nblk\nnull\npipe\nseed.txt\nsock\n" {
		t.Fatalf("socket after rename and chmod: %q", out)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: outcome %q, want current", o)
	}

	// Captured: a remount shows every node; a FIFO and a socket with the
	// mode they had, a device 0600 whatever it had (a stored device never
	// opens to other users).
	stored := map[string]string{"pipe": "fifo 644", "null": "chardev 1,3 600", "blk": "blockdev 7,200 600", "sock": "socket 700"}
	mp = e.mountAt("w")
	sameTree(t, "specials after a remount", stored, specialList(t, mp))
	out = inSession(t, mp, `set -e
		(echo again > pipe) &
		cat pipe
		wait
		head -c 3 null | wc -c`)
	if out != "again\n0\n" {
		t.Fatalf("specials after a remount: %q", out)
	}
	bindSocketIn(t, mp) // a server binds anew beside the stored node
	inSession(t, mp, "rm s0")
	e.unmount(mp)

	// A fork sees them; its changes show in diff.
	e.ok("fork", "w", "c")
	mc := e.mountAt("c")
	sameTree(t, "specials in a fork", stored, specialList(t, mc))
	inSession(t, mc, `set -e; rm null; mknod null c 1 5; rm pipe; mknod pipe c 1 7; mkfifo new; rm blk`)
	if o, _ := e.unmount(mc); o != "current" {
		t.Fatalf("unmount c: outcome %q", o)
	}
	if got := e.run("diff", "c", "--stat").stdout; got != "D\tblk\nA\tnew\nM\tnull\nT\tpipe\n" {
		t.Fatalf("diff --stat:\n%s", got)
	}
	diff := e.run("diff", "c").stdout
	for _, line := range []string{
		"diff --acyclicfs a/blk b/blk\ndeleted file mode 060600\nold device 7,200\n",
		"diff --acyclicfs a/new b/new\nnew file mode 010644\n",
		"diff --acyclicfs a/null b/null\nold device 1,3\nnew device 1,5\n",
		"diff --acyclicfs a/pipe b/pipe\nold mode 010644\nnew mode 020600\nnew device 1,7\n",
	} {
		if !strings.Contains(diff, line) {
			t.Errorf("diff lacks %q:\n%s", line, diff)
		}
	}

	// Export recreates them; an import of the export keeps them.
	exp := e.exportTo("w", "export")
	sameTree(t, "export", stored, specialList(t, exp))
	if b, err := os.ReadFile(filepath.Join(exp, "seed.txt")); err != nil || string(b) != "seed\n" {
		t.Fatalf("export seed.txt: %q %v", b, err)
	}
	// Without CAP_MKNOD an export skips the devices, says so, and writes
	// the rest.
	needTool(t, "setpriv")
	noMknod := filepath.Join(e.dir, "export-nomknod")
	cmd := exec.Command("setpriv", "--bounding-set=-mknod", "--inh-caps=-mknod", bin, "--store", e.store, "export", "w", noMknod)
	cmd.Env = append(os.Environ(), "ACYCLICFS_STORE=")
	r, err := runCmd(cmd)
	if err != nil || r.code != 0 || !strings.Contains(r.stderr, "warning: skipped chardev "+filepath.Join(noMknod, "null")) ||
		!strings.Contains(r.stderr, "warning: skipped blockdev ") {
		t.Fatalf("export without CAP_MKNOD: %v %s", err, r)
	}
	sameTree(t, "export without CAP_MKNOD", map[string]string{"pipe": "fifo 644", "sock": "socket 700"}, specialList(t, noMknod))
	// cat has nothing to print for a special file.
	if r := e.fails(2, "cat", "w", "pipe"); !strings.Contains(r.stderr, `"pipe" is a fifo: it has no content`) {
		t.Fatalf("cat of a fifo: %s", r)
	}

	r = e.run("create", "imp", "--from", exp)
	if r.code != 0 || strings.Contains(r.stderr, "skipped") {
		t.Fatalf("import of a directory with special files: %s", r)
	}
	sameTree(t, "export of the import", stored, specialList(t, e.exportTo("imp", "export2")))
	e.ok("gc")
	e.fsck()
}

// TestSpecialFilesInPlace: an in-place workspace over a directory holding a
// FIFO shows it in the mount, and a FIFO made there lands in the directory.
func TestSpecialFilesInPlace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for mounts")
	}
	e := newMountEnv(t)
	dir := filepath.Join(e.dir, "work")
	writeTree(t, dir, map[string]string{"a.txt": "a\n", "sub/b.txt": "b\n"})
	if err := unix.Mkfifo(filepath.Join(dir, "sub", "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ok("create", "ws", "--in-place", dir)
	if got := e.ok("mount", "ws"); got != dir {
		t.Fatalf("mount printed %q", got)
	}
	_, r := e.execOK(dir, `set -e
		stat -c %F sub/pipe
		(echo in place > sub/pipe) &
		cat sub/pipe
		wait
		mkfifo made`)
	if r.stdout != "fifo\nin place\n" {
		t.Fatalf("through the in-place mount: %q", r.stdout)
	}
	if o, _ := e.unmount(dir); o != "current" {
		t.Fatalf("unmount: outcome %q, want current", o)
	}
	sameTree(t, "DIR after the unmount", map[string]string{"sub/pipe": "fifo 644", "made": "fifo 644"}, specialList(t, dir))
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "b.txt")); err != nil || string(b) != "b\n" {
		t.Fatalf("sub/b.txt: %q %v", b, err)
	}
	e.fsck()
}

// TestSpecialFilesNodevForOthers: a mount other users can enter is nodev:
// root makes a device node there (and it is kept), but it does not open.
func TestSpecialFilesNodevForOthers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts, and mknod of devices (CAP_MKNOD)")
	}
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"seed.txt": "seed\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w", "--allow-other")
	r, err := sessionRun(mp, "mknod null c 1 3 && stat -c %F null && cat null")
	if err != nil || r.code == 0 || r.stdout != "character special file\n" || !strings.Contains(r.stderr, "Permission denied") {
		t.Fatalf("a device in an --allow-other mount: %v %s; want it made but not opened", err, r)
	}
	e.unmount(mp)
	sameTree(t, "captured", map[string]string{"null": "chardev 1,3 600"}, specialList(t, e.exportTo("w", "export")))
}
