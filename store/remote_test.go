package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

// sharedDir is a remote blob plane in a fresh directory: what
// `--blobs DIR` names on a shared file system.
func sharedDir(t testing.TB) *blobs.Dir {
	d, err := blobs.OpenShared(t.TempDir(), blobs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestConformanceRemoteDir runs the store suite with objects kept on a
// shared directory behind an unbounded cache. The grace period is a
// nanosecond so that the suite's GC sees the remote swept as a local
// store is.
func TestConformanceRemoteDir(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opt store.Options) *store.Store {
		opt.Remote = sharedDir(t)
		opt.GCGrace = time.Nanosecond
		return storetest.MustOpenWith(t, opt)
	})
}

// TestConformanceRemoteTinyCache runs it with a cache of one byte: every
// object is evicted as soon as the remote has it, so every read is a
// fetch.
func TestConformanceRemoteTinyCache(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opt store.Options) *store.Store {
		opt.Remote = sharedDir(t)
		opt.GCGrace = time.Nanosecond
		opt.CacheBytes = 1
		return storetest.MustOpenWith(t, opt)
	})
}

// objectBytes is the bytes of the object files under a store's objects/.
func objectBytes(t *testing.T, storeDir string) (n int64, files int) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(storeDir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, files
}

// Two nodes: separate store directories (caches) over one remote and one
// metadata plane. What one writes and publishes, the other reads through
// every blob path, fetching it into its own cache.
func TestRemoteTwoStores(t *testing.T) {
	remote := sharedDir(t)
	plane := meta.NewMemory()
	dirA, dirB := t.TempDir(), t.TempDir()
	a := storetest.MustOpenDir(t, dirA, store.Options{NoSync: true, Meta: plane, Remote: remote})
	b := storetest.MustOpenDir(t, dirB, store.Options{NoSync: true, Meta: plane, Remote: remote})

	files := map[string]string{"a": "alpha", "d/b": "beta", "d/c": "gamma"}
	g := storetest.PutGen(t, a, "main", store.GenCreate, files)
	storetest.MustCreate(t, a, "main", "", g, store.ID{})
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	bigID, _, err := a.WriteBlob(bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	if _, n := objectBytes(t, dirB); n != 0 {
		t.Fatalf("node B's cache has %d objects before reading", n)
	}

	w, err := b.GetWorkspace("main")
	if err != nil || w.Head != g {
		t.Fatalf("node B sees workspace %+v, %v", w, err)
	}
	for name, content := range files {
		id := store.BlobID([]byte(content))
		if got, err := b.ReadBlob(id); err != nil || string(got) != content {
			t.Fatalf("B ReadBlob %s: %q, %v", name, got, err)
		}
	}
	if n, err := b.BlobSize(bigID); err != nil || n != int64(len(big)) {
		t.Fatalf("B BlobSize: %d, %v", n, err)
	}
	rc, err := b.OpenBlob(bigID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("B OpenBlob: %d bytes, %v", len(got), err)
	}
	// The paths that need a local file: a fresh cache for each.
	for _, tc := range []struct {
		name string
		do   func(s *store.Store, id store.ID) error
	}{
		{"OpenBlobFile", func(s *store.Store, id store.ID) error {
			f, err := s.OpenBlobFile(id)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"VerifyBlob", (*store.Store).VerifyBlob},
		{"CopyBlob", func(s *store.Store, id store.ID) error {
			f, err := os.Create(filepath.Join(t.TempDir(), "copy"))
			if err != nil {
				return err
			}
			defer f.Close()
			n, err := s.CopyBlob(id, f)
			if err == nil && n != int64(len(big)) {
				err = fmt.Errorf("copied %d bytes", n)
			}
			return err
		}},
		{"BlobPath", func(s *store.Store, id store.ID) error {
			b, err := os.ReadFile(s.BlobPath(id))
			if err == nil && !bytes.Equal(b, big) {
				err = errors.New("content differs")
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := storetest.MustOpenDir(t, dir, store.Options{NoSync: true, Meta: plane, Remote: remote})
			if err := tc.do(c, bigID); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(c.BlobPath(bigID)); err != nil {
				t.Fatalf("not in the cache after %s: %v", tc.name, err)
			}
		})
	}
	// A read-only store (a command that only reads) fills its cache too.
	ro := storetest.MustOpenDir(t, t.TempDir(), store.Options{NoSync: true, Meta: plane, Remote: remote})
	roDir := ro.Dir()
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	ro = storetest.MustOpenDir(t, roDir, store.Options{NoSync: true, Meta: plane, Remote: remote, ReadOnly: true})
	if got, err := ro.ReadBlob(bigID); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read-only store: %d bytes, %v", len(got), err)
	}
	// An object neither has is still ErrNotFound.
	if _, err := b.ReadBlob(store.BlobID([]byte("nobody wrote this"))); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("absent everywhere: %v", err)
	}
	storetest.CheckAndClose(t, b)
}

// The cache stays within its bound however much is written and read, and
// what was evicted comes back on reading; a streamed object is not
// evicted while its reader is open.
func TestRemoteEviction(t *testing.T) {
	const bound = 16 << 10
	dir := t.TempDir()
	s := storetest.MustOpenDir(t, dir, store.Options{NoSync: true, Remote: sharedDir(t), CacheBytes: bound})
	content := func(i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "%04d", i), 256) } // 1 KiB
	var ids []store.ID
	for i := range 64 {
		id, err := s.WriteBlobBytes(content(i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if n, _ := objectBytes(t, dir); n > bound {
			t.Fatalf("after %d writes the cache holds %d bytes, bound %d", i+1, n, bound)
		}
	}
	b := s.NewBlobBatch()
	for i := 64; i < 96; i++ {
		id, err := b.WriteBlobBytes(content(i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, _ := objectBytes(t, dir); n > bound {
		t.Fatalf("after a batch the cache holds %d bytes, bound %d", n, bound)
	}
	// Hold the first object open while everything else is read back.
	rc, err := s.OpenBlob(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		got, err := s.ReadBlob(id)
		if err != nil || !bytes.Equal(got, content(i)) {
			t.Fatalf("object %d after eviction: %d bytes, %v", i, len(got), err)
		}
		if n, _ := objectBytes(t, dir); n > bound {
			t.Fatalf("reading back: the cache holds %d bytes, bound %d", n, bound)
		}
		if _, err := os.Lstat(s.BlobPath(ids[0])); err != nil && i > 0 {
			t.Fatalf("the open object was evicted after reading %d: %v", i, err)
		}
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, content(0)) {
		t.Fatalf("the open object: %d bytes, %v", len(got), err)
	}
	if n, files := objectBytes(t, dir); n == 0 || files == 0 {
		t.Fatal("the cache keeps nothing")
	}
	storetest.CheckAndClose(t, s)
}

// flaky is a remote that fails every request while down.
type flaky struct {
	blobs.Store
	down atomic.Bool
}

var errDown = errors.New("connection refused (test remote down)")

func (f *flaky) check() error {
	if f.down.Load() {
		return errDown
	}
	return nil
}

func (f *flaky) Put(r io.Reader) (blobs.ID, int64, error) {
	if err := f.check(); err != nil {
		return blobs.ID{}, 0, err
	}
	return f.Store.Put(r)
}

func (f *flaky) PutFile(p string) (blobs.ID, int64, error) {
	if err := f.check(); err != nil {
		return blobs.ID{}, 0, err
	}
	return f.Store.PutFile(p)
}

func (f *flaky) Open(id blobs.ID) (io.ReadCloser, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.Open(id)
}

func (f *flaky) Stat(id blobs.ID) (blobs.Info, error) {
	if err := f.check(); err != nil {
		return blobs.Info{}, err
	}
	return f.Store.Stat(id)
}

func (f *flaky) List(fn func(blobs.Info) error) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.List(fn)
}

func (f *flaky) Delete(id blobs.ID) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.Delete(id)
}

// With the remote down, a batch's Commit and a single write fail with
// ErrUnavailable and nothing reaches the remote; once it is back the same
// Commit succeeds. A read that misses the cache fails with ErrUnavailable,
// not ErrNotFound (which would say the object does not exist).
func TestRemoteUnavailable(t *testing.T) {
	inner := sharedDir(t)
	remote := &flaky{Store: inner}
	s := storetest.MustOpenDir(t, t.TempDir(), store.Options{NoSync: true, Remote: remote})
	kept := must(s.WriteBlobBytes([]byte("stored while up")))(t)

	remote.down.Store(true)
	b := s.NewBlobBatch()
	ids := []store.ID{
		must(b.WriteBlobBytes([]byte("one")))(t),
		must(b.WriteBlobBytes([]byte("two")))(t),
		must(b.WriteBlobBytes([]byte("stored while up")))(t),
	}
	if err := b.Commit(); !errors.Is(err, blobs.ErrUnavailable) || !errors.Is(err, errDown) {
		t.Fatalf("Commit with the remote down: %v, want ErrUnavailable wrapping the cause", err)
	}
	for _, id := range ids[:2] {
		if _, err := inner.Stat(blobs.ID(id)); !errors.Is(err, blobs.ErrNotFound) {
			t.Fatalf("object %s in the remote after a failed commit: %v", id.Short(), err)
		}
	}
	if _, err := s.WriteBlobBytes([]byte("single")); !errors.Is(err, blobs.ErrUnavailable) {
		t.Fatalf("WriteBlobBytes with the remote down: %v", err)
	}
	other := storetest.MustOpenDir(t, t.TempDir(), store.Options{NoSync: true, Remote: remote})
	if _, err := other.ReadBlob(kept); !errors.Is(err, blobs.ErrUnavailable) || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cache miss with the remote down: %v, want ErrUnavailable", err)
	}

	remote.down.Store(false)
	if err := b.Commit(); err != nil {
		t.Fatalf("Commit after the remote came back: %v", err)
	}
	for i, id := range ids {
		if _, err := inner.Stat(blobs.ID(id)); err != nil {
			t.Fatalf("object %d not in the remote after the retried commit: %v", i, err)
		}
	}
	if got, err := other.ReadBlob(kept); err != nil || string(got) != "stored while up" {
		t.Fatalf("cache miss after the remote came back: %q, %v", got, err)
	}
	storetest.CheckAndClose(t, s)
}

// timedRemote is a shared directory whose stored times (Info.ModTime)
// come from a test clock, as an object store's LastModified comes from
// its server's: put and touch record the clock's time.
type timedRemote struct {
	*blobs.Dir
	clock *storetest.Clock
	mu    sync.Mutex
	at    map[blobs.ID]time.Time
}

func (r *timedRemote) stored(id blobs.ID, err error) {
	if err == nil {
		r.mu.Lock()
		if _, ok := r.at[id]; !ok {
			r.at[id] = time.UnixMilli(r.clock.Now())
		}
		r.mu.Unlock()
	}
}

func (r *timedRemote) PutFile(p string) (blobs.ID, int64, error) {
	id, n, err := r.Dir.PutFile(p)
	r.stored(id, err)
	return id, n, err
}

func (r *timedRemote) Touch(id blobs.ID) error {
	err := r.Dir.Touch(id)
	if err == nil {
		r.mu.Lock()
		r.at[id] = time.UnixMilli(r.clock.Now())
		r.mu.Unlock()
	}
	return err
}

func (r *timedRemote) info(in blobs.Info) blobs.Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	in.ModTime = r.at[in.ID]
	return in
}

