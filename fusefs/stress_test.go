package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestConcurrentCaptureAndSwitch runs writers, renamers and readers while
// the view is captured and switched to its capture over and over (what
// lease closes do). Under -race it checks the locking; at the end the
// capture must equal the view, and once no file is open a switch to that
// capture leaves nothing dirty.
func TestConcurrentCaptureAndSwitch(t *testing.T) {
	objs := newFakeObjects(t)
	s := spec{}
	for i := 0; i < 20; i++ {
		s[fmt.Sprintf("d%d/f", i)] = "lower"
	}
	m, mnt := mountT(t, objs, objs.build(t, s), &mountOpts{passthrough: true})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d := filepath.Join(mnt, fmt.Sprintf("d%d", (i+w*7)%20))
				switch i % 4 {
				case 0:
					os.WriteFile(filepath.Join(d, fmt.Sprintf("w%d", w)), []byte(fmt.Sprint(i)), 0o644)
				case 1:
					os.Rename(filepath.Join(d, fmt.Sprintf("w%d", w)), filepath.Join(d, fmt.Sprintf("r%d", w)))
				case 2:
					os.ReadFile(filepath.Join(d, "f"))
					os.ReadDir(d)
				case 3:
					os.Remove(filepath.Join(d, fmt.Sprintf("r%d", w)))
				}
			}
		}()
	}
	for i := 0; i < 40; i++ {
		id, _, err := m.Capture()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SwitchView(id); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	waitReleased(m)
	id, _, err := m.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if d := diffMaps(objs.flatten(t, id), flattenDir(t, mnt)); d != "" {
		t.Fatalf("capture differs from view:\n%s", d)
	}
	// flattenDir opened every file; the kernel sends RELEASE after close
	// returns, and an upper file still open at a switch stays dirty (its
	// upper file is the open handles' backing file).
	waitReleased(m)
	if err := m.SwitchView(id); err != nil {
		t.Fatal(err)
	}
	if m.Dirty() {
		t.Fatal("dirty after switching to the final capture")
	}
}
