package meta_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	bolt "go.etcd.io/bbolt"
)

// TestBoltLayout: a key's namespace is its bucket path and its leaf the key
// in the innermost bucket, so meta.db files written before the plane read
// the same; a whole nested namespace deleted drops its bucket.
func TestBoltLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("heads"))
		if err != nil {
			return err
		}
		ws, err := b.CreateBucket([]byte("ws/1"))
		if err != nil {
			return err
		}
		return ws.Put([]byte{0, 1}, []byte("old"))
	})
	if err != nil {
		t.Fatal(err)
	}
	p := meta.NewBolt(db)
	ctx := context.Background()
	sp := meta.NewSpace("heads", "ws/1")
	err = p.Update(ctx, func(tx meta.Tx) error {
		v, ok, err := tx.Get(sp.Key([]byte{0, 1}))
		if err != nil || !ok || string(v) != "old" {
			t.Errorf("record written by bbolt directly: %q %v %v", v, ok, err)
		}
		return tx.Put(meta.NewSpace("meta", "conflicts").Key([]byte("k")), []byte("new"))
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte("meta")).Bucket([]byte("conflicts")).Get([]byte("k")); string(v) != "new" {
			t.Errorf("meta/conflicts/k in bbolt: %q", v)
		}
		return nil
	})
	if err := p.Update(ctx, func(tx meta.Tx) error { return tx.DeletePrefix(sp.Prefix(nil)) }); err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("heads")) == nil || tx.Bucket([]byte("heads")).Bucket([]byte("ws/1")) != nil {
			t.Error("deleting a nested namespace must drop its bucket and keep the top-level one")
		}
		return nil
	})
}
