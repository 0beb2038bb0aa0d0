package fusefs

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/store"
)

var nullDev = unix.Mkdev(1, 3)

// makeSpecials creates a FIFO, a bound unix socket and /dev/null's twin in
// dir, checking each works as on a native file system.
func makeSpecials(t *testing.T, dir string) {
	t.Helper()
	fifo := filepath.Join(dir, "pipe")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	pipeRoundTrip(t, fifo)

	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	accepted := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		accepted <- b
	}()
	c, err := net.Dial("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if _, err := c.Write([]byte("over the socket")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := <-accepted; string(got) != "over the socket" {
		t.Fatalf("socket carried %q", got)
	}
	l.Close()

	null := filepath.Join(dir, "null")
	if err := unix.Mknod(null, syscall.S_IFCHR|0o666, int(nullDev)); err != nil {
		t.Fatalf("mknod char device: %v", err)
	}
	devRoundTrip(t, null)
}

// pipeRoundTrip passes bytes through the FIFO p between two goroutines.
func pipeRoundTrip(t *testing.T, p string) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		f, err := os.OpenFile(p, os.O_RDONLY, 0)
		if err != nil {
			got <- "open: " + err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open fifo for writing: %v", err)
	}
	if _, err := w.WriteString("through the pipe"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if s := <-got; s != "through the pipe" {
		t.Fatalf("fifo carried %q", s)
	}
}

// devRoundTrip reads and writes the null device p.
func devRoundTrip(t *testing.T, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open device: %v", err)
	}
	defer f.Close()
	if n, err := f.Write([]byte("gone")); n != 4 || err != nil {
		t.Fatalf("write to null: %d, %v", n, err)
	}
	if b, err := io.ReadAll(f); len(b) != 0 || err != nil {
		t.Fatalf("read from null: %q, %v", b, err)
	}
}

func wantNode(t *testing.T, p string, typ uint32, rdev uint64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&syscall.S_IFMT != typ || st.Rdev != rdev || st.Size != 0 {
		t.Fatalf("%s: mode %o rdev %#x size %d, want type %o rdev %#x size 0", p, st.Mode, st.Rdev, st.Size, typ, rdev)
	}
}

func TestSpecialFilesCreateAndCapture(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"keep": "x"})
	m, mnt := mountT(t, objs, root, nil)
	makeSpecials(t, mnt)
	wantNode(t, filepath.Join(mnt, "pipe"), syscall.S_IFIFO, 0)
	wantNode(t, filepath.Join(mnt, "sock"), syscall.S_IFSOCK, 0)
	wantNode(t, filepath.Join(mnt, "null"), syscall.S_IFCHR, nullDev)

	// chmod and chown, rename and unlink work on each as on any name.
	for _, n := range []string{"pipe", "sock", "null"} {
		p := filepath.Join(mnt, n)
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatalf("chmod %s: %v", n, err)
		}
		if err := os.Lchown(p, 123, 456); err != nil {
			t.Fatalf("chown %s: %v", n, err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil || st.Mode&0o7777 != 0o600 || st.Uid != 123 || st.Gid != 456 {
			t.Fatalf("%s after chmod/chown: %o %d:%d %v", n, st.Mode, st.Uid, st.Gid, err)
		}
		if err := os.Rename(p, p+".2"); err != nil {
			t.Fatalf("rename %s: %v", n, err)
		}
		if err := os.Link(p+".2", p+".gone"); err != nil {
			t.Fatalf("link %s: %v", n, err)
		}
		if err := os.Remove(p + ".gone"); err != nil {
			t.Fatalf("unlink %s: %v", n, err)
		}
	}
	pipeRoundTrip(t, filepath.Join(mnt, "pipe.2"))
	if err := unix.Mknod(filepath.Join(mnt, "blk"), syscall.S_IFBLK|0o600, int(unix.Mkdev(7, 200))); err != nil {
		t.Fatalf("mknod block device: %v", err)
	}
	if err := unix.Mknod(filepath.Join(mnt, "bad"), syscall.S_IFMT|0o600, 0); err != syscall.EINVAL {
		t.Fatalf("mknod of no file type: %v, want EINVAL", err)
	}

	id, changed, err := m.Capture()
	if err != nil || !changed {
		t.Fatalf("capture: %v %v", changed, err)
	}
	want := map[string]string{"keep": "file:x", "pipe.2": "fifo:0x0", "sock.2": "socket:0x0",
		"null.2": "chardev:0x103", "blk": "blockdev:0x7c8"}
	if d := diffMaps(objs.flatten(t, id), want); d != "" {
		t.Fatalf("captured tree:\n%s", d)
	}

	// A fresh mount of the capture shows the nodes, working.
	_, mnt2 := mountT(t, objs, id, nil)
	wantNode(t, filepath.Join(mnt2, "pipe.2"), syscall.S_IFIFO, 0)
	wantNode(t, filepath.Join(mnt2, "sock.2"), syscall.S_IFSOCK, 0)
	wantNode(t, filepath.Join(mnt2, "null.2"), syscall.S_IFCHR, nullDev)
	wantNode(t, filepath.Join(mnt2, "blk"), syscall.S_IFBLK, unix.Mkdev(7, 200))
	pipeRoundTrip(t, filepath.Join(mnt2, "pipe.2"))
	devRoundTrip(t, filepath.Join(mnt2, "null.2"))
	ents, err := os.ReadDir(mnt2)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "pipe.2" && e.Type() != os.ModeNamedPipe {
			t.Fatalf("readdir type of pipe.2: %v", e.Type())
		}
	}
	if d := diffMaps(flattenDir(t, mnt2), want); d != "" {
		t.Fatalf("remounted:\n%s", d)
	}
}

