package fusefs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// copyState copies a live mount's state directory (what a SIGKILL would
// leave behind: the snapshot, the log, the upper files).
func copyState(t *testing.T, state string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "state")
	if out, err := exec.Command("cp", "-a", state, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp state: %v %s", err, out)
	}
	return dst
}

// The overlay log carries each change's writer, as DescribeWriter
// described it once per log: a recovery names them per path, removed
// names included; once WritersRecorded, a recovery names them no more.
func TestWALWritersRecovered(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"f": "f", "keep": "k"})
	state := t.TempDir()
	m, mnt := mountT(t, objs, root, &mountOpts{stateDir: state})
	described := 0
	m.ov.mu.Lock()
	m.ov.describe = func(w WriterRef) WriterInfo {
		described++
		return WriterInfo{Comm: "tool", Argv: []string{"tool", "-x"}, Session: "sid:7", Lease: "L1"}
	}
	m.ov.mu.Unlock()
	mustWrite(t, filepath.Join(mnt, "a"), "a")
	mustWrite(t, filepath.Join(mnt, "b"), "b")
	if err := os.Remove(filepath.Join(mnt, "f")); err != nil {
		t.Fatal(err)
	}
	waitReleased(m)

	_, _, changed, _, paths, err := RecoverCaptureAttributed(copyState(t, state), objs, root, nil)
	if err != nil || !changed {
		t.Fatalf("recover: changed %v, %v", changed, err)
	}
	var got []string
	refs := map[WriterRef]bool{}
	for _, p := range paths {
		got = append(got, p.Path)
		for _, w := range p.Writers {
			refs[w.Ref] = true // FUSE names threads: the test's writes may come from several
		}
		if len(p.Writers) != 1 || p.Writers[0].Comm != "tool" || !slices.Equal(p.Writers[0].Argv, []string{"tool", "-x"}) ||
			p.Writers[0].Lease != "L1" || p.Writers[0].Ref.PID == 0 || p.First == 0 {
			t.Errorf("recovered %s: %+v", p.Path, p)
		}
	}
	if want := []string{".", "a", "b", "f"}; !slices.Equal(got, want) {
		t.Errorf("recovered paths %q, want %q", got, want)
	}
	if described != len(refs) {
		t.Errorf("%d writers described %d times in one log", len(refs), described)
	}

	// Recorded: a recovery attributes nothing more, until a new change.
	if ws := m.TakeWriters(); len(ws) != 4 {
		t.Fatalf("TakeWriters: %+v", ws)
	}
	m.WritersRecorded()
	if _, _, _, _, paths, err := RecoverCaptureAttributed(copyState(t, state), objs, root, nil); err != nil || len(paths) != 0 {
		t.Fatalf("recovery after WritersRecorded: %+v, %v", paths, err)
	}
	mustWrite(t, filepath.Join(mnt, "c"), "c")
	waitReleased(m)
	if _, _, _, _, paths, err := RecoverCaptureAttributed(copyState(t, state), objs, root, nil); err != nil ||
		len(paths) != 1 || paths[0].Path != "c" {
		t.Fatalf("recovery after a new change: %+v, %v", paths, err)
	}
	if ws := m.TakeWriters(); len(ws) != 1 || ws[0].Path != "c" {
		t.Fatalf("TakeWriters after WritersRecorded: %+v, want c only", ws)
	}
}

// A version 1 log (before writer records) still replays.
func TestWALVersion1Replays(t *testing.T) {
	b := walBytes(t, 7, walFrame{NextIno: 5, Seq: 1, Recs: []walRec{{Kind: walFull, Inode: snapInode{Num: 2, Mode: 0o100644}}}})
	copy(b, walMagicV1)
	if got, _ := decodeWAL(b, 7); len(got) != 1 || got[0].Seq != 1 {
		t.Fatalf("version 1 log: %+v", got)
	}
}
