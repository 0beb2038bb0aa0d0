package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/blobs/s3blobs"
	"github.com/acyclicfs/acyclicfs/internal/weedtest"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

var s3Prefixes atomic.Int64

// s3Remote opens a fresh prefix of bucket "acyclicfs" on srv, through the
// spec and the AWS environment variables as a user's store would.
func s3Remote(t testing.TB, srv *weedtest.Server) *s3blobs.Store {
	t.Helper()
	spec, err := s3blobs.ParseSpec(fmt.Sprintf("s3://acyclicfs/store%d?endpoint=%s&insecure=1", s3Prefixes.Add(1), srv.Endpoint))
	if err != nil {
		t.Fatal(err)
	}
	r, err := s3blobs.OpenSpec(context.Background(), spec, s3blobs.Options{CreateBucket: true, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConformanceS3 runs the store suite with every object on a real S3
// server (SeaweedFS) behind a small cache.
func TestConformanceS3(t *testing.T) {
	srv := weedtest.Start(t)
	srv.SetEnv(t)
	storetest.Run(t, func(t *testing.T, opt store.Options) *store.Store {
		opt.Remote = s3Remote(t, srv)
		opt.GCGrace = time.Nanosecond
		opt.CacheBytes = 4 << 10
		return storetest.MustOpenWith(t, opt)
	})
}

// Two nodes over one bucket and one metadata plane: what A publishes, B
// reads (its cache starts empty); B's own writes reach A.
func TestRemoteS3TwoNodes(t *testing.T) {
	srv := weedtest.Start(t)
	srv.SetEnv(t)
	remote := s3Remote(t, srv)
	plane := meta.NewMemory()
	a := storetest.MustOpenDir(t, t.TempDir(), store.Options{NoSync: true, Meta: plane, Remote: remote})
	b := storetest.MustOpenDir(t, t.TempDir(), store.Options{NoSync: true, Meta: plane, Remote: remote, CacheBytes: 64 << 10})
	files := map[string]string{"README": "hello", "src/main.go": "package main", "big": string(bytes.Repeat([]byte("x"), 300<<10))}
	g := storetest.PutGen(t, a, "main", store.GenCreate, files)
	storetest.MustCreate(t, a, "main", "", g, store.ID{})
	w, err := b.GetWorkspace("main")
	if err != nil || w.Head != g {
		t.Fatalf("B: %+v, %v", w, err)
	}
	for name, content := range files {
		if got, err := b.ReadBlob(store.BlobID([]byte(content))); err != nil || string(got) != content {
			t.Fatalf("B reads %s: %d bytes, %v", name, len(got), err)
		}
	}
	g2 := storetest.PutGen(t, b, "main", store.GenCommit, map[string]string{"README": "hello from B"}, g)
	if _, err := b.CompareAndAppend("main", g, store.HeadEntry{Gen: g2, Base: g, Kind: store.GenCommit}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := a.ReadBlob(store.BlobID([]byte("hello from B"))); err != nil || string(got) != "hello from B" {
		t.Fatalf("A reads B's write: %q, %v", got, err)
	}
}

// capture is what a capture does with the store: its blobs in one batch,
// then trees, generation and head only if the batch committed.
func capture(s *store.Store, ws string, head store.ID, files map[string]string) (store.ID, error) {
	b := s.NewBlobBatch()
	tree := &store.Tree{}
	for name, content := range files {
		id, err := b.WriteBlobBytes([]byte(content))
		if err != nil {
			return store.ID{}, err
		}
		tree.Entries = append(tree.Entries, store.Entry{Name: name, Kind: store.KindFile, Size: int64(len(content)), ID: id})
	}
	if err := b.Commit(); err != nil {
		return store.ID{}, err
	}
	sort.Slice(tree.Entries, func(i, j int) bool { return tree.Entries[i].Name < tree.Entries[j].Name })
	root, err := s.PutTree(tree)
	if err != nil {
		return store.ID{}, err
	}
	g, err := s.PutGeneration(&store.Generation{Root: root, Parents: []store.ID{head}, Workspace: ws, Kind: store.GenCommit, Time: s.Now()})
	if err != nil {
		return store.ID{}, err
	}
	_, err = s.CompareAndAppend(ws, head, store.HeadEntry{Gen: g, Base: head, Kind: store.GenCommit}, nil)
	return g, err
}

// Object storage down: a capture fails with ErrUnavailable and publishes
// nothing; once it is back the same capture succeeds, and a node with an
// empty cache checks the store clean.
func TestRemoteS3Outage(t *testing.T) {
	srv := weedtest.Start(t)
	srv.SetEnv(t)
	remote := s3Remote(t, srv)
	plane := meta.NewMemory()
	s := storetest.MustOpenDir(t, t.TempDir(), store.Options{NoSync: true, Meta: plane, Remote: remote})
	g0 := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "before"})
	storetest.MustCreate(t, s, "main", "", g0, store.ID{})
	change := map[string]string{"a": "after the outage", "b": "new file"}

	srv.Stop()
	if _, err := capture(s, "main", g0, change); !errors.Is(err, blobs.ErrUnavailable) {
		t.Fatalf("capture with object storage down: %v, want ErrUnavailable", err)
	}
	if w, err := s.GetWorkspace("main"); err != nil || w.Head != g0 || w.Seq != 1 {
		t.Fatalf("head after the failed capture: %+v, %v (want still %s)", w, err, g0.Short())
	}

	srv.Restart()
	for _, c := range change {
		if _, err := remote.Stat(blobs.ID(store.BlobID([]byte(c)))); !errors.Is(err, blobs.ErrNotFound) {
			t.Fatalf("object of the failed capture in the bucket: %v", err)
		}
	}
	g1, err := capture(s, "main", g0, change)
	if err != nil {
		t.Fatalf("capture after the outage: %v", err)
	}
	other := storetest.MustOpenDir(t, t.TempDir(), store.Options{NoSync: true, Meta: plane, Remote: remote})
	if w, err := other.GetWorkspace("main"); err != nil || w.Head != g1 {
		t.Fatalf("head after the retried capture: %+v, %v", w, err)
	}
	if ps, err := other.Check(); err != nil || len(ps) != 0 {
		t.Fatalf("check after the outage: %v, %v", ps, err)
	}
	for _, c := range change {
		if got, err := other.ReadBlob(store.BlobID([]byte(c))); err != nil || string(got) != c {
			t.Fatalf("another node reads %q: %q, %v", c, got, err)
		}
	}
}
