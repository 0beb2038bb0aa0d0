package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkLength compares the file's size with the pages the meta page
// counts: shorter is truncation, whichever page is missing.
func TestCheckLength(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := checkLength(s.db, filepath.Join(dir, metaFileName)); err != nil {
		t.Fatalf("intact meta.db: %v", err)
	}
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	err = checkLength(s.db, short)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("a file shorter than the pages: %v, want ErrCorrupt saying truncated", err)
	}
}
