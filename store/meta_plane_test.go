package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/metatest"
	"github.com/acyclicfs/acyclicfs/store"
)

// TestMetaPlaneConformance runs the metadata-plane suite on the plane a
// store hands out (its own meta.db, through its panic-safe transactions).
// The suite writes records no workspace explains, so these stores are not
// Checked at cleanup.
func TestMetaPlaneConformance(t *testing.T) {
	metatest.Run(t, func(t *testing.T) meta.Store {
		s, err := store.Open(t.TempDir(), store.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s.Meta()
	})
}

func TestMetaPlaneOfReadOnlyStoreRefusesWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := store.Open(dir, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	err = ro.Meta().Update(context.Background(), func(tx meta.Tx) error {
		return tx.Put(meta.NewSpace("t").Key([]byte("k")), []byte("v"))
	})
	if !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("update on a read-only store's plane: %v, want ErrReadOnly", err)
	}
}
