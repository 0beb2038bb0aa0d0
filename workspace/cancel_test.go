package workspace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// openCancelling opens a store whose progress reports cancel the returned
// context once what reaches at items.
func openCancelling(t *testing.T, what string, at int) (*Manager, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m, err := Open(t.TempDir(), Options{NoSync: true, Progress: func(w string, done, _ int) {
		if w == what && done >= at {
			cancel()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		probs, err := m.Fsck()
		if err != nil || len(probs) > 0 {
			t.Errorf("fsck: %v %v", err, probs)
		}
		m.Close()
	})
	return m, ctx
}

func manyFiles(n int) map[string]string {
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("d%d/f%03d", i%7, i)] = fmt.Sprintf("content %d\n", i)
	}
	return files
}

// TestCreateCancelledMidImport: a create --from whose context is cancelled
// after some files were hashed stops, reports the cancellation, and
// leaves no workspace behind and a store fsck finds clean; the same
// create then succeeds.
func TestCreateCancelledMidImport(t *testing.T) {
	m, ctx := openCancelling(t, "import", 20)
	src := filepath.Join(t.TempDir(), "src")
	write(t, src, manyFiles(400))
	_, _, err := m.Create(ctx, "imp", src)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("create with a cancelled import: %v, want context.Canceled", err)
	}
	if _, err := m.Get("imp"); !errors.Is(err, ErrUnknownWorkspace) {
		t.Fatalf("a cancelled create left workspace imp: %v", err)
	}
	if ws, err := m.List(); err != nil || len(ws) != 0 {
		t.Fatalf("workspaces after a cancelled create: %v %v", ws, err)
	}
	if probs, err := m.Fsck(); err != nil || len(probs) > 0 {
		t.Fatalf("fsck after a cancelled create: %v %v", err, probs)
	}
	gen, _, err := m.Create(context.Background(), "imp", src)
	if err != nil {
		t.Fatalf("create after a cancelled one: %v", err)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := m.Export(context.Background(), gen, out, false); err != nil {
		t.Fatal(err)
	}
	if got, want := snapshot(t, out), snapshot(t, src); !maps.Equal(got, want) {
		t.Fatalf("export after the create: got %d entries, want %d", len(got), len(want))
	}
}

// TestCommitCancelledMidImport: a cancelled commit appends nothing.
func TestCommitCancelledMidImport(t *testing.T) {
	m, ctx := openCancelling(t, "import", 20)
	gen, _, err := m.Create(context.Background(), "ws", "")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "src")
	write(t, src, manyFiles(400))
	if _, _, err := m.Commit(ctx, "ws", src); !errors.Is(err, context.Canceled) {
		t.Fatalf("commit with a cancelled import: %v, want context.Canceled", err)
	}
	if w, err := m.Get("ws"); err != nil || w.Head != gen {
		t.Fatalf("head after a cancelled commit: %v (%v), want %v", w.Head, err, gen)
	}
}

// TestExportCancelledMidway: an export cancelled after some files were
// written leaves its target as it was (absent, or with its old entries
// under --force), no staging directory and no pending export journal.
func TestExportCancelledMidway(t *testing.T) {
	for _, existing := range []bool{false, true} {
		t.Run(fmt.Sprintf("existing=%v", existing), func(t *testing.T) {
			m, ctx := openCancelling(t, "export", 20)
			src := filepath.Join(t.TempDir(), "src")
			write(t, src, manyFiles(400))
			gen, _, err := m.Create(context.Background(), "ws", src)
			if err != nil {
				t.Fatal(err)
			}
			parent := t.TempDir()
			target := filepath.Join(parent, "out")
			if existing {
				write(t, target, map[string]string{"old": "kept"})
			}
			before := snapshot(t, parent)
			if _, err := m.Export(ctx, gen, target, existing); !errors.Is(err, context.Canceled) {
				t.Fatalf("export with a cancelled context: %v, want context.Canceled", err)
			}
			if got := snapshot(t, parent); !maps.Equal(got, before) {
				t.Fatalf("a cancelled export changed %s:\n got %v\nwant %v", parent, got, before)
			}
			if p, err := m.PendingExports(); err != nil || len(p) != 0 {
				t.Fatalf("pending exports after a cancelled export: %v %v", p, err)
			}
			if _, err := os.Lstat(target); existing != (err == nil) {
				t.Fatalf("target after a cancelled export: %v", err)
			}
		})
	}
}
