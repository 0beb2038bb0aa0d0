package fusefs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// posixSkips lists posixtest cases we skip, with the reason. go-fuse's own
// loopback runs them all (TestPosix in fs/simple_test.go).
var posixSkips = map[string]string{}

func runPosix(t *testing.T, passthrough, ptClean bool) {
	runPosixWith(t, &mountOpts{passthrough: passthrough, ptClean: ptClean, xattrs: true})
}

func runPosixWith(t *testing.T, o *mountOpts) *Mount {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"seed/file": "x"})
	m, mnt := mountT(t, objs, root, o)
	for name, fn := range posixtest.All {
		t.Run(name, func(t *testing.T) {
			if why := posixSkips[name]; why != "" {
				t.Skip(why)
			}
			dir := filepath.Join(mnt, name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			fn(t, dir)
		})
	}
	return m
}

func TestPosix(t *testing.T)                 { runPosix(t, false, false) }
func TestPosixPassthrough(t *testing.T)      { runPosix(t, true, false) }
func TestPosixPassthroughClean(t *testing.T) { runPosix(t, true, true) }

// The same suite with requests served over io_uring.
func TestPosixUring(t *testing.T) {
	needUring(t)
	m := runPosixWith(t, &mountOpts{passthrough: true, xattrs: true, uring: true})
	n := m.UringRequests()
	t.Logf("%d requests answered over io_uring", n)
	if n < 1000 {
		t.Errorf("%d requests answered over io_uring, want the suite's (over 1,000)", n)
	}
}
