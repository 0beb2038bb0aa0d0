package corestate

import (
	gocontext "context"
	"os"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
)

// backend is one way to keep a Store's records: files below a root, or a
// metadata plane. Every test about semantics (not files or journals) runs
// on each of them through forBackends.
type backend struct {
	name string
	// open returns a fresh, empty store.
	open func(t *testing.T) *Store
	// reopen returns a second Store over the same records.
	reopen func(t *testing.T, s *Store) *Store
	// rawPut stores content as the record's raw bytes, bypassing the
	// envelope (to corrupt it); rawDelete removes it again.
	rawPut    func(t *testing.T, s *Store, family, key, content string)
	rawDelete func(t *testing.T, s *Store, family, key string)
}

var fileBackend = backend{
	name: "file",
	open: func(t *testing.T) *Store { return openStore(t, t.TempDir()) },
	reopen: func(t *testing.T, s *Store) *Store {
		return openStore(t, s.root)
	},
	rawPut: func(t *testing.T, s *Store, family, key, content string) {
		p := newRecordPaths(s.root, family, key)
		if err := os.MkdirAll(p.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p.current, content)
	},
	rawDelete: func(t *testing.T, s *Store, family, key string) {
		if err := os.Remove(newRecordPaths(s.root, family, key).current); err != nil {
			t.Fatal(err)
		}
	},
}

// planeBackend keeps the records on an in-memory metadata plane.
var planeBackend = backend{
	name:   "plane",
	open:   func(t *testing.T) *Store { return openPlane(t, meta.NewMemory()) },
	reopen: func(t *testing.T, s *Store) *Store { return openPlane(t, s.pl.m) },
	rawPut: func(t *testing.T, s *Store, family, key, content string) {
		k := meta.NewSpace(planeSpace, family).Key([]byte(key))
		if err := s.pl.m.Update(gocontext.Background(), func(tx meta.Tx) error { return tx.Put(k, []byte(content)) }); err != nil {
			t.Fatal(err)
		}
	},
	rawDelete: func(t *testing.T, s *Store, family, key string) {
		k := meta.NewSpace(planeSpace, family).Key([]byte(key))
		if err := s.pl.m.Update(gocontext.Background(), func(tx meta.Tx) error { return tx.Delete(k) }); err != nil {
			t.Fatal(err)
		}
	},
}

// openPlane opens a store on p and checks it at the end of the test, as
// openStore does for files.
func openPlane(t *testing.T, p meta.Store) *Store {
	t.Helper()
	s, err := OpenPlane(p, PlaneOptions{})
	if err != nil {
		t.Fatalf("OpenPlane: %v", err)
	}
	return s
}

// forBackends runs fn once per backend, as a subtest.
func forBackends(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range []backend{fileBackend, planeBackend} {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}
