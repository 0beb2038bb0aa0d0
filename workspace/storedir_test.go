package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckSafeTarget: /, the store, inside it, holding it and another
// store are refused; a directory of its own is not. (Export over / is
// not run through the binary: a regression would empty the machine.)
func TestCheckSafeTarget(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	other := filepath.Join(dir, "other")
	for _, d := range []string{store, other, filepath.Join(dir, "own")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(other, "meta.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", store, filepath.Join(store, "objects"), dir, other, filepath.Join(other, "x")} {
		if err := CheckSafeTarget("export target", p, store); !errors.Is(err, ErrUnsafeTarget) {
			t.Errorf("CheckSafeTarget(%s): %v, want ErrUnsafeTarget", p, err)
		}
	}
	if err := CheckSafeTarget("export target", filepath.Join(dir, "own"), store); err != nil {
		t.Errorf("a directory of its own: %v", err)
	}
	if err := CheckSafeTarget("export target", filepath.Join(dir, "new", "deeper"), store); err != nil {
		t.Errorf("a new directory: %v", err)
	}
}

// TestCheckStoreDir: a store is never made among someone's files.
func TestCheckStoreDir(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, files ...string) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(d, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	for _, d := range []string{filepath.Join(dir, "absent"), mk("empty"), mk("store", "meta.db", "x"), mk("node", "cluster.json"), mk("half", "daemon.log")} {
		if err := CheckStoreDir(d); err != nil {
			t.Errorf("CheckStoreDir(%s): %v", d, err)
		}
	}
	if err := CheckStoreDir(mk("user", "notes.txt", "daemon.log")); !errors.Is(err, ErrNotAStore) {
		t.Errorf("a directory of the user's: %v, want ErrNotAStore", err)
	}
}
