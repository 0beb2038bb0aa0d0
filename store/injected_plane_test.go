package store_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
	bolt "go.etcd.io/bbolt"
)

// A store on an injected plane keeps every record there: no meta.db, and
// reopening over the same plane finds its workspaces, trees and
// generations; GC and Check walk the plane.
func TestInjectedPlaneKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	plane := meta.NewMemory()
	s := storetest.MustOpenDir(t, dir, store.Options{NoSync: true, Meta: plane})
	g := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "1", "d/b": "2"})
	storetest.MustCreate(t, s, "main", "", g, store.ID{})
	stray, err := s.PutTree(&store.Tree{Entries: []store.Entry{{Name: "x", Kind: store.KindFile, ID: store.BlobID([]byte("x"))}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "meta.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("meta.db on an injected plane: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = storetest.MustOpenDir(t, dir, store.Options{NoSync: true, Meta: plane})
	w, err := s.GetWorkspace("main")
	if err != nil || w.Head != g {
		t.Fatalf("workspace after reopening over the plane: %+v, %v", w, err)
	}
	gen, err := s.GetGeneration(g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTree(gen.Root); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(nil); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.HasTree(stray); err != nil || ok {
		t.Fatalf("unreachable tree after GC: present %v, %v", ok, err)
	}
	if ok, err := s.HasTree(gen.Root); err != nil || !ok {
		t.Fatalf("reachable tree after GC: present %v, %v", ok, err)
	}
}

func TestInjectedPlaneBadContents(t *testing.T) {
	put := func(t *testing.T, p meta.Store, ns, leaf, v string) {
		t.Helper()
		err := p.Update(context.Background(), func(tx meta.Tx) error {
			return tx.Put(meta.NewSpace(ns).Key([]byte(leaf)), []byte(v))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Run("read-only empty", func(t *testing.T) {
		_, err := store.Open(t.TempDir(), store.Options{ReadOnly: true, Meta: meta.NewMemory()})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("read-only open of an empty plane: %v, want ErrNotFound", err)
		}
	})
	t.Run("records without format", func(t *testing.T) {
		p := meta.NewMemory()
		put(t, p, "trees", string(make([]byte, 32)), "\x01")
		_, err := store.Open(t.TempDir(), store.Options{Meta: p})
		if !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("open of a plane with trees but no format record: %v, want ErrCorrupt", err)
		}
	})
	t.Run("other format", func(t *testing.T) {
		p := meta.NewMemory()
		put(t, p, "format", "format", `{"version":2,"hash":"blake3-256"}`)
		_, err := store.Open(t.TempDir(), store.Options{Meta: p})
		if !errors.Is(err, store.ErrIncompatible) {
			t.Fatalf("open of a plane of format 2: %v, want ErrIncompatible", err)
		}
	})
	t.Run("undecodable format", func(t *testing.T) {
		p := meta.NewMemory()
		put(t, p, "format", "format", `{`)
		_, err := store.Open(t.TempDir(), store.Options{Meta: p})
		if !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("open of a plane with a broken format record: %v, want ErrCorrupt", err)
		}
	})
}

// meta.db's layout is what it was before the store went through the plane:
// records written into the buckets directly (as an older binary did) read
// back, and what the store writes lands in the same buckets under the raw
// IDs.
func TestMetaDBLayoutUnchanged(t *testing.T) {
	s := storetest.MustOpen(t)
	tree := &store.Tree{Entries: []store.Entry{{Name: "f", Kind: store.KindFile, ID: store.BlobID([]byte("f"))}}}
	enc, err := tree.Encode()
	if err != nil {
		t.Fatal(err)
	}
	old := store.TreeID(enc)
	if err := s.DB().Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("trees")).Put(old[:], enc) }); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetTree(old); err != nil || len(got.Entries) != 1 || got.Entries[0].Name != "f" {
		t.Fatalf("tree written into the trees bucket directly: %+v, %v", got, err)
	}
	g := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "1"})
	storetest.MustCreate(t, s, "main", "", g, store.ID{})
	root, err := s.OverlayApply(store.ID{}, map[string][]byte{"p": []byte("v")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.DB().View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("generations")).Get(g[:]) == nil {
			t.Error("generation not in the generations bucket")
		}
		if tx.Bucket([]byte("lazy-overlay")).Get(root[:]) == nil {
			t.Error("overlay node not in the lazy-overlay bucket")
		}
		if v := tx.Bucket([]byte("format")).Get([]byte("format")); v == nil {
			t.Error("no format record in the format bucket")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Put the stray tree out of Check's way: nothing reaches it.
	if _, err := s.GC(nil); err != nil {
		t.Fatal(err)
	}
}
