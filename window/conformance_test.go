package window_test

import (
	"path/filepath"
	"testing"

	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/window/windowtest"
	bolt "go.etcd.io/bbolt"
)

func TestMemoryStoreConformance(t *testing.T) {
	windowtest.Run(t, func(t *testing.T) windowtest.Env {
		st := window.NewMemoryStore()
		return windowtest.Env{
			Store:  st,
			Clock:  window.NewManualClock(windowtest.Start),
			PutRaw: func(_ *testing.T, ws string, raw []byte) { st.SetRaw(ws, raw) },
		}
	})
}

func TestBoltStoreConformance(t *testing.T) {
	windowtest.Run(t, func(t *testing.T) windowtest.Env {
		clock := window.NewManualClock(windowtest.Start)
		st := window.NewBoltStore(openBolt(t, filepath.Join(t.TempDir(), "meta.db"), true), clock)
		return windowtest.Env{Store: st, Clock: clock, PutRaw: boltPutRaw(st.DB()), CheckPermit: st.CheckPermit}
	})
}

// openBolt opens a bbolt file closed at test cleanup; noSync skips fsync
// to keep the suite fast (durability is tested separately).
func openBolt(tb testing.TB, path string, noSync bool) *bolt.DB {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		tb.Fatalf("open bolt: %v", err)
	}
	db.NoSync = noSync
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

func boltPutRaw(db *bolt.DB) func(*testing.T, string, []byte) {
	return func(t *testing.T, ws string, raw []byte) {
		t.Helper()
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte(window.BucketName))
			if err != nil {
				return err
			}
			return b.Put([]byte(ws), raw)
		})
		if err != nil {
			t.Fatalf("put raw: %v", err)
		}
	}
}