func (r *timedRemote) Stat(id blobs.ID) (blobs.Info, error) {
	in, err := r.Dir.Stat(id)
	return r.info(in), err
}

func (r *timedRemote) List(fn func(blobs.Info) error) error {
	return r.Dir.List(func(in blobs.Info) error { return fn(r.info(in)) })
}

func (r *timedRemote) Delete(id blobs.ID) error {
	r.mu.Lock()
	delete(r.at, id)
	r.mu.Unlock()
	return r.Dir.Delete(id)
}

// GC across nodes: an object another node uploaded for a capture whose
// head is not yet published survives a GC within the grace period; an
// old unreferenced one goes; an old one that an upload found present is
// touched, so its grace starts again. Check reports a referenced object
// the remote lost.
func TestRemoteGCGrace(t *testing.T) {
	clock := storetest.NewClock(time.Now().UnixMilli())
	remote := &timedRemote{Dir: sharedDir(t), clock: clock, at: map[blobs.ID]time.Time{}}
	plane := meta.NewMemory()
	open := func() *store.Store {
		return storetest.MustOpenDir(t, t.TempDir(), store.Options{NoSync: true, Meta: plane, Remote: remote,
			GCGrace: time.Hour, Clock: clock.Now})
	}
	a, b, c := open(), open(), open()
	g := storetest.PutGen(t, a, "main", store.GenCreate, map[string]string{"f": "referenced"})
	storetest.MustCreate(t, a, "main", "", g, store.ID{})
	garbage := must(b.WriteBlobBytes([]byte("old garbage")))(t)
	again := must(b.WriteBlobBytes([]byte("written again")))(t)

	clock.Advance((2 * time.Hour).Milliseconds())
	// In flight on B: uploaded, not referenced yet.
	inflight := must(b.WriteBlobBytes([]byte("in-flight capture")))(t)
	// A capture on C stores old content again: its upload finds the
	// object present and touches it.
	must(c.WriteBlobBytes([]byte("written again")))(t)

	freed, err := a.GC(nil)
	if err != nil {
		t.Fatal(err)
	}
	if freed != int64(len("old garbage")) {
		t.Fatalf("GC freed %d bytes from the remote, want %d", freed, len("old garbage"))
	}
	for _, tc := range []struct {
		name string
		id   store.ID
		want bool
	}{
		{"in flight", inflight, true}, {"old garbage", garbage, false},
		{"touched", again, true}, {"referenced", store.BlobID([]byte("referenced")), true},
	} {
		_, err := remote.Stat(blobs.ID(tc.id))
		if got := err == nil; got != tc.want {
			t.Errorf("%s object in the remote after GC: %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
	if got, err := b.ReadBlob(inflight); err != nil || string(got) != "in-flight capture" {
		t.Fatalf("the in-flight object after GC: %q, %v", got, err)
	}

	if ps, err := a.Check(); err != nil || len(ps) != 0 {
		t.Fatalf("check: %v, %v", ps, err)
	}
	if err := remote.Delete(blobs.ID(store.BlobID([]byte("referenced")))); err != nil {
		t.Fatal(err)
	}
	ps, err := a.Check()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Kind != store.ProblemMissingBlob || ps[0].Object != store.BlobID([]byte("referenced")).String() {
		t.Fatalf("check with a referenced object lost from the remote: %v", ps)
	}
	// Writing it again repairs the remote (the cleanup checks every store).
	must(c.WriteBlobBytes([]byte("referenced")))(t)
}

func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
