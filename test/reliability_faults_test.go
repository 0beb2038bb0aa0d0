package test

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Faults (issue 6, part 3): a full store, a read-only store, a corrupt
// blob and a truncated meta.db are clear errors, never hangs, silent
// garbage or a reset store.

// relTmpfsEnv is an env whose store lives on a fresh tmpfs of size bytes
// (unmounted at cleanup, after the daemon has been shut down).
func relTmpfsEnv(t *testing.T, size string) *env {
	t.Helper()
	e := newMountEnv(t)
	fsDir := filepath.Join(e.dir, "tmpfs")
	if err := os.Mkdir(fsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", fsDir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	e.store = filepath.Join(fsDir, "store")
	t.Cleanup(func() {
		// Registered after newEnv's cleanup, so it runs first: stop the
		// daemon before its store disappears.
		if r := e.run("shutdown"); r.code != 0 {
			t.Errorf("shutdown: %s", r)
		}
		if b, err := os.ReadFile(filepath.Join(e.store, "daemon.pid")); err == nil {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
				waitGone(pid, 10*time.Second)
			}
		}
		for _, mp := range fuseMounts() {
			if strings.HasPrefix(mp, e.dir+"/") {
				t.Errorf("mount leaked: %s", mp)
				syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
		if err := syscall.Unmount(fsDir, 0); err != nil {
			syscall.Unmount(fsDir, syscall.MNT_DETACH)
		}
	})
	return e
}

func TestReliabilityFullStoreInsideMount(t *testing.T) {
	t.Parallel()
	e := relTmpfsEnv(t, "8m")
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"other.txt": "still readable\n"})
	e.ok("create", "w", "--from", src)
	mp := e.mountAt("w")
	// One session: fill the store, read another file, free the space,
	// write again. Each step's status is printed.
	ddErr := filepath.Join(e.dir, "dd.err") // outside the full store
	script := `dd if=/dev/zero of=big bs=65536 count=1000 2>` + ddErr + `; echo "dd=$?"
grep -q 'No space left on device' ` + ddErr + ` && echo enospc
cat other.txt
rm big && echo removed
echo again > new.txt && sync new.txt && echo written
`
	type out struct {
		r   result
		err error
	}
	c := make(chan out, 1)
	go func() {
		r, err := sessionRun(mp, script)
		c <- out{r, err}
	}()
	var o out
	select {
	case o = <-c:
	case <-time.After(60 * time.Second):
		t.Fatalf("filling the store from inside the mount hung for 60s\ndaemon log:\n%s", e.daemonLog())
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	want := "dd=1\nenospc\nstill readable\nremoved\nwritten\n"
	if o.r.stdout != want {
		b, _ := os.ReadFile(ddErr)
		t.Fatalf("fill the store from inside the mount: got\n%s\nwant stdout %q\ndd's stderr: %s\ndaemon log:\n%s", o.r, want, b, e.daemonLog())
	}
	// A new session is served too.
	if got := inSession(t, mp, "cat other.txt new.txt"); got != "still readable\nagain\n" {
		t.Fatalf("a new session after ENOSPC reads %q", got)
	}
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: %q", o)
	}
	e.fsck()
	got := relTree(t, e.exportTo("w", "out"))
	if got["new.txt"].data != "again\n" || got["big"].kind != "" {
		t.Fatalf("export after the full store: %v", got)
	}
}

func TestReliabilityFullStoreImport(t *testing.T) {
	t.Parallel()
	e := relTmpfsEnv(t, "8m")
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"small.txt": "small\n"})
	for _, n := range []string{"a.bin", "b.bin", "c.bin"} {
		b := make([]byte, 4<<20)
		rand.Read(b)
		if err := os.WriteFile(filepath.Join(src, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.ok("init")
	r := e.run("create", "big", "--from", src)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "acyclicfs: ") || !strings.Contains(strings.ToLower(r.stderr), "space") {
		t.Fatalf("create --from a tree bigger than the store: want exit 1 and a message about space, got %s", r)
	}
	e.fsck()
	if res := e.run("log", "big"); res.code != 2 {
		t.Fatalf("a failed create left a workspace: %s", res)
	}
	// The space is usable again: a small import works.
	writeTree(t, filepath.Join(e.dir, "src2"), map[string]string{"f": "f\n"})
	e.ok("create", "small", "--from", filepath.Join(e.dir, "src2"))
	e.fsck()
}

func TestReliabilityMountReadOnlyStore(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root for a read-only bind mount")
	}
	e := newMountEnv(t)
	e.ok("create", "w")
	ro := filepath.Join(e.dir, "ro")
	os.Mkdir(ro, 0o755)
	if err := syscall.Mount(e.store, ro, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(ro, syscall.MNT_DETACH) })
	if err := syscall.Mount("", ro, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("remount read-only: %v", err)
	}
	mp := filepath.Join(e.dir, "mnt")
	os.Mkdir(mp, 0o755)
	c := make(chan result, 1)
	go func() {
		// Only one --store: with two, forwarding and the command disagree
		// on which one counts (see the report).
		cmd := exec.Command(bin, "--store", ro, "mount", "w", mp)
		cmd.Env = append(os.Environ(), "ACYCLICFS_STORE=")
		r, _ := runCmd(cmd)
		c <- r
	}()
	var r result
	select {
	case r = <-c:
	case <-time.After(30 * time.Second):
		t.Fatal("mount on a read-only store hung for 30s")
	}
	if r.code != 1 || !strings.HasPrefix(r.stderr, "acyclicfs: ") || !strings.Contains(r.stderr, "read-only") {
		t.Fatalf("mount on a read-only store: want exit 1 and a message saying read-only, got %s", r)
	}
	if relMountedHere(mp) {
		syscall.Unmount(mp, syscall.MNT_DETACH)
		t.Fatal("a failed mount left a FUSE mount behind")
	}
	if _, err := os.Stat(filepath.Join(e.store, "daemon.pid")); err == nil {
		t.Fatalf("a failed mount left a daemon.pid in the store")
	}
}

