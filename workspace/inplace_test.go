package workspace

import (
	"context"
	"maps"
	"os"
	"path"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"
)

// drawTree draws a small tree of files: paths over a tiny alphabet so that
// before and after often share, replace and retype paths (file ↔ dir).
func drawTree(rt *rapid.T, label string) map[string]string {
	return disjointPaths(rapid.MapOfN(rapid.StringMatching(`[a-c]{1,2}(/[a-c]{1,2}){0,2}`), rapid.StringMatching(`[xy]{0,3}`), 0, 10).Draw(rt, label))
}

// TestInPlaceMaterializeMatchesTarget: for random before/after trees, a
// fork's commit landed into an in-place workspace leaves the directory
// exactly equal to the fork's tree (removals, retyped paths, new and
// emptied directories included); a second sync finds nothing external;
// and the first generation still exports as the directory was before
// (its references were resolved to preimages).
func TestInPlaceMaterializeMatchesTarget(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := openTest(t)
		dir := filepath.Join(t.TempDir(), "work")
		if err := os.Mkdir(dir, 0o755); err != nil {
			rt.Fatal(err)
		}
		before := drawTree(rt, "before")
		write(t, dir, before)
		wantBefore := snapshot(t, dir)
		first, err := m.CreateInPlace("ws", dir)
		if err != nil {
			rt.Fatal(err)
		}
		if _, err := m.Fork("ws", "agent", ""); err != nil {
			rt.Fatal(err)
		}
		edit := filepath.Join(t.TempDir(), "edit")
		if err := os.Mkdir(edit, 0o755); err != nil {
			rt.Fatal(err)
		}
		write(t, edit, drawTree(rt, "after"))
		if _, _, err := m.Commit(context.Background(), "agent", edit); err != nil {
			rt.Fatal(err)
		}
		if _, err := m.Land(context.Background(), "agent", RebaseOptions{}); err != nil {
			rt.Fatal(err)
		}
		if got, want := snapshot(t, dir), snapshot(t, edit); !maps.Equal(got, want) {
			rt.Fatalf("directory after land:\n got %v\nwant %v", got, want)
		}
		w, _ := m.Get("ws")
		res, err := m.SyncInPlace(context.Background(), "ws")
		if err != nil {
			rt.Fatal(err)
		}
		if w2, _ := m.Get("ws"); res.Outcome != OutcomeCurrent || w2.Head != w.Head {
			rt.Fatalf("a second sync found external changes: %+v", res)
		}
		old := filepath.Join(t.TempDir(), "old")
		if _, err := m.Export(context.Background(), first, old, false); err != nil {
			rt.Fatal(err)
		}
		if got := snapshot(t, old); !maps.Equal(got, wantBefore) {
			rt.Fatalf("the first generation after materialization:\n got %v\nwant %v", got, wantBefore)
		}
	})
}

// TestInPlaceExternalEditsMergeWithLanding: another program edits files
// the fork left alone, and adds new ones, while the fork's commit waits to
// land. After the land the directory holds both sides' changes, nothing
// of either is lost, and no conflict is reported.
func TestInPlaceExternalEditsMergeWithLanding(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := openTest(t)
		dir := filepath.Join(t.TempDir(), "work")
		if err := os.Mkdir(dir, 0o755); err != nil {
			rt.Fatal(err)
		}
		before := drawTree(rt, "before")
		write(t, dir, before)
		if _, err := m.CreateInPlace("ws", dir); err != nil {
			rt.Fatal(err)
		}
		if _, err := m.Fork("ws", "agent", ""); err != nil {
			rt.Fatal(err)
		}
		after := drawTree(rt, "after")
		edit := filepath.Join(t.TempDir(), "edit")
		if err := os.Mkdir(edit, 0o755); err != nil {
			rt.Fatal(err)
		}
		write(t, edit, after)
		if _, _, err := m.Commit(context.Background(), "agent", edit); err != nil {
			rt.Fatal(err)
		}
		// The other program: rewrite files both trees have unchanged, and
		// add files under a name neither tree uses.
		want := maps.Clone(after)
		for p, c := range before {
			if ac, ok := after[p]; ok && ac == c && rapid.Bool().Draw(rt, "edit "+p) {
				if err := os.WriteFile(filepath.Join(dir, p), []byte(c+"-ext"), 0o644); err != nil {
					rt.Fatal(err)
				}
				want[p] = c + "-ext"
			}
		}
		if rapid.Bool().Draw(rt, "add") {
			write(t, dir, map[string]string{"zz/new": "ext"})
			want["zz/new"] = "ext"
		}
		res, err := m.Land(context.Background(), "agent", RebaseOptions{})
		if err != nil {
			rt.Fatal(err)
		}
		if cs, _ := m.Conflicts("ws"); len(cs) > 0 {
			rt.Fatalf("conflicts for disjoint edits: %v (land %+v)", cs, res)
		}
		wantDir := filepath.Join(t.TempDir(), "want")
		if err := os.Mkdir(wantDir, 0o755); err != nil {
			rt.Fatal(err)
		}
		write(t, wantDir, want)
		if got, w := snapshot(t, dir), snapshot(t, wantDir); !maps.Equal(got, w) {
			rt.Fatalf("directory after land:\n got %v\nwant %v", got, w)
		}
	})
}

