package fusefs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestXattrCostPerWrite counts the GETXATTR requests 64 writes cause:
// with xattrs enabled the kernel asks before every write (passthrough
// included), which is why EnableXattrs is off by default; disabled, it asks
// at most once.
func TestXattrCostPerWrite(t *testing.T) {
	for _, c := range []struct{ pt, xattrs bool }{{false, true}, {true, true}, {false, false}, {true, false}} {
		pt := c.pt
		objs := newFakeObjects(t)
		m, mnt := mountT(t, objs, objs.build(t, spec{"seed": "x"}), &mountOpts{passthrough: pt, xattrs: c.xattrs})
		f, err := os.Create(filepath.Join(mnt, "f"))
		if err != nil {
			t.Fatal(err)
		}
		buf := bytes.Repeat([]byte("x"), 4096)
		before := m.daemonGetxattrs.Load()
		for i := 0; i < 64; i++ {
			if _, err := f.Write(buf); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		n := m.daemonGetxattrs.Load() - before
		t.Logf("passthrough=%v xattrs=%v: %d GETXATTR for 64 writes (daemon writes %d)", pt, c.xattrs, n, m.daemonWrites.Load())
		if !c.xattrs && n > 1 {
			t.Errorf("xattrs disabled but %d GETXATTR requests reached the daemon", n)
		}
	}
}
