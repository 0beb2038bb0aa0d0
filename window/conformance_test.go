package window_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/window/windowtest"
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
		plane := openBolt(t, filepath.Join(t.TempDir(), "meta.db"), true)
		st := window.NewMetaStore(plane, clock)
		return windowtest.Env{Store: st, Clock: clock, PutRaw: planePutRaw(plane), CheckPermit: st.CheckPermit}
	})
}

// TestMetaStoreOnMemoryPlaneConformance: the window store works on any
// metadata plane, gates included, not only on bbolt.
func TestMetaStoreOnMemoryPlaneConformance(t *testing.T) {
	windowtest.Run(t, func(t *testing.T) windowtest.Env {
		clock := window.NewManualClock(windowtest.Start)
		plane := meta.NewMemory()
		st := window.NewMetaStore(plane, clock)
		return windowtest.Env{Store: st, Clock: clock, PutRaw: planePutRaw(plane), CheckPermit: st.CheckPermit}
	})
}

// openBolt opens a bbolt-backed metadata plane closed at test cleanup;
// noSync skips fsync to keep the suite fast (durability is tested
// separately).
func openBolt(tb testing.TB, path string, noSync bool) *meta.Bolt {
	tb.Helper()
	p, err := meta.OpenBolt(path, meta.BoltOptions{NoSync: noSync})
	if err != nil {
		tb.Fatalf("open bolt: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// planePutRaw stores raw bytes as a workspace's window state.
func planePutRaw(p meta.Store) func(*testing.T, string, []byte) {
	return func(t *testing.T, ws string, raw []byte) {
		t.Helper()
		err := p.Update(context.Background(), func(tx meta.Tx) error {
			return tx.Put(meta.NewSpace(window.Namespace).Key([]byte(ws)), raw)
		})
		if err != nil {
			t.Fatalf("put raw: %v", err)
		}
	}
}
