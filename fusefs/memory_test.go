package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// TestRetainedStateBoundedAcrossRounds: rounds of creating many files,
// capturing and switching to the capture, then removing them, capturing
// and switching again leave the mount's tables where the first round left
// them. Before the inode-number table forgot dead inodes, every round
// added its files' numbers for good.
func TestRetainedStateBoundedAcrossRounds(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"keep/a": "1", "keep/b": "2"})
	m, mnt := mountT(t, objs, root, nil)
	const files = 300
	// capture is the daemon's final close: take the writers, capture,
	// switch to the capture, record the writers.
	capture := func() {
		m.TakeWriters()
		id, _, err := m.Capture()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SwitchView(id); err != nil {
			t.Fatal(err)
		}
		m.WritersRecorded()
	}
	round := func(r int) MemoryCounts {
		dir := filepath.Join(mnt, "work")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range files {
			// Names differ per round: a number the table kept for
			// a name of an earlier round is never reused.
			mustWrite(t, filepath.Join(dir, fmt.Sprintf("r%d-f%03d", r, i)), "x")
		}
		capture()
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		capture()
		waitReleased(m)
		return m.MemoryCounts()
	}
	first := round(0)
	t.Logf("after round 0: %+v", first)
	var last MemoryCounts
	for r := 1; r <= 8; r++ {
		last = round(r)
		t.Logf("after round %d: %+v", r, last)
	}
	t.Logf("after round 8: %+v", last)
	if last.Inodes > first.Inodes || last.Writers > first.Writers {
		t.Errorf("overlay inodes grew from %d to %d, attribution records from %d to %d, over 8 rounds that end where they began",
			first.Inodes, last.Inodes, first.Writers, last.Writers)
	}
	if b := m.ov.fsmBytes(); b > fsmLogBytes+fsmEntryBytes+4096 {
		t.Errorf("fsmonitor log holds %d bytes, bound %d", b, fsmLogBytes)
	}
	if false {
		t.Errorf("overlay inodes grew from %d to %d over 8 rounds that end where they began", first.Inodes, last.Inodes)
	}
	// The table may hold the numbers of one round's worth of dead
	// inodes (it is swept once it doubles), never more.
	if bound := 2*first.Inodes + inosSweepSlack; last.Inos > bound {
		t.Errorf("inode-number table holds %d entries after 8 rounds (first round %d, bound %d): numbers of removed files are kept", last.Inos, first.Inos, bound)
	}
}

// TestFSMonitorLogBounded: the fsmonitor log drops its older half at
// fsmLogBytes (its entries and their paths), and a token from before the
// drop is answered "everything" (the floor moved past it).
func TestFSMonitorLogBounded(t *testing.T) {
	o := newOverlay(newFakeObjects(t), t.TempDir(), store.ID{})
	o.mu.Lock()
	defer o.mu.Unlock()
	long := strings.Repeat("d/", 30)
	for i := range 200_000 {
		o.seq++
		o.fsmRecord(fmt.Sprintf("%sf%d", long, i))
		if o.fsm.bytes > fsmLogBytes+fsmEntryBytes+len(long)+10 || len(o.fsm.log) > fsmLogMax {
			t.Fatalf("after %d records the log holds %d entries, %d bytes (bounds %d, %d)", i+1, len(o.fsm.log), o.fsm.bytes, fsmLogMax, fsmLogBytes)
		}
	}
	if o.fsm.floor == 0 || o.fsm.floor < o.fsm.log[0].seq-1 {
		t.Fatalf("floor %d, first kept entry at %d: tokens from before the drop must be refused", o.fsm.floor, o.fsm.log[0].seq)
	}
}
