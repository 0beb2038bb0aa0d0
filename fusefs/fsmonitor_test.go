package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/internal/fsmtoken"
	"github.com/acyclicfs/acyclicfs/store"
)

// covered reports whether the fsmonitor answer a accounts for a change of
// path p (a flattenDir key: directories end in "/"): p itself is listed,
// or a listed cone ("dir/") holds it.
func covered(a FSMonitorAnswer, p string) bool {
	if a.All {
		return true
	}
	name := strings.TrimSuffix(p, "/")
	for _, q := range a.Paths {
		if q == name || q == name+"/" || strings.HasSuffix(q, "/") && strings.HasPrefix(name, q) {
			return true
		}
	}
	return false
}

// TestFSMonitorCoversChanges: random operations on a mount (writes through
// handles kept open, creates, renames, removals, chmod, symlinks, captures
// and view switches, to the last capture or to an unrelated tree), and at
// random points a fsmonitor query with the last token: every path whose
// type, mode or content differs from what the view showed when that token
// was handed out is in the answer (or the answer is "everything").
func TestFSMonitorCoversChanges(t *testing.T) {
	objs := newFakeObjects(t)
	seed := spec{"a": "lower-a", "x/b": "lower-b", "x/y/": "", "x/y/c": "*lower-c", "l": "->a"}
	root := objs.build(t, seed)
	other := objs.build(t, spec{"a": "other-a", "x/b": "lower-b", "z/q": "q", "x/y/c": "c2"})
	names := []string{"a", "b", "c", "x", "y", "l"}
	dirs := []string{"", "x", "x/y", "z", "b"}

	rapid.Check(t, func(rt *rapid.T) {
		pt := rapid.Bool().Draw(rt, "passthrough")
		m, mnt := mountT(t, objs, root, &mountOpts{passthrough: pt, ptClean: pt && rapid.Bool().Draw(rt, "ptClean")})
		path := func(label string) string {
			return filepath.Join(rapid.SampledFrom(dirs).Draw(rt, label+"dir"), rapid.SampledFrom(names).Draw(rt, label))
		}
		var open []*os.File
		defer func() {
			for _, f := range open {
				f.Close()
			}
		}()
		first := m.FSMonitor("", "")
		if !first.All {
			rt.Fatalf("no token: %+v, want everything", first)
		}
		tok, before := first.Token, flattenDir(t, mnt)
		var lastCapture store.ID
		// touched: the view was changed. From then on switches go to the
		// last capture only: a switch to an unrelated tree under a file
		// changed in its attributes alone gives it the new content without
		// invalidating the kernel's page cache (a fusefs matter, not the
		// hook's), which would make the view read here stale.
		touched := false
		n := rapid.IntRange(1, 40).Draw(rt, "n")
		for i := 0; i < n; i++ {
			op := rapid.IntRange(0, 12).Draw(rt, "op")
			if op <= 8 {
				touched = true
			}
			switch op {
			case 0, 1:
				p := path("p")
				f, err := os.OpenFile(filepath.Join(mnt, p), os.O_WRONLY|os.O_CREATE, 0o644)
				if err != nil {
					continue
				}
				f.WriteAt([]byte(rapid.StringMatching(`[a-z]{1,6}`).Draw(rt, "data")), int64(rapid.IntRange(0, 4).Draw(rt, "off")))
				if rapid.Bool().Draw(rt, "keep open") {
					open = append(open, f)
				} else {
					f.Close()
				}
			case 2:
				if len(open) > 0 {
					f := open[rapid.IntRange(0, len(open)-1).Draw(rt, "handle")]
					f.WriteAt([]byte("W"), 0) // through the open handle (passthrough: not seen by the daemon)
				}
			case 3:
				if len(open) > 0 {
					open[0].Close()
					open = open[1:]
				}
			case 4:
				os.Remove(filepath.Join(mnt, path("rm")))
			case 5:
				os.Rename(filepath.Join(mnt, path("from")), filepath.Join(mnt, path("to")))
			case 6:
				os.Mkdir(filepath.Join(mnt, path("mkdir")), 0o755)
			case 7:
				os.Chmod(filepath.Join(mnt, path("chmod")), os.FileMode(rapid.SampledFrom([]uint32{0o644, 0o755}).Draw(rt, "mode")))
			case 8:
				os.Symlink(rapid.SampledFrom([]string{"a", "t1"}).Draw(rt, "target"), filepath.Join(mnt, path("ln")))
			case 9:
				id, _, err := m.Capture()
				if err != nil {
					rt.Fatal(err)
				}
				lastCapture = id
			case 10:
				to := other
				if touched {
					if lastCapture.IsZero() {
						continue
					}
					to = lastCapture
				}
				if err := m.SwitchView(to); err != nil {
					rt.Fatal(err)
				}
			default:
				ans := m.FSMonitor(tok, "")
				now := flattenDir(t, mnt)
				var missed []string
				for p := range union(before, now) {
					if before[p] != now[p] && !covered(ans, p) {
						missed = append(missed, fmt.Sprintf("%s (%q → %q)", p, before[p], now[p]))
					}
				}
				if len(missed) > 0 {
					sort.Strings(missed)
					rt.Fatalf("changes since %s not reported by %q:\n%s", tok, ans.Paths, strings.Join(missed, "\n"))
				}
				if _, err := fsmtoken.Parse(ans.Token); err != nil {
					rt.Fatal(err)
				}
				tok, before = ans.Token, now
			}
		}
	})
}

