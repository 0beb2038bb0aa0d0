package workspace

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// drawTreeLinks is drawTree with symlinks: a value "->T" is a symlink to T.
func drawTreeLinks(rt *rapid.T, label string) map[string]string {
	return disjointPaths(rapid.MapOfN(rapid.StringMatching(`[a-c]{1,2}(/[a-c]{1,2}){0,2}`), rapid.StringMatching(`->[xy/]{1,3}|[xy]{0,3}`), 0, 10).Draw(rt, label))
}

// writeLinks writes files, and symlinks for "->T" values.
func writeLinks(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(c, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(c), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestInPlaceRollForwardAfterAnyCrash: a materialization interrupted after
// any number of its edits (or after all of them, synced, before the state
// was recorded) is rolled forward by the next sync into exactly the target
// tree — directories retyped into files and symlinks included, whose
// children's removals are then replayed under a path that is no longer a
// directory — and a second roll forward changes nothing.
func TestInPlaceRollForwardAfterAnyCrash(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := openTest(t)
		dir := filepath.Join(t.TempDir(), "work")
		target := filepath.Join(t.TempDir(), "target")
		for _, d := range []string{dir, target} {
			if err := os.Mkdir(d, 0o755); err != nil {
				rt.Fatal(err)
			}
		}
		writeLinks(t, dir, drawTreeLinks(rt, "before"))
		writeLinks(t, target, drawTreeLinks(rt, "after"))
		if _, err := m.CreateInPlace("ws", dir); err != nil {
			rt.Fatal(err)
		}
		to, _, err := m.Create(context.Background(), "target", target)
		if err != nil {
			rt.Fatal(err)
		}
		st, _, _, err := m.ip.loadInPlace("ws")
		if err != nil {
			rt.Fatal(err)
		}
		fromRoot, err := m.rootOf(st.Materialized)
		if err != nil {
			rt.Fatal(err)
		}
		toRoot, err := m.rootOf(to)
		if err != nil {
			rt.Fatal(err)
		}
		changes, err := rebase.Diff(merger{m.st}, fromRoot, toRoot)
		if err != nil {
			rt.Fatal(err)
		}
		edits, err := m.ip.planEdits(fromRoot, toRoot, changes)
		if err != nil {
			rt.Fatal(err)
		}
		j := matJournal{Version: 1, Op: newOperationID(), Workspace: "ws", Dir: st.Dir, Base: st.Base,
			From: st.Materialized, To: to, Phase: "prepared", Edits: edits}
		if _, err := m.cs.CompareAndSwap(familyMaterialize, "ws", 0, j); err != nil {
			rt.Fatal(err)
		}
		// done edits applied before the crash; len+1: all of them by
		// applyEdits (temporaries, renames, the wave of fsyncs).
		done := rapid.IntRange(0, len(edits)+1).Draw(rt, "edits before the crash")
		if done > len(edits) {
			if err := m.ip.applyEdits(&j); err != nil {
				rt.Fatalf("apply: %v", err)
			}
		} else {
			d, release, err := m.st.OpenBase(j.Base)
			if err != nil {
				rt.Fatal(err)
			}
			for i := range done {
				if err := m.ip.applyEdit(d, &j, i); err != nil {
					release()
					rt.Fatalf("edit %d %+v: %v", i, edits[i], err)
				}
			}
			release()
		}
		if err := m.ip.finishMaterialization("ws"); err != nil {
			rt.Fatalf("roll forward after %d of %d edits: %v", done, len(edits), err)
		}
		want := snapshot(t, target)
		if got := snapshot(t, dir); !maps.Equal(got, want) {
			rt.Fatalf("directory after the roll forward:\n got %v\nwant %v", got, want)
		}
		if err := m.ip.finishMaterialization("ws"); err != nil {
			rt.Fatalf("a second roll forward: %v", err)
		}
		if got := snapshot(t, dir); !maps.Equal(got, want) {
			rt.Fatalf("directory after a second roll forward:\n got %v\nwant %v", got, want)
		}
	})
}

