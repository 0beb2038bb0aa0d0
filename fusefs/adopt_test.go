package fusefs

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// adoptMount mounts an empty tree of a fresh real store, served with
// batched capture writes as the daemon's (so big files are adopted), with
// its state directory inside the store's file system.
func adoptMount(t *testing.T, state string, s *store.Store, root store.ID, passthrough bool) (*Mount, string) {
	t.Helper()
	return mountT(t, nil, root, &mountOpts{objects: batchStore{s}, stateDir: state, passthrough: passthrough})
}

func newAdoptStore(t *testing.T) (*store.Store, store.ID, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := store.Open(filepath.Join(dir, "store"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	root, err := s.PutTree(&store.Tree{})
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	return s, root, state
}

// generation returns size bytes marked by gen.
func generation(gen byte, size int) []byte {
	b := bytes.Repeat([]byte{gen}, size)
	copy(b, "generation ")
	return b
}

func inoOf(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// captureFile captures m and returns the blob the view's file name has.
func captureFile(t *testing.T, m *Mount, s *store.Store, name string) (store.ID, store.ID) {
	t.Helper()
	root, _, err := m.Capture()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.GetTree(root)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := tr.Lookup(name)
	if !ok {
		t.Fatalf("capture has no %s", name)
	}
	return root, e.ID
}

// checkBlob asserts that blob id still holds want and the store checks
// clean.
func checkBlob(t *testing.T, s *store.Store, id store.ID, want []byte) {
	t.Helper()
	got, err := os.ReadFile(s.BlobPath(id))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("blob %s changed: starts %.20q, %d bytes", id.Short(), got, len(got))
	}
	problems, err := s.Check()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if p.Kind != store.ProblemStrayObject {
			t.Errorf("store check: %+v", p)
		}
	}
}

// TestCaptureAdoptsBigFile: a capture takes a big upper file into the
// store by hard link instead of copying it, and the stored blob never
// changes afterwards — not by a write in place through the mount, a
// truncation, a write after a view switch, nor after a remount of the
// same state — while the mount shows every write.
func TestCaptureAdoptsBigFile(t *testing.T) {
	const size = adoptMinBytes + 4096
	for _, pt := range []bool{false, true} {
		name := "plain"
		if pt {
			name = "passthrough"
		}
		t.Run(name, func(t *testing.T) {
			s, root, state := newAdoptStore(t)
			m, mnt := adoptMount(t, state, s, root, pt)
			p := filepath.Join(mnt, "big")
			gen1 := generation('1', size)
			if err := os.WriteFile(p, gen1, 0o644); err != nil {
				t.Fatal(err)
			}
			waitReleased(m)
			_, id1 := captureFile(t, m, s, "big")
			m.ov.mu.Lock()
			in := m.ov.root.children["big"]
			upper := m.ov.upperPath(in.num)
			shared := in.shared
			m.ov.mu.Unlock()
			if !shared || inoOf(t, upper) != inoOf(t, s.BlobPath(id1)) {
				t.Fatal("the capture copied the big file instead of adopting it")
			}
			fi, err := os.Stat(s.BlobPath(id1))
			if err != nil || fi.Mode().Perm() != 0o400 {
				t.Fatalf("adopted blob mode %v, %v", fi.Mode(), err)
			}

			// A write in place through the mount goes to a copy.
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("second"), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			waitReleased(m)
			checkBlob(t, s, id1, gen1)
			gen2 := append([]byte("second"), gen1[6:]...)
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, gen2) {
				t.Fatalf("mount reads %.20q, %v", got, err)
			}
			root2, id2 := captureFile(t, m, s, "big")
			if id2 == id1 {
				t.Fatal("second capture stored the first content")
			}
			checkBlob(t, s, id2, gen2)

			// A truncation by path of the newly adopted file.
			if err := os.Truncate(p, 10); err != nil {
				t.Fatal(err)
			}
			checkBlob(t, s, id2, gen2)
			if got := mustRead(t, p); got != string(gen2[:10]) {
				t.Fatalf("after truncate %q", got)
			}
			_, id3 := captureFile(t, m, s, "big")

			// Adopted again (a write of the full size), then the view
			// switched to the capture: the clean inode reads the blob and
			// a write copies it up.
			gen4 := generation('4', size)
			if err := os.WriteFile(p, gen4, 0o644); err != nil {
				t.Fatal(err)
			}
			waitReleased(m)
			root4, id4 := captureFile(t, m, s, "big")
			if id4 == id3 || id4 == id2 {
				t.Fatal("capture did not store the new content")
			}
			if err := m.SwitchView(root4); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, gen4) {
				t.Fatalf("after switch mount reads %.20q, %v", got, err)
			}
			f, err = os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("fifth"), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			waitReleased(m)
			checkBlob(t, s, id4, gen4)
			_ = root2
		})
	}
}

// TestAdoptedFileAfterRemount: the state directory of a mount stopped
// after a capture adopted a file (no view switch dropped it) holds an
// upper file that is also a blob; a new mount of that state gives it a
// copy before anything can write it.
func TestAdoptedFileAfterRemount(t *testing.T) {
	const size = adoptMinBytes
	s, root, state := newAdoptStore(t)
	mnt1 := t.TempDir()
	m1, err := MountAt(mnt1, Config{Objects: batchStore{s}, Root: root, StateDir: state, FsName: "fusefs-test"})
	if err != nil {
		t.Fatal(err)
	}
	gen1 := generation('a', size)
	if err := os.WriteFile(filepath.Join(mnt1, "big"), gen1, 0o644); err != nil {
		t.Fatal(err)
	}
	waitReleased(m1)
	_, id1 := captureFile(t, m1, s, "big")
	if err := m1.Unmount(); err != nil {
		t.Fatal(err)
	}
	m1.Wait()

	m2, mnt2 := adoptMount(t, state, s, root, false)
	p := filepath.Join(mnt2, "big")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("after remount"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitReleased(m2)
	checkBlob(t, s, id1, gen1)
	if got := mustRead(t, p); got[:13] != "after remount" || len(got) != size {
		t.Fatalf("mount reads %.20q (%d bytes)", got, len(got))
	}
}
