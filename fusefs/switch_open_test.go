package fusefs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSwitchRebasesAFileStillOpen: a file the workspace changed and
// captured is still open (a reader, or a RELEASE not yet arrived) when the
// view switches to a merge that changed it again. The merged content must
// show and be what the next capture publishes — the old upper file must
// not silently undo the merged change.
func TestSwitchRebasesAFileStillOpen(t *testing.T) {
	for _, pt := range []bool{false, true} {
		objs := newFakeObjects(t)
		root := objs.build(t, spec{"a": "base", "b": "x"})
		m, mnt := mountT(t, objs, root, &mountOpts{passthrough: pt})
		p := func(s string) string { return filepath.Join(mnt, s) }
		mustWrite(t, p("a"), "local")
		waitReleased(m)
		if _, _, err := m.Capture(); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p("a"))
		if err != nil {
			t.Fatal(err)
		}
		merged := objs.build(t, spec{"a": "local+parent", "b": "x"})
		if err := m.SwitchView(merged); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, p("a")); got != "local+parent" {
			t.Errorf("passthrough=%v: a new open after the switch reads %q, want the merged content", pt, got)
		}
		f.Close()
		waitReleased(m)
		id, _, err := m.Capture()
		if err != nil {
			t.Fatal(err)
		}
		if got := objs.flatten(t, id)["a"]; got != "file:local+parent" {
			t.Errorf("passthrough=%v: the next capture has a = %q, want the merged content", pt, got)
		}
		if err := m.SwitchView(id); err != nil {
			t.Fatal(err)
		}
		if m.Dirty() {
			t.Errorf("passthrough=%v: still dirty after switching to the capture", pt)
		}
	}
}
