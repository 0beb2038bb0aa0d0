package test

import (
	"os"
	"path/filepath"
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
