package workspace

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/internal/dirwatch"
	"github.com/acyclicfs/acyclicfs/store"
)

// attach attaches ws's directory as the daemon does under its mount, so
// that detection watches it; the returned function detaches it.
func attach(t testing.TB, m *Manager, ws, dir string) func() {
	t.Helper()
	info, ok, err := m.InPlace(ws)
	if err != nil || !ok {
		t.Fatalf("in-place info of %s: %v %v", ws, ok, err)
	}
	d, err := dirfd.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	detach := m.st.AttachBase(info.Base, d)
	return func() { detach(); d.Close() }
}

// landEdit forks ws, commits files over the fork's tree and lands it.
func landEdit(t testing.TB, m *Manager, ws string, files map[string]string) {
	t.Helper()
	if _, err := m.Fork(ws, "agent", ""); err != nil {
		t.Fatal(err)
	}
	edit := filepath.Join(t.TempDir(), "edit")
	write(t, edit, files)
	if _, _, err := m.Commit(context.Background(), "agent", edit); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Land(context.Background(), "agent", RebaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove("agent", false); err != nil {
		t.Fatal(err)
	}
}

// publishEdits publishes on ws the head's tree with the files of edits
// (existing paths) given new contents, as a mount's capture does:
// everything else keeps the entry it had (unchanged directories stay
// unresolved references). Then it syncs, materializing the edits.
func publishEdits(t testing.TB, m *Manager, ws string, edits map[string]string) {
	t.Helper()
	w, err := m.Get(ws)
	if err != nil {
		t.Fatal(err)
	}
	root, err := m.RootOf(w.Head)
	if err != nil {
		t.Fatal(err)
	}
	var rewrite func(dir string, id store.ID) store.ID
	rewrite = func(dir string, id store.ID) store.ID {
		tr, err := m.st.GetTree(id)
		if err != nil {
			t.Fatal(err)
		}
		changed := false
		for i := range tr.Entries {
			e := &tr.Entries[i]
			p := path.Join(dir, e.Name)
			if c, ok := edits[p]; ok {
				if e.ID, err = m.st.WriteBlobBytes([]byte(c)); err != nil {
					t.Fatal(err)
				}
				e.Size, changed = int64(len(c)), true
				continue
			}
			for q := range edits {
				if e.Kind == store.KindDir && strings.HasPrefix(q, p+"/") {
					e.ID, changed = rewrite(p, e.ID), true
					break
				}
			}
		}
		if !changed {
			return id
		}
		nid, err := m.st.PutTree(tr)
		if err != nil {
			t.Fatal(err)
		}
		return nid
	}
	if _, _, err := m.PublishCapture(ws, w.Head, rewrite("", root), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SyncInPlace(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
}

// TestInPlaceEventsSeeEdits: with DIR watched, a sync over a DIR nobody
// touched lists no directory, and an edit another program makes afterwards
// is still taken in where detection looks (the directories the tree lists,
// and the own lstat of the unresolved directories in them), and DIR and
// the head agree.
func TestInPlaceEventsSeeEdits(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := openTest(t)
		dir := filepath.Join(t.TempDir(), "work")
		before := map[string]string{"a/x": "1", "a/y": "2", "b/z": "3", "b/c/w": "4", "top": "5", "d/u": "6", "d/e/v": "7"}
		write(t, dir, before)
		if _, err := m.CreateInPlace("ws", dir); err != nil {
			rt.Fatal(err)
		}
		detach := attach(t, m, "ws", dir)
		defer detach()
		if _, err := m.SyncInPlace(context.Background(), "ws"); err != nil { // the root is listed and watched
			rt.Fatal(err)
		}
		// The root and a are stored now; b, b/c, d and d/e stay references.
		after := maps.Clone(before)
		after["a/x"], after["top"] = "1 changed", "5 changed"
		publishEdits(t, m, "ws", map[string]string{"a/x": after["a/x"], "top": after["top"]})
		if _, err := m.SyncInPlace(context.Background(), "ws"); err != nil { // what the materialization wrote is listed again
			rt.Fatal(err)
		}
		listings, quiet := m.ip.detect.listings.Load(), m.ip.detect.quietHits.Load()
		if _, err := m.SyncInPlace(context.Background(), "ws"); err != nil {
			rt.Fatal(err)
		}
		if n := m.ip.detect.listings.Load() - listings; n != 0 {
			rt.Fatalf("a sync over an untouched, watched DIR listed %d directories", n)
		}
		if m.ip.detect.quietHits.Load() == quiet {
			rt.Fatal("a sync over an untouched, watched DIR answered no directory from events")
		}
		want := maps.Clone(after)
		paths := []string{"a/x", "a/y", "b/z", "b/c/w", "top", "d/u", "d/e/v"}
		p := rapid.SampledFrom(paths).Draw(rt, "path")
		how := rapid.IntRange(0, 2).Draw(rt, "how")
		// Detection looks into the directories the tree lists (the root
		// and a); of b and d, unresolved references, it compares only their
		// own lstat, which a new or removed name changes.
		parent := path.Dir(p)
		detected := parent == "." || parent == "a" || ((parent == "b" || parent == "d") && how != 0)
		switch how {
		case 0:
			want[p] += "+ext"
		case 1:
			delete(want, p)
			if err := os.Remove(filepath.Join(dir, p)); err != nil {
				rt.Fatal(err)
			}
		case 2:
			p = path.Join(parent, "new")
			want[p] = "ext"
		}
		if v, ok := want[p]; ok {
			if err := os.WriteFile(filepath.Join(dir, p), []byte(v), 0o644); err != nil {
				rt.Fatal(err)
			}
		}
		res, err := m.SyncInPlace(context.Background(), "ws")
		if err != nil {
			rt.Fatal(err)
		}
		if got := res.Outcome != OutcomeCurrent; got != detected {
			rt.Fatalf("sync after the external edit of %s: outcome %s, want changes taken in: %v", p, res.Outcome, detected)
		}
		w, err := m.Get("ws")
		if err != nil {
			rt.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "out")
		if _, err := m.Export(context.Background(), w.Head, out, false); err != nil {
			rt.Fatal(err)
		}
		if got := files(snapshot(t, out)); !maps.Equal(got, want) || !maps.Equal(got, files(snapshot(t, dir))) {
			rt.Fatalf("head after the external edit of %s:\n got %v\nwant %v\n DIR %v", p, got, want, snapshot(t, dir))
		}
	})
}

// TestInPlaceEventBlindWriteNotOverwritten: a write inotify does not
// report (through a hard link from outside DIR) to a file the landing
// changes too is not overwritten: the materialization's paths are checked
// before it writes, and the edit ends as a conflict with both versions.
func TestInPlaceEventBlindWriteNotOverwritten(t *testing.T) {
	m := openTest(t)
	dir := filepath.Join(t.TempDir(), "work")
	before := map[string]string{"a.txt": "base\n", "b.txt": "b\n"}
	write(t, dir, before)
	if _, err := m.CreateInPlace("ws", dir); err != nil {
		t.Fatal(err)
	}
	detach := attach(t, m, "ws", dir)
	defer detach()
	landEdit(t, m, "ws", map[string]string{"a.txt": "base\n", "b.txt": "b changed\n"})
	// Linked only now: the landing may have replaced a.txt's inode.
	outside := filepath.Join(t.TempDir(), "link")
	if err := os.Link(filepath.Join(dir, "a.txt"), outside); err != nil {
		t.Fatal(err)
	}
	for range 2 { // remembered, then answered from events
		if _, err := m.SyncInPlace(context.Background(), "ws"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Fork("ws", "agent", ""); err != nil {
		t.Fatal(err)
	}
	edit := filepath.Join(t.TempDir(), "edit")
	write(t, edit, map[string]string{"a.txt": "agent\n", "b.txt": "b changed\n"})
	if _, _, err := m.Commit(context.Background(), "agent", edit); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte("external\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	quiet := m.ip.detect.quietHits.Load()
	if _, err := m.Land(context.Background(), "agent", RebaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if m.ip.detect.quietHits.Load() == quiet {
		t.Fatal("the landing's sync answered no directory from events: the test does not test the check")
	}
	got, err := os.ReadFile(filepath.Join(dir, "a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "external") || !strings.Contains(string(got), "agent") {
		t.Fatalf("a.txt after the landing: %q, want both versions", got)
	}
	if cs, _ := m.Conflicts("ws"); len(cs) == 0 {
		t.Fatal("no conflict recorded for the file edited on both sides")
	}
}

// files drops the directories of a snapshot.
func files(snap map[string]string) map[string]string {
	maps.DeleteFunc(snap, func(p, _ string) bool { return strings.HasSuffix(p, "/") })
	return snap
}

// TestWatchListingRefusesUnreportedFileSystems: a directory of DIR on a
// file system whose changes inotify does not fully report (a mount inside
// DIR; /proc here) is not watched, so its listing is never remembered.
func TestWatchListingRefusesUnreportedFileSystems(t *testing.T) {
	w, err := dirwatch.New(16)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	d := detector{w: w}
	fd, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if lw := d.watchListing("mnt", fd); lw.ok {
		t.Fatal("a directory on /proc was watched")
	}
	local, err := unix.Open(t.TempDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(local)
	if !dirwatch.Supported(local) {
		t.Skip("the test directory's file system is not one dirwatch trusts")
	}
	if lw := d.watchListing("local", local); !lw.ok {
		t.Fatal("a local directory was not watched")
	}
}

// lazyTree must build exactly what copying every outcome would: the old
// entry where an outcome is the old entry itself, the outcome (under the
// old name) where it differs, nothing where there is none, extras after.
func TestLazyTreeMatchesEagerCopy(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 20).Draw(rt, "n")
		old := make([]store.Entry, n)
		for i := range old {
			old[i] = store.Entry{Name: fmt.Sprintf("e%02d", i), Kind: store.KindFile, Size: int64(i)}
		}
		l := lazyTree{old: old}
		var want []store.Entry
		for i := range old {
			var ne *store.Entry
			switch rapid.IntRange(0, 3).Draw(rt, "outcome") {
			case 0, 1: // the old entry itself (the common case)
				ne = &old[i]
			case 2: // a new entry, possibly named otherwise
				ne = &store.Entry{Name: "other", Kind: store.KindFile, Size: 1000 + int64(i)}
			}
			if ne != nil {
				c := *ne
				c.Name = old[i].Name
				want = append(want, c)
			}
			l.add(i, ne)
		}
		for k := rapid.IntRange(0, 2).Draw(rt, "extras"); k > 0; k-- {
			e := store.Entry{Name: fmt.Sprintf("x%d", k), Kind: store.KindFile}
			want = append(want, e)
			l.extra(e)
		}
		got := l.tree().Entries
		if len(got) != len(want) {
			rt.Fatalf("got %d entries, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				rt.Fatalf("entry %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
	})
}
