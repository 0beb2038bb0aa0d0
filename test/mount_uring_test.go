package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/fusefs"
)

// needUring makes FUSE over io_uring available (as root, as CI runs) or
// skips the test.
func needUring(t *testing.T) {
	t.Helper()
	if err := fusefs.TurnOnUring(); err != nil {
		t.Skip(err)
	}
}

// A mount served over io_uring: tools' requests go through the rings
// (status counts them), a session's first request waits for its lease off
// the queue's thread, and the lease end captures as over /dev/fuse.
func TestMountUring(t *testing.T) {
	t.Parallel()
	needUring(t)
	e, mp := toolMount(t, "--uring")
	if tr := e.statusOf("w").Transport; tr != "io_uring" {
		t.Fatalf("mount --uring: status reports transport %q", tr)
	}
	before := e.statusOf("w").UringRequests // the warm-up's
	script := `set -e
mkdir -p d/e
for i in 1 2 3 4 5 6 7 8 9 10; do echo "line $i" > d/e/f$i; done
cat d/e/f3
mv d/e/f10 d/g
rm d/e/f1
ls d/e | wc -l
`
	_, r := e.execOK(mp, script)
	if r.stdout != "line 3\n8\n" {
		t.Fatalf("tool output inside the --uring mount: %q", r.stdout)
	}
	if n := e.statusOf("w").UringRequests - before; n < 20 {
		t.Fatalf("status reports %d more requests over io_uring after the script; want its requests (at least 20)", n)
	}
	out := e.unmountAndExport(mp)
	if got := readFile(t, filepath.Join(out, "d", "g")); got != "line 10\n" {
		t.Fatalf("export d/g = %q", got)
	}
	if _, err := os.Stat(filepath.Join(out, "d", "e", "f1")); !os.IsNotExist(err) {
		t.Fatalf("export still has d/e/f1 (err %v)", err)
	}
}

// mount --transport: auto (the default) takes io_uring where the kernel
// offers it, dev-fuse keeps to /dev/fuse, and a bad or contradictory
// choice is a usage error that mounts nothing.
func TestMountTransport(t *testing.T) {
	t.Parallel()
	needUring(t)
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"seed.txt": "seed\n"})
	e.ok("create", "w", "--from", src)
	e.ok("fork", "w", "v")
	bad := filepath.Join(e.dir, "mnt-bad")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, flags := range [][]string{{"--transport", "uring"}, {"--transport", ""}, {"--uring", "--transport", "dev-fuse"}} {
		r := e.fails(2, append([]string{"mount", "w", bad}, flags...)...)
		if !strings.Contains(r.stderr, "--transport") && !strings.Contains(r.stderr, "--uring") {
			t.Errorf("mount %v: stderr %q names neither flag", flags, r.stderr)
		}
	}
	if st := e.statusOf("w"); st.Transport != "" {
		t.Fatalf("after refused mounts, w reports transport %q", st.Transport)
	}

	auto := filepath.Join(e.dir, "mnt-auto")
	dev := filepath.Join(e.dir, "mnt-dev")
	for _, d := range []string{auto, dev} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.ok("mount", "w", auto)
	e.ok("mount", "v", dev, "--transport", "dev-fuse")
	for _, mp := range []string{auto, dev} {
		if err := os.WriteFile(filepath.Join(mp, "new.txt"), []byte(mp), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.statusOf("w"); st.Transport != "io_uring" || st.UringRequests == 0 {
		t.Errorf("default mount: transport %q, %d requests over io_uring; want io_uring", st.Transport, st.UringRequests)
	}
	if st := e.statusOf("v"); st.Transport != "dev-fuse" || st.UringRequests != 0 {
		t.Errorf("mount --transport dev-fuse: transport %q, %d requests over io_uring", st.Transport, st.UringRequests)
	}
	// The human table says the same, one line per mount.
	st := e.run("status")
	if st.code != 0 {
		t.Fatalf("status: %s", st)
	}
	human := st.stdout
	for _, want := range []string{"mount w " + auto + " over io_uring", "mount v " + dev + " over dev-fuse"} {
		if !strings.Contains(human, want) {
			t.Errorf("status lacks %q:\n%s", want, human)
		}
	}
	e.unmount(auto)
	e.unmount(dev)
}