// The overlay snapshot keeps special files: a crashed mount's state
// recovers them with their device numbers.
func TestSpecialFilesSnapshotRecovery(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"keep": "x"})
	state := t.TempDir()
	m, mnt := mountT(t, objs, root, &mountOpts{stateDir: state})
	if err := unix.Mkfifo(filepath.Join(mnt, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(mnt, "null"), syscall.S_IFCHR|0o666, int(nullDev)); err != nil {
		t.Fatal(err)
	}
	fsyncPath(t, mnt) // fsyncdir makes the names durable
	if err := m.writeSnapshot(); err != nil {
		t.Fatal(err)
	}
	id, changed, err := RecoverCapture(state, objs, root)
	if err != nil || !changed {
		t.Fatalf("recover: %v %v", changed, err)
	}
	want := map[string]string{"keep": "file:x", "pipe": "fifo:0x0", "null": "chardev:0x103"}
	if d := diffMaps(objs.flatten(t, id), want); d != "" {
		t.Fatalf("recovered tree:\n%s", d)
	}
}

// A view switch re-bases special files on the new tree: a device whose
// number changed there shows the new number.
func TestSpecialFilesSwitchView(t *testing.T) {
	objs := newFakeObjects(t)
	mk := func(rdev uint64) store.ID {
		id, err := objs.PutTree(&store.Tree{Entries: []store.Entry{
			store.SpecialEntry("dev", store.KindCharDev, rdev, 1e18),
			store.SpecialEntry("pipe", store.KindFIFO, 0, 1e18),
		}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	r1, r2 := mk(nullDev), mk(unix.Mkdev(1, 5))
	m, mnt := mountT(t, objs, r1, nil)
	wantNode(t, filepath.Join(mnt, "dev"), syscall.S_IFCHR, nullDev)
	if err := m.SwitchView(r2); err != nil {
		t.Fatal(err)
	}
	wantNode(t, filepath.Join(mnt, "dev"), syscall.S_IFCHR, unix.Mkdev(1, 5))
	wantNode(t, filepath.Join(mnt, "pipe"), syscall.S_IFIFO, 0)
	id, _, err := m.Capture()
	if err != nil || id != r2 {
		t.Fatalf("capture after switch: %s, %v (want the new view unchanged)", id.Short(), err)
	}
}
