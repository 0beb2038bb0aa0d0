package fusefs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFreeScratchEmptiesTrash: a file that an fsync made durable and
// that is then deleted waits in upper-trash (the snapshot names it);
// FreeScratch writes a snapshot without it and gives its space back.
func TestFreeScratchEmptiesTrash(t *testing.T) {
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, spec{"a": "a"}), nil)
	p := filepath.Join(mnt, "big")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Repeat("x", 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	waitReleased(m)
	if ents, _ := os.ReadDir(m.ov.trashDir()); len(ents) != 1 {
		t.Fatalf("upper-trash after deleting a durable file: %d entries, want 1", len(ents))
	}
	freed, err := m.FreeScratch()
	if err != nil || freed < 1<<20 {
		t.Fatalf("FreeScratch: freed %d, %v", freed, err)
	}
	if ents, _ := os.ReadDir(m.ov.trashDir()); len(ents) != 0 {
		t.Fatalf("upper-trash after FreeScratch: %d entries", len(ents))
	}
}

// TestTruncateUnlinkedKeepsSnapshotReplayable: a full disk empties the
// retired upper files of deleted files before the snapshot that drops
// them is written; a crash in between replays the older snapshot, which
// brings such a file back, empty, and nothing else is touched.
func TestTruncateUnlinkedKeepsSnapshotReplayable(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"a": "a"})
	state := t.TempDir()
	m, mnt := mountT(t, objs, root, &mountOpts{stateDir: state})
	for _, name := range []string{"gone", "kept"} {
		f, err := os.Create(filepath.Join(mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(name + " data")
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := os.Remove(filepath.Join(mnt, "gone")); err != nil {
		t.Fatal(err)
	}
	waitReleased(m)
	m.ov.mu.Lock()
	trash := append([]uint64(nil), m.ov.trash...)
	m.ov.mu.Unlock()
	if len(trash) != 1 || !m.ov.truncateUnlinked(trash) {
		t.Fatalf("truncateUnlinked(%v) freed nothing", trash)
	}
	// The crash: replay the durable (older) snapshot offline.
	ov, found, err := loadSnapshot(state, objs)
	if err != nil || !found {
		t.Fatalf("replay after the truncation: found %v, %v", found, err)
	}
	got := map[string]int64{}
	for name, c := range ov.root.children {
		if c.upper {
			fi, err := os.Stat(ov.upperPath(c.num))
			if err != nil {
				t.Fatal(err)
			}
			got[name] = fi.Size()
		}
	}
	if got["gone"] != 0 || got["kept"] != int64(len("kept data")) {
		t.Fatalf("replayed upper sizes %v: want gone empty, kept whole", got)
	}
}

// TestUsersAfterDetachFromOutside: once the mountpoint was detached by
// someone else, the path names the directory underneath: Users lists
// nobody (not every process on the parent file system), and
// UnmountUnused finishes without touching what the path names.
func TestUsersAfterDetachFromOutside(t *testing.T) {
	objs := newFakeObjects(t)
	mnt := t.TempDir()
	m, err := MountAt(mnt, Config{Objects: objs, Root: objs.build(t, spec{"f": "x"}), StateDir: t.TempDir(), FsName: "fusefs-test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	users, err := m.Users()
	if err != nil || len(users) != 0 {
		t.Fatalf("Users after a detach: %v, %v; want none", users, err)
	}
	if err := m.UnmountUnused(); err != nil {
		t.Fatalf("UnmountUnused after a detach: %v", err)
	}
	m.Wait()
}
