package store_test

import (
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opt store.Options) *store.Store {
		return storetest.MustOpenWith(t, opt)
	})
}

// TestConformanceSynced runs the suite with fsyncs on, as production does.
func TestConformanceSynced(t *testing.T) {
	if testing.Short() {
		t.Skip("fsyncs are slow")
	}
	storetest.Run(t, func(t *testing.T, opt store.Options) *store.Store {
		return storetest.MustOpenDir(t, t.TempDir(), opt)
	})
}

// TestConformanceMemoryPlane runs the suite on stores whose metadata is on
// an in-memory plane (Options.Meta) and whose directory holds only blobs.
func TestConformanceMemoryPlane(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opt store.Options) *store.Store {
		opt.Meta = meta.NewMemory()
		return storetest.MustOpenWith(t, opt)
	})
}
