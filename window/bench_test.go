package window_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/window/windowtest"
)

// benchBeginFinish measures one tool's whole window: Begin, the final
// Finish claiming reconciliation, and CompleteReconcile back to idle —
// three compare-and-swaps.
func benchBeginFinish(b *testing.B, st window.Store) {
	ctx := context.Background()
	c := window.NewCoordinator(st, window.SystemClock{})
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Begin(ctx, "bench", windowtest.Gen(1), "tool", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		f, err := c.Finish(ctx, l)
		if err != nil || f.Outcome != window.FinishReconcile {
			b.Fatalf("finish: %+v %v", f, err)
		}
		if _, _, err := c.CompleteReconcile(ctx, "bench", f.Reconcile.Ticket); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBeginFinishMemory(b *testing.B) {
	benchBeginFinish(b, window.NewMemoryStore())
}

func BenchmarkBeginFinishBolt(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noSync bool
	}{{"fsync", false}, {"nosync", true}} {
		b.Run(mode.name, func(b *testing.B) {
			plane := openBolt(b, filepath.Join(b.TempDir(), "meta.db"), mode.noSync)
			benchBeginFinish(b, window.NewMetaStore(plane, window.SystemClock{}))
		})
	}
}
