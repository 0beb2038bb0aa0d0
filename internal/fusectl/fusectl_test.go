package fusectl

import (
	"errors"
	"os"
	"testing"
)

func TestAbortRejectsBadNames(t *testing.T) {
	for _, c := range []string{"", "../1", "1/abort", "x"} {
		if err := Abort(c); !errors.Is(err, ErrBadConn) {
			t.Errorf("Abort(%q) = %v, want ErrBadConn", c, err)
		}
	}
}

// TestAbortMountsFusectl: with fusectl unmounted, aborting a connection
// that does not exist mounts it and then reports the missing connection.
func TestAbortMountsFusectl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting fusectl needs root")
	}
	if _, err := os.Stat(Dir); err != nil {
		t.Skipf("no %s on this kernel: %v", Dir, err)
	}
	err := Abort("4294967295")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("abort of a missing connection: %v, want not-exist", err)
	}
	if m, err := isMounted(); err != nil || !m {
		t.Fatalf("fusectl mounted after Abort: %v %v", m, err)
	}
}
