package blobs_test

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/blobs/blobtest"
)

// newDir makes a plane in a fresh directory laid out as a store's: the
// objects and tmp directories side by side, 0700.
func newDir(t *testing.T, fail func(string) error) (*blobs.Dir, string) {
	root := t.TempDir()
	for _, d := range []string{"objects", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return openIn(root, fail), root
}

func openIn(root string, fail func(string) error) *blobs.Dir {
	return blobs.OpenDir(filepath.Join(root, "objects"), blobs.Options{Tmp: filepath.Join(root, "tmp"), Fail: fail})
}

func TestDirConformance(t *testing.T) {
	blobtest.Run(t, blobtest.Harness{
		New: func(t *testing.T) blobs.Store { d, _ := newDir(t, nil); return d },
		Corrupt: func(t *testing.T, s blobs.Store, id blobs.ID, b []byte) {
			p := s.(*blobs.Dir).Path(id)
			if err := os.Chmod(p, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o400); err != nil {
				t.Fatal(err)
			}
		},
		Crashing: func(t *testing.T) (blobs.Store, func(string), func() blobs.Store) {
			var at atomic.Pointer[string]
			fail := func(step string) error {
				if p := at.Load(); p != nil && *p == step {
					return &crash{step}
				}
				return nil
			}
			d, root := newDir(t, fail)
			crashAt := func(step string) { at.Store(&step) }
			reopen := func() blobs.Store {
				// What the next process's store open does: empty tmp.
				if err := os.RemoveAll(filepath.Join(root, "tmp")); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(filepath.Join(root, "tmp"), 0o700); err != nil {
					t.Fatal(err)
				}
				return openIn(root, fail)
			}
			return d, crashAt, reopen
		},
	})
}

type crash struct{ step string }

func (c *crash) Error() string { return "simulated crash at " + c.step }

func TestMemConformance(t *testing.T) {
	blobtest.Run(t, blobtest.Harness{
		New: func(t *testing.T) blobs.Store { return blobs.NewMem() },
		Corrupt: func(t *testing.T, s blobs.Store, id blobs.ID, b []byte) {
			s.(*blobs.Mem).Corrupt(id, b)
		},
	})
}

// Objects are 0400 files in 0700 fan-out directories.
func TestDirModes(t *testing.T) {
	d, _ := newDir(t, nil)
	id, err := d.PutBytes([]byte("mode"))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(d.Path(id))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o400 {
		t.Fatalf("object mode %04o, want 0400", fi.Mode().Perm())
	}
	fi, err = os.Stat(filepath.Dir(d.Path(id)))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("fan-out mode %04o, want 0700", fi.Mode().Perm())
	}
}
