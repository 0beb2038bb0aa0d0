// Package storetest provides test helpers for code built on store: a
// temporary store that is integrity-checked when the test ends, a manual
// clock, small builders, and the store conformance suite (Run).
package storetest

import (
	"errors"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
	berrors "go.etcd.io/bbolt/errors"
)

// MustOpen opens a fresh store in a temp directory with fsyncs off. At
// cleanup it runs Check, failing the test on any problem, and closes it.
func MustOpen(t testing.TB) *store.Store {
	t.Helper()
	return MustOpenWith(t, store.Options{})
}

// MustOpenWith is MustOpen with options (NoSync is forced on).
func MustOpenWith(t testing.TB, opt store.Options) *store.Store {
	t.Helper()
	opt.NoSync = true
	return MustOpenDir(t, t.TempDir(), opt)
}

// MustOpenDir opens the store in dir with opt and registers the checking
// cleanup.
func MustOpenDir(t testing.TB, dir string, opt store.Options) *store.Store {
	t.Helper()
	s, err := store.Open(dir, opt)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { CheckAndClose(t, s) })
	return s
}

// CheckAndClose runs Check, reports every problem as a test error, and
// closes s. Closing twice is harmless, so tests may close early.
func CheckAndClose(t testing.TB, s *store.Store) {
	t.Helper()
	defer s.Close()
	problems, err := s.Check()
	if err != nil {
		// A store closed by the test itself cannot be checked.
		if errors.Is(err, berrors.ErrDatabaseNotOpen) {
			return
		}
		t.Errorf("store check: %v", err)
		return
	}
	for _, p := range problems {
		t.Errorf("store check: %s", p)
	}
}

// Clock is a manual store clock in Unix milliseconds, safe for concurrent
// use. Pass c.Now as store.Options.Clock.
type Clock struct{ ms atomic.Int64 }

// NewClock returns a clock reading start.
func NewClock(start int64) *Clock {
	c := &Clock{}
	c.ms.Store(start)
	return c
}

// Now returns the current reading.
func (c *Clock) Now() int64 { return c.ms.Load() }

// Set sets the reading.
func (c *Clock) Set(ms int64) { c.ms.Store(ms) }

// Advance moves the clock forward by ms.
func (c *Clock) Advance(ms int64) { c.ms.Add(ms) }

// PutFiles stores a flat or nested tree of regular files (paths with '/'
// make subdirectories) and returns its root tree ID.
func PutFiles(t testing.TB, s *store.Store, files map[string]string) store.ID {
	t.Helper()
	type dir struct {
		files map[string]string
		dirs  map[string]map[string]string
	}
	d := dir{files: map[string]string{}, dirs: map[string]map[string]string{}}
	for p, content := range files {
		if i := strings.IndexByte(p, '/'); i >= 0 {
			sub := d.dirs[p[:i]]
			if sub == nil {
				sub = map[string]string{}
				d.dirs[p[:i]] = sub
			}
			sub[p[i+1:]] = content
			continue
		}
		d.files[p] = content
	}
	tree := &store.Tree{}
	for name, content := range d.files {
		id, err := s.WriteBlobBytes([]byte(content))
		if err != nil {
			t.Fatalf("write blob: %v", err)
		}
		tree.Entries = append(tree.Entries, store.Entry{Name: name, Kind: store.KindFile, Size: int64(len(content)), ID: id})
	}
	for name, sub := range d.dirs {
		tree.Entries = append(tree.Entries, store.Entry{Name: name, Kind: store.KindDir, ID: PutFiles(t, s, sub)})
	}
	sort.Slice(tree.Entries, func(i, j int) bool { return tree.Entries[i].Name < tree.Entries[j].Name })
	id, err := s.PutTree(tree)
	if err != nil {
		t.Fatalf("put tree: %v", err)
	}
	return id
}

// PutGen stores a generation of files for workspace ws and returns its ID.
func PutGen(t testing.TB, s *store.Store, ws string, kind store.GenKind, files map[string]string, parents ...store.ID) store.ID {
	t.Helper()
	root := PutFiles(t, s, files)
	id, err := s.PutGeneration(&store.Generation{Root: root, Parents: parents, Workspace: ws, Kind: kind, Time: s.Now()})
	if err != nil {
		t.Fatalf("put generation: %v", err)
	}
	return id
}

// MustCreate creates workspace name (child of parent if non-empty) whose
// first head is gen, based on base.
func MustCreate(t testing.TB, s *store.Store, name, parent string, gen, base store.ID) store.Workspace {
	t.Helper()
	w, err := s.CreateWorkspace(store.Workspace{Name: name, Parent: parent},
		store.HeadEntry{Gen: gen, Base: base, Kind: store.GenCreate})
	if err != nil {
		t.Fatalf("create workspace %s: %v", name, err)
	}
	return w
}