func TestReliabilityCorruptBlobInMount(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "precious content\n", "g": "other\n"})
	e.ok("create", "w", "--from", src)
	var victim string
	filepath.Walk(filepath.Join(e.store, "objects"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); string(b) == "precious content\n" {
				victim = p
			}
		}
		return nil
	})
	if victim == "" {
		t.Fatal("blob of f not found under objects/")
	}
	os.Chmod(victim, 0o644)
	if err := os.WriteFile(victim, []byte("precious cOntent\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	mp := e.mountAt("w")
	r, err := sessionRun(mp, "cat f")
	if err != nil {
		t.Fatal(err)
	}
	if r.code == 0 || strings.Contains(r.stdout, "cOntent") || !strings.Contains(r.stderr, "Input/output error") {
		t.Fatalf("reading a corrupt blob through the mount: want EIO, got %s", r)
	}
	if got := inSession(t, mp, "cat g"); got != "other\n" {
		t.Fatalf("the intact file reads %q", got)
	}
	e.unmount(mp)
	r = e.run("fsck")
	name := filepath.Base(filepath.Dir(victim)) + filepath.Base(victim)
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, name[:12]) {
		t.Fatalf("fsck should name the corrupt object %s:\n%s", name, r)
	}
}

func TestReliabilityTruncatedMetaDB(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "f\n"})
	e.ok("create", "w", "--from", src)
	e.ok("fork", "w", "c")
	db := filepath.Join(e.store, "meta.db")
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	// Put the store back for the env's cleanup (shutdown opens it).
	t.Cleanup(func() { os.WriteFile(db, saved, 0o600) })
	// Half of what bbolt wrote: the file grows in sparse 16 MiB steps
	// (store.initialMmapSize), and cutting only its unwritten tail loses
	// nothing.
	written := fi.Size()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		written = min(written, st.Blocks*512)
	}
	half := written / 2
	if err := os.Truncate(db, half); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(e.dir, "mnt")
	os.Mkdir(mp, 0o755)
	for _, args := range [][]string{
		{"list"}, {"log", "w"}, {"status"}, {"create", "x"}, {"fork", "w", "y"},
		{"export", "w", filepath.Join(e.dir, "out")}, {"gc"}, {"fsck"}, {"init"}, {"mount", "w", mp},
	} {
		r := e.run(args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, "acyclicfs: ") || !strings.Contains(r.stderr, "corrupt") {
			t.Errorf("%s on a truncated meta.db: want exit 1 and a message saying corrupt, got %s", strings.Join(args, " "), r)
		}
		if fi, err := os.Stat(db); err != nil || fi.Size() != half {
			t.Fatalf("%s changed meta.db: size %d, want %d (%v)", strings.Join(args, " "), fi.Size(), half, err)
		}
		if relMountedHere(mp) {
			syscall.Unmount(mp, syscall.MNT_DETACH)
			t.Fatal("mount on a corrupt store left a FUSE mount")
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "out")); !os.IsNotExist(err) {
		t.Error("export from a corrupt store created its target")
	}
}

// A repeated --store must name one store for the whole command: the
// forwarding pre-scan (first --store) and cobra (last --store) must agree.
func TestReliabilityRepeatedStoreFlag(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	e.ok("create", "w") // in e.store (B)
	other := filepath.Join(e.dir, "other-store")
	mp := filepath.Join(e.dir, "mnt")
	os.Mkdir(mp, 0o755)
	cmd := exec.Command(bin, "--store", other, "--store", e.store, "log", "w")
	cmd.Env = append(os.Environ(), "ACYCLICFS_STORE=")
	if r, _ := runCmd(cmd); r.code != 0 {
		t.Fatalf("log with a repeated --store: %s", r)
	}
	cmd = exec.Command(bin, "--store", other, "--store", e.store, "mount", "w", mp)
	cmd.Env = append(os.Environ(), "ACYCLICFS_STORE=")
	r, _ := runCmd(cmd)
	t.Cleanup(func() {
		c := exec.Command(bin, "--store", other, "shutdown")
		c.Env = append(os.Environ(), "ACYCLICFS_STORE=")
		runCmd(c)
	})
	if r.code != 0 {
		t.Fatalf("mount with a repeated --store (the last names the store that has w): %s", r)
	}
	e.unmount(mp)
}
