package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/daemon"
)

// TestPrintStatusCaptureAndRunning: the text lines of a mount's running
// work (with capture progress), of a capture failed for space (store,
// free and needed bytes) and of one stored by a retry, and a lease's
// idle time.
func TestPrintStatusCaptureAndRunning(t *testing.T) {
	idle := int64(3250)
	rep := statusReport{Workspaces: []statusRow{
		{Workspace: "a", State: "mounted", Window: "reconciling",
			Leases:  []statusLease{{ID: "l1", Owner: "sid:7", Expires: "T", IdleMS: &idle}},
			Running: &statusRunning{What: "final close", Since: "S", ElapsedMS: 1500, Capturing: true, FilesHashed: 3, BytesHashed: 3 << 20},
			Capture: &daemon.CaptureStatus{State: "failed", Since: "F", NoSpace: true, Store: "/st", NeededBytes: 40 << 20, FreeBytes: 4096, Attempts: 2}},
		{Workspace: "b", State: "mounted", Window: "idle",
			Capture: &daemon.CaptureStatus{State: "stored", Since: "G", Attempts: 4}},
	}}
	var out bytes.Buffer
	printStatus(&out, rep)
	for _, want := range []string{
		"lease a l1 owner sid:7 expires T idle 3.3s\n",
		"running a final close since S (1.5s), capture stored 3 files, 3145728 bytes (3.0 MiB)\n",
		"capture a failed since F (2 attempts): no space left on the store's disk: /st has 4096 bytes (4.0 KiB) free, the capture needs up to 41943040 bytes (40.0 MiB);",
		"capture b stored at G after 4 failed attempts\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, out.String())
		}
	}
}