func union(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// TestFSMonitorAnswers: exact answers for a few changes, the clean flag,
// and a view switch's tree difference.
func TestFSMonitorAnswers(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"a": "1", "d/b": "2", "d/e/c": "3", ".git/index": "i"})
	next := objs.build(t, spec{"a": "1", "d/b": "2b", "d/e/c": "3", "n/m/f": "4", ".git/index": "j"})
	m, mnt := mountT(t, objs, root, &mountOpts{passthrough: true})
	first := m.FSMonitor("garbage", "")
	tok, err := fsmtoken.Parse(first.Token)
	if err != nil || !first.All || !tok.Clean || tok.Tree != [32]byte(root) {
		t.Fatalf("first answer %+v (%v)", first, err)
	}
	// Changes under .git/ leave the worktree clean and are not reported.
	mustWrite(t, filepath.Join(mnt, ".git/index"), "changed")
	ans := m.FSMonitor(first.Token, "")
	if ans.All || len(ans.Paths) != 0 || ans.Token != first.Token {
		t.Fatalf("after a .git change: %+v, want nothing and the same token", ans)
	}
	if tk, _ := fsmtoken.Parse(m.FSMonitor("", "").Token); !tk.Clean {
		t.Fatal("a change under .git/ made the token dirty")
	}
	mustWrite(t, filepath.Join(mnt, "d/b"), "x")
	if err := os.Remove(filepath.Join(mnt, "a")); err != nil {
		t.Fatal(err)
	}
	ans = m.FSMonitor(first.Token, "")
	if got := strings.Join(ans.Paths, " "); ans.All || got != "a d/b" {
		t.Fatalf("answer %+v, want a d/b", ans)
	}
	if tk, _ := fsmtoken.Parse(ans.Token); tk.Clean {
		t.Fatal("token of a dirty worktree is clean")
	}
	// In a subdirectory: its paths only.
	if sub := m.FSMonitor(first.Token, "d"); sub.All || strings.Join(sub.Paths, " ") != "b" {
		t.Fatalf("answer in d: %+v, want b", sub)
	}
	// A switch to a tree with other content: its difference is reported,
	// file by file for a new directory.
	tok2 := m.FSMonitor("", "").Token
	if err := m.SwitchView(next); err != nil {
		t.Fatal(err)
	}
	ans = m.FSMonitor(tok2, "")
	for _, p := range []string{"d/b", "n", "n/m", "n/m/f"} {
		if !covered(ans, p) {
			t.Fatalf("switch: %q not in %+v", p, ans)
		}
	}
	// Another overlay's clean token: answered by comparing trees.
	clean := fsmtoken.CleanAt([32]byte(root)).String()
	m2, mnt2 := mountT(t, objs, next, nil)
	ans = m2.FSMonitor(clean, "")
	if got := strings.Join(ans.Paths, " "); ans.All || got != "d/b n n/ n/m n/m/f" {
		t.Fatalf("clean token of another tree: %+v", ans)
	}
	// ... and a dirty one with "everything".
	dirty := fsmtoken.Token{Tree: [32]byte(root), Epoch: "other", Seq: 3}.String()
	if ans = m2.FSMonitor(dirty, ""); !ans.All {
		t.Fatalf("dirty token of another overlay: %+v", ans)
	}
	// A directory renamed: everything for older tokens.
	tok3 := m2.FSMonitor("", "").Token
	if err := os.Rename(filepath.Join(mnt2, "n"), filepath.Join(mnt2, "n2")); err != nil {
		t.Fatal(err)
	}
	if ans = m2.FSMonitor(tok3, ""); !ans.All {
		t.Fatalf("after a directory rename: %+v", ans)
	}
	// An open writer is reported while open and after it closes.
	tok4 := m2.FSMonitor("", "").Token
	f, err := os.OpenFile(filepath.Join(mnt2, "a"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ans = m2.FSMonitor(tok4, ""); strings.Join(ans.Paths, " ") != "a" {
		t.Fatalf("writer open: %+v", ans)
	}
	tok5 := ans.Token
	f.Close()
	waitReleased(m2)
	if ans = m2.FSMonitor(tok5, ""); strings.Join(ans.Paths, " ") != "a" {
		t.Fatalf("writer closed: %+v", ans)
	}

	// Changed before a token, changed back after it, then captured and
	// switched to: the trees are equal and the switch resets the file's
	// sequence, so only the record of what was dirty at the switch tells.
	m3, mnt3 := mountT(t, objs, root, nil)
	if err := os.Chmod(filepath.Join(mnt3, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	tok6 := m3.FSMonitor("", "").Token
	if err := os.Chmod(filepath.Join(mnt3, "a"), 0o644); err != nil {
		t.Fatal(err)
	}
	id, _, err := m3.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if err := m3.SwitchView(id); err != nil {
		t.Fatal(err)
	}
	if ans = m3.FSMonitor(tok6, ""); !covered(ans, "a") {
		t.Fatalf("changed back and switched: %+v, want a", ans)
	}

	// Only .git/ changes, each captured and switched to (a session's end):
	// the token comes back as it is, until so many switches lie between
	// that a new one saves diffing them all at every query.
	tok7 := m3.FSMonitor("", "").Token
	for i := 1; i <= fsmReuseSwitches+1; i++ {
		mustWrite(t, filepath.Join(mnt3, ".git/index"), fmt.Sprint(i))
		id, _, err := m3.Capture()
		if err != nil {
			t.Fatal(err)
		}
		if err := m3.SwitchView(id); err != nil {
			t.Fatal(err)
		}
		ans = m3.FSMonitor(tok7, "")
		if ans.All || len(ans.Paths) != 0 || (ans.Token == tok7) != (i <= fsmReuseSwitches) {
			t.Fatalf("after %d switches with .git changes only: %+v (asked with %s)", i, ans, tok7)
		}
	}
}

// BenchmarkFSMonitor: one query for what changed since the last token, in
// a 10,000-file tree with 10 files written in 10 directories since (and
// the whole tree listed, so every directory is loaded): the cost follows
// the changes, not the tree. "switched" adds a capture and view switch
// after the token, so the answer includes a tree difference.
func BenchmarkFSMonitor(b *testing.B) {
	objs := newFakeObjects(b)
	s := spec{}
	for i := 0; i < 10000; i++ {
		s[fmt.Sprintf("d%02d/e%d/f%d", i%100, i%7, i)] = "x"
	}
	root := objs.build(b, s)
	for _, switched := range []bool{false, true} {
		b.Run(fmt.Sprintf("switched=%v", switched), func(b *testing.B) {
			m, mnt := mountT(b, objs, root, &mountOpts{passthrough: true})
			flattenDir(b, mnt) // load every directory
			for i := 0; i < 10; i++ {
				mustWrite(b, filepath.Join(mnt, fmt.Sprintf("d%02d/e%d/f%d", i*10, (i*10)%7, i*10)), "changed")
			}
			tok := m.FSMonitor("", "").Token
			for i := 0; i < 10; i++ {
				mustWrite(b, filepath.Join(mnt, fmt.Sprintf("d%02d/e%d/f%d", i*10+1, (i*10+1)%7, i*10+1)), "changed")
			}
			if switched {
				id, _, err := m.Capture()
				if err != nil {
					b.Fatal(err)
				}
				if err := m.SwitchView(id); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				if ans := m.FSMonitor(tok, ""); ans.All || len(ans.Paths) < 10 {
					b.Fatalf("answer %+v", ans)
				}
			}
		})
	}
}
