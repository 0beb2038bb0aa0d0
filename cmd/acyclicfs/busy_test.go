package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/acyclicfs/acyclicfs/daemon"
)

// TestOpenLeasesErrorIsBusyWithHint: the refusal of land/rebase exits 4,
// names every lease on the error's one line and adds a hint.
func TestOpenLeasesErrorIsBusyWithHint(t *testing.T) {
	err := fmt.Errorf("land a: %w", &daemon.OpenLeasesError{Workspace: "a", Holders: []string{"explicit:x (lease 01)", "sid:12 (pid 12 sleep)"}})
	if got := exitCode(err); got != exitBusy {
		t.Fatalf("exitCode = %d, want %d", got, exitBusy)
	}
	var b bytes.Buffer
	reportError(&b, err)
	want := "acyclicfs: land a: busy: a has open leases: explicit:x (lease 01); sid:12 (pid 12 sleep)\nhint: "
	if got := b.String(); len(got) < len(want) || got[:len(want)] != want {
		t.Fatalf("reportError wrote %q, want it to start %q", got, want)
	}
}
