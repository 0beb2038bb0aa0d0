package fusefs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// captureAndSwitch ends a "lease" the way the daemon does: capture, then
// switch the view to the captured root.
func captureAndSwitch(t *testing.T, m *Mount) {
	t.Helper()
	waitReleased(m)
	id, _, err := m.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SwitchView(id); err != nil {
		t.Fatal(err)
	}
}

func retainedBytes(m *Mount) int64 {
	m.ov.mu.Lock()
	defer m.ov.mu.Unlock()
	return m.ov.retainedBytes
}

// TestRetainedUpperKeepsPassthrough: a file written, captured and
// switched to is clean, yet its reads stay passthrough on the kept upper
// file; with retention off they go through the daemon.
func TestRetainedUpperKeepsPassthrough(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, tc := range []struct {
		name   string
		retain int64
		want   bool // reads stay passthrough
	}{{"default", 0, true}, {"off", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := newFakeObjects(t)
			m, mnt := mountT(t, objs, objs.build(t, spec{"old": "x"}), &mountOpts{passthrough: true, retain: tc.retain})
			p := filepath.Join(mnt, "f")
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			captureAndSwitch(t, m)
			if m.Dirty() {
				t.Fatal("dirty after switching to the capture")
			}
			before := m.daemonReads.Load()
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back: %d bytes, %v", len(got), err)
			}
			if pt := m.daemonReads.Load() == before; pt != tc.want {
				t.Fatalf("passthrough read = %v, want %v (%d daemon reads)", pt, tc.want, m.daemonReads.Load()-before)
			}
			if r := retainedBytes(m); (r == int64(len(data))) != tc.want {
				t.Fatalf("retained %d bytes", r)
			}
			// Written again: the next capture has the new bytes, and the
			// file is retained again afterwards.
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("tail")); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if !m.Dirty() {
				t.Fatal("an open for writing left the file clean")
			}
			if r := retainedBytes(m); r != 0 {
				t.Fatalf("a written file still counts as retained: %d", r)
			}
			waitReleased(m)
			id, _, err := m.Capture()
			if err != nil {
				t.Fatal(err)
			}
			if got := objs.flatten(t, id)["f"]; got != "file:"+string(data)+"tail" {
				t.Fatalf("capture after the second write: %d bytes", len(got))
			}
			if err := m.SwitchView(id); err != nil {
				t.Fatal(err)
			}
			if r := retainedBytes(m); (r == int64(len(data))+4) != tc.want {
				t.Fatalf("retained %d bytes after the second switch", r)
			}
		})
	}
}

// TestRetainBudgetAndRebase: retention stops at the byte budget, a
// rebased change of a retained file drops the kept copy, and so does
// deleting it.
func TestRetainBudgetAndRebase(t *testing.T) {
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, spec{"keep": "k"}), &mountOpts{passthrough: true, retain: 100})
	p := func(s string) string { return filepath.Join(mnt, s) }
	a, b := string(bytes.Repeat([]byte("a"), 60)), string(bytes.Repeat([]byte("b"), 60))
	mustWrite(t, p("a"), a)
	mustWrite(t, p("b"), b)
	m.ov.mu.Lock()
	written := []uint64{m.ov.root.children["a"].num, m.ov.root.children["b"].num}
	m.ov.mu.Unlock()
	captureAndSwitch(t, m)
	if r := retainedBytes(m); r != 60 {
		t.Fatalf("retained %d bytes, want 60 (one of two 60-byte files under a 100-byte budget)", r)
	}
	if mustRead(t, p("a")) != a || mustRead(t, p("b")) != b {
		t.Fatal("content changed")
	}
	// A "rebase": the parent changed both files. (The reads above close
	// their files, but the kernel sends RELEASE asynchronously: a handle
	// still open keeps the retained copy in use.)
	next := objs.build(t, spec{"keep": "k", "a": "A from the parent", "b": "B from the parent"})
	waitReleased(m)
	if err := m.SwitchView(next); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, p("a")) + "|" + mustRead(t, p("b")); got != "A from the parent|B from the parent" {
		t.Fatalf("after the rebase: %q", got)
	}
	if r := retainedBytes(m); r != 0 {
		t.Fatalf("retained %d bytes after the parent replaced them", r)
	}
	for _, num := range written {
		if _, err := os.Stat(m.ov.upperPath(num)); !os.IsNotExist(err) {
			t.Fatalf("upper file %d left after its content was replaced: %v", num, err)
		}
	}
	// Retain again, then delete: the budget is given back.
	mustWrite(t, p("c"), a)
	captureAndSwitch(t, m)
	if r := retainedBytes(m); r != 60 {
		t.Fatalf("retained %d, want 60", r)
	}
	if err := os.Remove(p("c")); err != nil {
		t.Fatal(err)
	}
	waitReleased(m)
	if r := retainedBytes(m); r != 0 {
		t.Fatalf("retained %d after unlink", r)
	}
}

// TestRetainedUpperWrittenBeforeCrash: a retained file is clean, so a
// snapshot names it only when its directory is dirty, and then as clean.
// Whatever a crash leaves — written and fsynced, or written after a
// snapshot that recorded it clean — recovery captures what the file holds.
func TestRetainedUpperWrittenBeforeCrash(t *testing.T) {
	for _, tc := range []struct {
		name string
		// after the retaining switch: f is rewritten; fsyncF fsyncs it;
		// sibling creates and fsyncs another file first, so the snapshot
		// records the directory with f still clean.
		fsyncF, sibling bool
	}{{"fsynced", true, false}, {"recorded-clean", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := newFakeObjects(t)
			state := t.TempDir()
			m, mnt := mountT(t, objs, objs.build(t, spec{"x": "1"}), &mountOpts{passthrough: true, stateDir: state})
			p := filepath.Join(mnt, "f")
			mustWrite(t, p, "captured")
			captureAndSwitch(t, m)
			pinned := m.Root()
			if tc.sibling {
				g, err := os.Create(filepath.Join(mnt, "g"))
				if err != nil {
					t.Fatal(err)
				}
				if err := g.Sync(); err != nil {
					t.Fatal(err)
				}
				g.Close()
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("written after")); err != nil {
				t.Fatal(err)
			}
			if tc.fsyncF {
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			// The daemon "dies" now: its state directory is what a crash
			// leaves.
			crashed := t.TempDir()
			if out, err := exec.Command("cp", "-a", state+"/.", crashed).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			id, changed, err := RecoverCapture(crashed, objs, pinned)
			if err != nil || !changed {
				t.Fatalf("recover: changed=%v %v", changed, err)
			}
			if got := objs.flatten(t, id)["f"]; got != "file:written after" {
				t.Fatalf("recovered f = %q", got)
			}
		})
	}
}
