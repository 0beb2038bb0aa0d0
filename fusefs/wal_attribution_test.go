package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/store"
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
	b := walBytesGob(t, walMagicV1, 7, walFrame{NextIno: 5, Seq: 1, Recs: []walRec{{Kind: walFull, Inode: snapInode{Num: 2, Mode: 0o100644}}}})
	if got, _ := decodeWAL(b, 7); len(got) != 1 || got[0].Seq != 1 {
		t.Fatalf("version 1 log: %+v", got)
	}
}

// peekWriters is what TakeWriters would report now, without taking it.
func peekWriters(m *Mount) []PathWriters {
	o := m.ov
	o.mu.Lock()
	defer o.mu.Unlock()
	taken, takenRemoved := o.taken, o.takenRemoved
	o.taken = nil
	var out []PathWriters
	o.takeWriters(o.root, "", &out)
	for p, r := range o.removed {
		out = append(out, PathWriters{Path: p, Writers: r.ws, First: r.first, Last: r.last})
	}
	o.taken, o.takenRemoved = taken, takenRemoved
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return mergeWriters(out)
}

// writerSummary is paths and their writers' pids, for comparing.
func writerSummary(ws []PathWriters) string {
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "%s:", w.Path)
		for _, r := range w.Writers {
			fmt.Fprintf(&b, " %d/%d", r.PID, r.Exec)
		}
		b.WriteString("; ")
	}
	return b.String()
}

// Property: at any moment — whatever was changed, synced (a snapshot),
// taken and recorded before — a recovery from the state a SIGKILL would
// leave attributes exactly what TakeWriters would report: nothing lost,
// nothing recorded before attributed again.
func TestWALWritersRecoveryModel(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"f1": "1", "f2": "2", "d/g": "g"})
	state := t.TempDir()
	m, mnt := mountT(t, objs, root, &mountOpts{stateDir: state})
	m.ov.mu.Lock()
	m.ov.describe = func(w WriterRef) WriterInfo { return WriterInfo{Comm: "t", Session: "sid:1", Lease: "L"} }
	m.ov.mu.Unlock()
	names := []string{"f1", "f2", "n1", "n2", "d/g", "d/n3"}
	rapid.Check(t, func(rt *rapid.T) {
		m.TakeWriters()
		m.WritersRecorded()
		check := func() {
			waitReleased(m)
			want := peekWriters(m)
			_, _, changed, _, paths, err := RecoverCaptureAttributed(copyState(t, state), objs, root, nil)
			if err != nil {
				rt.Fatalf("recover: %v", err)
			}
			if !changed {
				return // the changes cancel out: nothing is captured, nothing attributed
			}
			got := make([]PathWriters, 0, len(paths))
			for _, p := range paths {
				pw := PathWriters{Path: p.Path}
				for _, w := range p.Writers {
					pw.Writers = append(pw.Writers, w.Ref)
					if w.Lease != "L" {
						rt.Fatalf("recovered %s: writer %+v not as described", p.Path, w)
					}
				}
				got = append(got, pw)
			}
			if g, w := writerSummary(got), writerSummary(want); g != w {
				rt.Fatalf("recovered writers\n%s\nlive writers\n%s", g, w)
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"write": func(rt *rapid.T) {
				p := filepath.Join(mnt, rapid.SampledFrom(names).Draw(rt, "name"))
				_ = os.WriteFile(p, []byte(rapid.StringN(0, 8, -1).Draw(rt, "data")), 0o644)
			},
			"rm": func(rt *rapid.T) {
				_ = os.Remove(filepath.Join(mnt, rapid.SampledFrom(names).Draw(rt, "name")))
			},
			"mv": func(rt *rapid.T) {
				_ = os.Rename(filepath.Join(mnt, rapid.SampledFrom(names).Draw(rt, "from")), filepath.Join(mnt, rapid.SampledFrom(names).Draw(rt, "to")))
			},
			"sync": func(rt *rapid.T) { // fsync writes a snapshot, which starts a new log
				if f, err := os.Open(filepath.Join(mnt, rapid.SampledFrom(names).Draw(rt, "name"))); err == nil {
					_ = f.Sync()
					f.Close()
				}
			},
			"record": func(rt *rapid.T) {
				m.TakeWriters()
				if rapid.Bool().Draw(rt, "recorded") {
					m.WritersRecorded()
				}
			},
			"crash": func(rt *rapid.T) { check() },
		})
		check()
	})
}

// TestCaptureEndIsALogFrame: the end of a capture (its tree IDs, its
// sequence number, and the writers WritersRecorded clears) goes into a
// log frame, not a new snapshot: a snapshot encodes every entry of every
// changed directory (the root's listing in a wide tree), a frame only the
// changed directories' attributes. A recovery from the state directory
// then has the capture's state exactly (nothing to capture or attribute
// again).
func TestCaptureEndIsALogFrame(t *testing.T) {
	objs := newFakeObjects(t)
	sp := spec{}
	for i := range 40 {
		sp[fmt.Sprintf("d%02d/f", i)] = "x"
	}
	root := objs.build(t, sp)
	state := t.TempDir()
	m, mnt := mountT(t, objs, root, &mountOpts{stateDir: state})
	for _, d := range []string{"d03", "d17"} {
		mustWrite(t, filepath.Join(mnt, d, "f"), "changed")
	}
	waitReleased(m)
	if err := m.writeSnapshot(); err != nil {
		t.Fatal(err)
	}
	snap, err := os.ReadFile(filepath.Join(state, snapName))
	if err != nil {
		t.Fatal(err)
	}

	m.TakeWriters()
	got, changed, err := m.Capture()
	if err != nil || !changed {
		t.Fatalf("capture: %v, changed %v", err, changed)
	}
	m.WritersRecorded()
	if after, err := os.ReadFile(filepath.Join(state, snapName)); err != nil || !bytes.Equal(after, snap) {
		t.Fatalf("the capture's end wrote a snapshot (%d bytes, was %d): %v", len(after), len(snap), err)
	}

	o, found, err := loadSnapshot(copyState(t, state), objs)
	if err != nil || !found {
		t.Fatalf("load: %v, found %v", err, found)
	}
	m.ov.mu.Lock()
	wantSeq, wantRoot := m.ov.capSeq, m.ov.root.capTree
	wantDirs := map[string]store.ID{}
	for name, c := range m.ov.root.children {
		wantDirs[name] = c.capTree
	}
	m.ov.mu.Unlock()
	if o.capSeq != wantSeq || wantSeq == 0 || o.root.capTree != wantRoot || wantRoot != got {
		t.Fatalf("recovered capture sequence %d, root tree %s; live %d, %s (captured %s)", o.capSeq, o.root.capTree.Short(), wantSeq, wantRoot.Short(), got.Short())
	}
	for name, want := range wantDirs {
		if c := o.root.children[name]; c == nil || c.capTree != want {
			t.Fatalf("recovered %s: %+v, want capTree %s", name, c, want.Short())
		}
	}
	if _, _, changed, _, paths, err := RecoverCaptureAttributed(copyState(t, state), objs, root, nil); err != nil || !changed || len(paths) != 0 {
		t.Fatalf("recovery after the capture's end: changed %v, attributed %+v, %v", changed, paths, err)
	}
}