// TestContextLandingReachesInPlaceRoot: a context whose root is an
// in-place workspace; the landing of a forked context writes the fork's
// change into the directory.
func TestContextLandingReachesInPlaceRoot(t *testing.T) {
	m := openTest(t)
	dir := filepath.Join(t.TempDir(), "work")
	write(t, dir, map[string]string{"a": "old", "keep": "k"})
	if _, err := m.CreateInPlace("ws", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateContext("p", []ContextRoot{{Workspace: "ws"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ForkContext("p", "c"); err != nil {
		t.Fatal(err)
	}
	edit := filepath.Join(t.TempDir(), "edit")
	write(t, edit, map[string]string{"a": "new", "keep": "k"})
	if _, _, err := m.Commit(context.Background(), "c.ws", edit); err != nil {
		t.Fatal(err)
	}
	if _, err := m.LandContext("c"); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, dir); !maps.Equal(got, map[string]string{"a": "new", "keep": "k"}) {
		t.Fatalf("directory after the context landing: %v", got)
	}
}

// TestInPlaceDetectionMemoSeesEdits: detection remembers directories whose
// files it found unchanged and skips their files while DIR's listing is
// the same; an edit made afterwards by another program (content, a new
// name, a removal) is still taken in by the next sync, and DIR and the
// head agree.
func TestInPlaceDetectionMemoSeesEdits(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := openTest(t)
		dir := filepath.Join(t.TempDir(), "work")
		before := map[string]string{"a/x": "1", "a/y": "2", "b/z": "3", "b/c/w": "4", "top": "5"}
		write(t, dir, before)
		if _, err := m.CreateInPlace("ws", dir); err != nil {
			rt.Fatal(err)
		}
		// A landed change makes acyclicfs store the directories it touched
		// and write the shadow, as a lease end does.
		if _, err := m.Fork("ws", "agent", ""); err != nil {
			rt.Fatal(err)
		}
		after := maps.Clone(before)
		after["a/x"], after["b/c/w"] = "1 changed", "4 changed"
		edit := filepath.Join(t.TempDir(), "edit")
		write(t, edit, after)
		if _, _, err := m.Commit(context.Background(), "agent", edit); err != nil {
			rt.Fatal(err)
		}
		if _, err := m.Land(context.Background(), "agent", RebaseOptions{}); err != nil {
			rt.Fatal(err)
		}
		hits := m.ip.detect.hits.Load()
		for range 2 {
			if _, err := m.SyncInPlace(context.Background(), "ws"); err != nil {
				rt.Fatal(err)
			}
		}
		if m.ip.detect.hits.Load() == hits {
			rt.Fatal("the second sync over an unchanged DIR used no remembered directory")
		}
		// Another program edits DIR.
		want := maps.Clone(after)
		paths := []string{"a/x", "a/y", "b/z", "b/c/w", "top"}
		p := rapid.SampledFrom(paths).Draw(rt, "path")
		switch rapid.IntRange(0, 2).Draw(rt, "how") {
		case 0:
			want[p] = want[p] + "+ext"
		case 1:
			delete(want, p)
			if err := os.Remove(filepath.Join(dir, p)); err != nil {
				rt.Fatal(err)
			}
		case 2:
			p = path.Join(path.Dir(p), "new")
			want[p] = "ext"
		}
		if v, ok := want[p]; ok {
			if err := os.WriteFile(filepath.Join(dir, p), []byte(v), 0o644); err != nil {
				rt.Fatal(err)
			}
		}
		if _, err := m.SyncInPlace(context.Background(), "ws"); err != nil {
			rt.Fatal(err)
		}
		w, err := m.Get("ws")
		if err != nil {
			rt.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "out")
		if _, err := m.Export(context.Background(), w.Head, out, false); err != nil {
			rt.Fatal(err)
		}
		got, inDir := snapshot(t, out), snapshot(t, dir)
		if !maps.Equal(got, inDir) {
			rt.Fatalf("head after the external edit of %s:\n got %v\n DIR %v", p, got, inDir)
		}
		for q, c := range want {
			if got[q] != c {
				rt.Fatalf("head after the external edit of %s: %s = %q, want %q", p, q, got[q], c)
			}
		}
	})
}