// TestMaterializeSpecialFiles: DIR's fifos are workspace entries like
// its files. A directory the new tree puts at a fifo's name replaces the
// fifo; a directory the tree drops goes with the fifo in it; a fifo the
// tree adds is made; and DIR holding them is no external change.
func TestMaterializeSpecialFiles(t *testing.T) {
	m := openTest(t)
	dir := filepath.Join(t.TempDir(), "work")
	write(t, dir, map[string]string{"keep": "k", "sub/f": "x"})
	if err := unix.Mkfifo(filepath.Join(dir, "p"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "sub", "q"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateInPlace("ws", dir); err != nil {
		t.Fatal(err)
	}
	w, err := m.Get("ws")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := m.entryAt(mustRoot(t, m, w.Head), "sub/q"); err != nil || e == nil || e.Kind != store.KindFIFO {
		t.Fatalf("sub/q in the in-place head: %+v, %v; want a FIFO entry", e, err)
	}
	if _, err := m.Fork("ws", "agent", ""); err != nil {
		t.Fatal(err)
	}
	// The agent's tree: sub dropped, a directory p with a file in it, a
	// new fifo.
	edit := filepath.Join(t.TempDir(), "edit")
	write(t, edit, map[string]string{"keep": "k", "p/in": "y"})
	if err := unix.Mkfifo(filepath.Join(edit, "newpipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Commit(context.Background(), "agent", edit); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Land(context.Background(), "agent", RebaseOptions{}); err != nil {
		t.Fatalf("land: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "p", "in")); err != nil || string(b) != "y" {
		t.Fatalf("p/in = %q, %v; want the directory that replaced the fifo", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Fatalf("sub should be gone with its fifo: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "newpipe"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Fatalf("newpipe: %v (mode %o); want the fifo made", err, st.Mode)
	}
	// Nothing is left pending, and a later sync finds DIR as written.
	if p, err := m.PendingMaterializations(); err != nil || len(p) != 0 {
		t.Fatalf("pending: %v %v", p, err)
	}
	res, err := m.SyncInPlace(context.Background(), "ws")
	if err != nil || res.Outcome != OutcomeCurrent {
		t.Fatalf("sync after: %+v, %v; want current", res, err)
	}
}

func mustRoot(t *testing.T, m *Manager, gen store.ID) store.ID {
	t.Helper()
	root, err := m.rootOf(gen)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRecoverLeavesAStuckMaterializationToItsWorkspace: a materialization
// journal that cannot be rolled forward (DIR holds a file where the plan
// makes a directory) does not make the store unusable: Recover warns and
// goes on, status lists the journal, and the workspace's own sync reports
// the error.
func TestRecoverLeavesAStuckMaterializationToItsWorkspace(t *testing.T) {
	m := openTest(t)
	var warned []string
	m.opt.Warn = func(s string) { warned = append(warned, s) }
	dir := filepath.Join(t.TempDir(), "work")
	write(t, dir, map[string]string{"a": "A"})
	if _, err := m.CreateInPlace("ws", dir); err != nil {
		t.Fatal(err)
	}
	to, _, err := m.Create(context.Background(), "other", dir)
	if err != nil {
		t.Fatal(err)
	}
	st, _, _, err := m.ip.loadInPlace("ws")
	if err != nil {
		t.Fatal(err)
	}
	j := matJournal{Version: 1, Op: newOperationID(), Workspace: "ws", Dir: st.Dir, Base: st.Base,
		From: st.Materialized, To: to, Phase: "prepared", Edits: []matEdit{{Op: "mkdir", Path: "a"}}}
	if _, err := m.cs.CompareAndSwap(familyMaterialize, "ws", 0, j); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Recover(); err != nil {
		t.Fatalf("recover: %v", err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "materialization of ws") || !strings.Contains(warned[0], "a file is there") {
		t.Errorf("warnings: %q", warned)
	}
	if p, err := m.PendingMaterializations(); err != nil || len(p) != 1 {
		t.Errorf("pending: %v %v", p, err)
	}
	if _, err := m.SyncInPlace(context.Background(), "ws"); err == nil || !strings.Contains(err.Error(), "a file is there") {
		t.Errorf("sync of the workspace: %v, want the roll forward's error", err)
	}
	if err := m.ip.dropMaterialization("ws"); err != nil { // leave fsck a clean store
		t.Fatal(err)
	}
}

// TestMaterializeDeeperThanPathMax: a tree deeper than PATH_MAX bytes (a
// mount builds one a component at a time; import refuses one) is
// materialized into an in-place directory and fingerprinted, not refused
// half way with a store that cannot record what it wrote.
func TestMaterializeDeeperThanPathMax(t *testing.T) {
	m := openTest(t)
	dir := filepath.Join(t.TempDir(), "work")
	write(t, dir, map[string]string{"a": "A"})
	if _, err := m.CreateInPlace("ws", dir); err != nil {
		t.Fatal(err)
	}
	to, deep := deepGeneration(t, m)
	st, rev, _, err := m.ip.loadInPlace("ws")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ip.materializeInPlace("ws", st, rev, to); err != nil {
		t.Fatalf("materialize a deep tree: %v", err)
	}
	d, err := dirfd.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	readDeep(t, d, deep)
	if p, err := m.PendingMaterializations(); err != nil || len(p) != 0 {
		t.Fatalf("pending: %v %v", p, err)
	}
}

// TestExportDeeperThanPathMax: export writes a tree deeper than PATH_MAX
// bytes (including its staging directory's longer prefix).
func TestExportDeeperThanPathMax(t *testing.T) {
	m := openTest(t)
	gen, deep := deepGeneration(t, m)
	out := filepath.Join(t.TempDir(), "out")
	if _, err := m.Export(context.Background(), gen, out, false); err != nil {
		t.Fatalf("export: %v", err)
	}
	d, err := dirfd.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	readDeep(t, d, deep)
}

// deepGeneration stores a generation holding a (content "A") and leaf
// ("deep") 20 levels of 250-byte names down, and returns it and leaf's
// path.
func deepGeneration(t *testing.T, m *Manager) (store.ID, string) {
	t.Helper()
	name := strings.Repeat("n", 250)
	must := func(id store.ID, err error) store.ID {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	leafID := must(m.st.WriteBlobBytes([]byte("deep")))
	aID := must(m.st.WriteBlobBytes([]byte("A")))
	sub := must(m.st.PutTree(&store.Tree{Entries: []store.Entry{{Name: "leaf", Kind: store.KindFile, Size: 4, Mtime: 1e18, ID: leafID}}}))
	for range 19 {
		sub = must(m.st.PutTree(&store.Tree{Entries: []store.Entry{{Name: name, Kind: store.KindDir, ID: sub}}}))
	}
	root := must(m.st.PutTree(&store.Tree{Entries: []store.Entry{{Name: "a", Kind: store.KindFile, Size: 1, Mtime: 1e18, ID: aID}, {Name: name, Kind: store.KindDir, ID: sub}}}))
	gen := must(m.st.PutGeneration(&store.Generation{Root: root, Workspace: "ws", Kind: store.GenCreate, Time: 1}))
	return gen, strings.Repeat(name+"/", 20) + "leaf"
}

// readDeep checks that d holds rel with content "deep".
func readDeep(t *testing.T, d *dirfd.Dir, rel string) {
	t.Helper()
	f, err := d.OpenFile(rel, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("the deep file: %v", err)
	}
	defer f.Close()
	b := make([]byte, 8)
	if n, _ := f.Read(b); string(b[:n]) != "deep" {
		t.Fatalf("deep file holds %q", b[:n])
	}
}
