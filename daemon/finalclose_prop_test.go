package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
)

// TestFinalCloseProperties drives a served child through random sessions
// (begin, write, end) and parent moves. Whenever no lease is open: the
// window is idle, the child is based on its parent's head, the view shows
// the head, every file a session wrote and every file of the parent is in
// the head, and each final close that had changes published exactly one
// capture.
func TestFinalCloseProperties(t *testing.T) {
	base := t.TempDir()
	iter := 0
	rapid.Check(t, func(rt *rapid.T) {
		iter++
		dir := filepath.Join(base, fmt.Sprint(iter))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			rt.Fatal(err)
		}
		f := newFixtureIn(rt, dir)
		defer f.close()
		parentDir := filepath.Join(dir, "parent")
		write(rt, parentDir, "a.txt", "a\n")
		open := map[sessions.Owner]bool{}
		var written, parentFiles []string
		pending, captures, n := false, 0, 0
		owners := []sessions.Owner{"sid:1", "sid:2", "sid:3"}

		check := func() {
			if len(open) > 0 {
				return
			}
			if k := f.phase(); k != window.PhaseIdle {
				rt.Fatalf("window %s with no lease open", k)
			}
			c, _ := f.m.Get("c")
			p, _ := f.m.Get("p")
			if c.Base != p.Head {
				rt.Fatalf("c based on %s, its parent is at %s", c.Base.Short(), p.Head.Short())
			}
			if f.s.pinned != c.Head {
				rt.Fatalf("view at %s, head %s", f.s.pinned.Short(), c.Head.Short())
			}
			for _, name := range append(slices.Clone(written), parentFiles...) {
				if !f.hasFile(name) {
					rt.Fatalf("%s missing from c's head", name)
				}
			}
			if got := f.kinds()[store.GenCapture]; got != captures {
				rt.Fatalf("%d capture generations, want %d", got, captures)
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"begin": func(rt *rapid.T) {
				o := rapid.SampledFrom(owners).Draw(rt, "owner")
				if open[o] {
					rt.Skip("open already")
				}
				if err := f.s.Begin(o); err != nil {
					rt.Fatal(err)
				}
				open[o] = true
			},
			"write": func(rt *rapid.T) {
				if len(open) == 0 {
					rt.Skip("no session")
				}
				n++
				name := fmt.Sprintf("w%d.txt", n)
				on := f.s.pinned
				root, err := f.m.RootOf(on)
				if err != nil {
					rt.Fatal(err)
				}
				if pending {
					root = f.v.root
				}
				f.v.root = withFile(rt, f.m.Store(), root, name)
				pending = true
				written = append(written, name)
			},
			"end": func(rt *rapid.T) {
				var live []sessions.Owner
				for _, o := range owners {
					if open[o] {
						live = append(live, o)
					}
				}
				if len(live) == 0 {
					rt.Skip("no session")
				}
				o := rapid.SampledFrom(live).Draw(rt, "owner")
				if _, err := f.s.EndLease(o); err != nil {
					rt.Fatal(err)
				}
				delete(open, o)
				if len(open) == 0 && pending {
					pending = false
					captures++
				}
			},
			"parent": func(rt *rapid.T) {
				n++
				name := fmt.Sprintf("p%d.txt", n)
				write(rt, parentDir, name, name+"\n")
				if _, _, err := f.m.Commit(context.Background(), "p", parentDir); err != nil {
					rt.Fatal(err)
				}
				parentFiles = append(parentFiles, name)
			},
			"": func(rt *rapid.T) { check() },
		})
	})
}

// withFile is tree root with a file name added.
func withFile(t tb, st *store.Store, root store.ID, name string) store.ID {
	t.Helper()
	tr, err := st.GetTree(root)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := st.WriteBlobBytes([]byte(name + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	out := &store.Tree{Entries: append(slices.Clone(tr.Entries), store.Entry{Name: name, Kind: store.KindFile, Size: int64(len(name) + 1), ID: blob})}
	out.Sort()
	id, err := st.PutTree(out)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
