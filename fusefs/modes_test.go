package fusefs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

func permAt(t *testing.T, p string) uint32 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode & 0o7777
}

// withPerms returns root with the entries at names (in the root tree)
// given perms.
func withPerms(t *testing.T, objs *fakeObjects, root store.ID, perms map[string]uint32) store.ID {
	t.Helper()
	tr, err := objs.GetTree(root)
	if err != nil {
		t.Fatal(err)
	}
	c := &store.Tree{Entries: append([]store.Entry(nil), tr.Entries...)}
	for i := range c.Entries {
		if p, ok := perms[c.Entries[i].Name]; ok {
			c.Entries[i].SetPerm(p)
		}
	}
	id, err := objs.PutTree(c)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestModesCaptureAndSwitch: a mount shows a tree's modes, a capture
// records a chmod of a clean file and of a directory exactly (set-uid,
// set-gid, sticky and 000 included), and a view switch to a tree that
// changes only modes shows the new ones on clean inodes.
func TestModesCaptureAndSwitch(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"a": "1", "b": "2", "z": "3", "d/x": "4", "t/y": "5"})
	root = withPerms(t, objs, root, map[string]uint32{"a": 0o600, "d": 0o700})
	m, mnt := mountT(t, objs, root, nil)
	if got := permAt(t, filepath.Join(mnt, "a")); got != 0o600 {
		t.Fatalf("a shows %04o, want the tree's 0600", got)
	}
	if got := permAt(t, filepath.Join(mnt, "d")); got != 0o700 {
		t.Fatalf("d shows %04o, want the tree's 0700", got)
	}
	for name, p := range map[string]os.FileMode{"b": 0o4755 | os.ModeSetuid, "z": 0, "t": 0o777 | os.ModeSticky} {
		if err := os.Chmod(filepath.Join(mnt, name), p); err != nil {
			t.Fatal(err)
		}
	}
	id, changed, err := m.Capture()
	if err != nil || !changed {
		t.Fatalf("capture: %v changed %v", err, changed)
	}
	tr, err := objs.GetTree(id)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{"a": 0o600, "b": 0o4755, "z": 0, "d": 0o700, "t": 0o1777}
	for name, p := range want {
		e, _ := tr.Lookup(name)
		if e.Perm() != p {
			t.Errorf("captured %s: %04o (%s), want %04o", name, e.Perm(), e.Kind, p)
		}
	}
	if e, _ := tr.Lookup("b"); e.Kind != store.KindExec {
		t.Errorf("b captured as %s, want exec", e.Kind)
	}

	// A new view that only changes modes: clean inodes take them.
	next := withPerms(t, objs, id, map[string]uint32{"a": 0o640, "d": 0o750, "b": 0o644})
	if err := m.SwitchView(next); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]uint32{"a": 0o640, "d": 0o750, "b": 0o644, "z": 0} {
		if got := permAt(t, filepath.Join(mnt, name)); got != p {
			t.Errorf("after the switch %s shows %04o, want %04o", name, got, p)
		}
	}
}
