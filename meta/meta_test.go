package meta_test

import (
	"path/filepath"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/metatest"
)

func TestMemoryConformance(t *testing.T) {
	metatest.Run(t, func(*testing.T) meta.Store { return meta.NewMemory() })
}

func TestBoltConformance(t *testing.T) {
	metatest.Run(t, func(t *testing.T) meta.Store { return openBolt(t, filepath.Join(t.TempDir(), "meta.db")) })
}

func openBolt(t *testing.T, path string) *meta.Bolt {
	t.Helper()
	b, err := meta.OpenBolt(path, meta.BoltOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
