package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/store"
)

func mountLinksT(t *testing.T, objs *fakeObjects, root store.ID, links [][]string, stateDir string) (*Mount, string) {
	t.Helper()
	mnt := t.TempDir()
	m, err := MountAt(mnt, Config{Objects: objs, Root: root, Links: links, StateDir: stateDir, FsName: "fusefs-test", Passthrough: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil && !os.IsNotExist(err) {
			t.Logf("unmount: %v", err)
		}
		m.Wait()
	})
	return m, mnt
}

func sameInode(t *testing.T, what string, paths ...string) {
	t.Helper()
	var first syscall.Stat_t
	for i, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if i == 0 {
			first = st
		}
		if st.Ino != first.Ino || int(st.Nlink) != len(paths) {
			t.Fatalf("%s: %s is inode %d with %d links, want inode %d with %d", what, p, st.Ino, st.Nlink, first.Ino, len(paths))
		}
	}
}

// TestLinkGroupsShowAsOneInode: the pinned generation's link groups are
// one inode in the mount (same number, link count, a write through one
// name read through the other); a capture lists them; a replay of the
// overlay (remount, crash recovery) keeps them; a view switch to a
// generation that links two equal files makes them one.
func TestLinkGroupsShowAsOneInode(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"x/a": "same", "y/z/b": "same", "c": "same", "other": "o"})
	links := [][]string{{"x/a", "y/z/b"}}
	state := t.TempDir()
	m, mnt := mountLinksT(t, objs, root, links, state)
	p := func(s string) string { return filepath.Join(mnt, s) }
	sameInode(t, "pinned group", p("x/a"), p("y/z/b"))
	sameInode(t, "a file outside the group", p("c"))
	mustWrite(t, p("y/z/b"), "written via b")
	if got := mustRead(t, p("x/a")); got != "written via b" {
		t.Fatalf("read via a: %q", got)
	}
	id, gotLinks, changed, err := m.CaptureLinks()
	if err != nil || !changed {
		t.Fatalf("capture: %v %v", changed, err)
	}
	if !store.EqualLinks(gotLinks, links) {
		t.Fatalf("captured links %v, want %v", gotLinks, links)
	}
	if f := objs.flatten(t, id); f["x/a"] != "file:written via b" || f["y/z/b"] != "file:written via b" {
		t.Fatalf("captured tree: %v", f)
	}
	if err := m.SwitchViewLinks(id, gotLinks); err != nil {
		t.Fatal(err)
	}
	sameInode(t, "after the switch", p("x/a"), p("y/z/b"))

	// A new link across directories, kept by a replay of the overlay.
	if err := os.Link(p("other"), p("x/other2")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, p("x/other2"), "o2")
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	m.Wait()
	rid, rlinks, changed, _, err := RecoverCaptureLinks(state, objs, id, gotLinks)
	want := [][]string{{"other", "x/other2"}, {"x/a", "y/z/b"}}
	if err != nil || !changed || !store.EqualLinks(rlinks, want) {
		t.Fatalf("recover capture: %v %v %v, want links %v", rlinks, changed, err, want)
	}
	if f := objs.flatten(t, rid); f["other"] != "file:o2" || f["x/other2"] != "file:o2" {
		t.Fatalf("recovered tree: %v", f)
	}
	_, mnt2 := mountLinksT(t, objs, id, gotLinks, state)
	sameInode(t, "replayed group", filepath.Join(mnt2, "x/a"), filepath.Join(mnt2, "y/z/b"))
	sameInode(t, "replayed new link", filepath.Join(mnt2, "other"), filepath.Join(mnt2, "x/other2"))

	// A view switch to a generation that links two equal files.
	m3, mnt3 := mountLinksT(t, objs, root, nil, t.TempDir())
	if _, err := os.Stat(filepath.Join(mnt3, "c")); err != nil {
		t.Fatal(err)
	}
	if err := m3.SwitchViewLinks(root, [][]string{{"c", "y/z/b"}}); err != nil {
		t.Fatal(err)
	}
	sameInode(t, "linked by a switch", filepath.Join(mnt3, "c"), filepath.Join(mnt3, "y/z/b"))
	sameInode(t, "not linked by the switch", filepath.Join(mnt3, "x/a"))
}

// BenchmarkOpenWithLinkGroups: pinning a generation with 1,000 link groups
// of two names in different directories (100 directories of 20 files):
// the directories holding them are loaded and the pairs merged.
// ReportMetric capture-ns: the capture of the same table listing the groups
// after one file changed.
func BenchmarkOpenWithLinkGroups(b *testing.B) {
	objs := newFakeObjects(b)
	sp := spec{}
	var links [][]string
	for i := range 1000 {
		p1 := fmt.Sprintf("d%02d/f%04d", i%50, i)
		p2 := fmt.Sprintf("e%02d/g%04d", i%50, i)
		sp[p1], sp[p2] = fmt.Sprint(i), fmt.Sprint(i)
		links = append(links, []string{p1, p2})
	}
	root := objs.build(b, sp)
	links = store.NormalizeLinks(links)
	var capNs int64
	for b.Loop() {
		ov, err := openOverlay(b.TempDir(), objs, root, links)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		ov.mu.Lock()
		d := ov.root.children["d00"]
		ov.touch(d.children["f0000"])
		ov.mu.Unlock()
		b.StartTimer()
		start := time.Now()
		_, got, _, err := ov.capture()
		capNs += time.Since(start).Nanoseconds()
		if err != nil || len(got) != 1000 {
			b.Fatalf("capture: %d groups, %v", len(got), err)
		}
	}
	b.ReportMetric(float64(capNs)/float64(b.N), "capture-ns/op")
}

// TestLinkGroupsSurviveReplayAfterRenames: a rename of a name of a linked
// file, or of a directory holding one, followed by a crash (the overlay
// replayed from its state directory) keeps the group under the new paths.
func TestLinkGroupsSurviveReplayAfterRenames(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"a": "shared", "d/b": "shared", "d/e/": "", "c": "c"})
	links := [][]string{{"a", "d/b"}}
	for _, tc := range []struct{ from, to string }{{"a", "n"}, {"d", "n"}, {"d/b", "d/e/b2"}} {
		m, mnt := mountLinksT(t, objs, root, links, t.TempDir())
		if err := os.Rename(filepath.Join(mnt, tc.from), filepath.Join(mnt, tc.to)); err != nil {
			t.Fatal(err)
		}
		waitReleased(m)
		_, want, _, err := m.CaptureLinks()
		if err != nil || len(want) != 1 {
			t.Fatalf("mv %s %s: live capture: %v %v", tc.from, tc.to, want, err)
		}
		_, got, _, _, err := RecoverCaptureLinks(copyStateDir(t, m.cfg.StateDir), objs, root, links)
		if err != nil || !store.EqualLinks(got, want) {
			t.Fatalf("mv %s %s: recovered links %v (%v), want %v", tc.from, tc.to, got, err, want)
		}
	}
}

// TestModelLinksAcrossRemounts runs random sequences of namespace and data
// operations, hard links among them, on a mount and on a native directory,
// and, at random points, ends the mount's session the way the daemon does:
// capture (with the link groups), unmount, and mount the captured
// generation afresh — or recover the capture from a copy of the state
// directory as a killed daemon leaves it. Results, errnos, link counts and
// which names share an inode must match native throughout.
func TestModelLinksAcrossRemounts(t *testing.T) {
	objs := newFakeObjects(t)
	seed := spec{"a": "shared", "d/b": "shared", "d/e/": "", "c": "c", "l": "->c"}
	root := objs.build(t, seed)
	seedLinks := [][]string{{"a", "d/b"}}
	names := []string{"a", "b", "c", "l", "n", "d", "e"}
	dirs := []string{"", "d", "d/e", "f"}

	rapid.Check(t, func(rt *rapid.T) {
		native := t.TempDir()
		materialize(t, native, spec{"a": "shared", "d/e/": "", "c": "c", "l": "->c"})
		if err := os.Link(filepath.Join(native, "a"), filepath.Join(native, "d/b")); err != nil {
			rt.Fatal(err)
		}
		pinned, links := root, seedLinks
		mount := func() (*Mount, string) {
			mnt := t.TempDir()
			m, err := MountAt(mnt, Config{Objects: objs, Root: pinned, Links: links, StateDir: t.TempDir(), FsName: "fusefs-test", Passthrough: true})
			if err != nil {
				rt.Fatal(err)
			}
			return m, mnt
		}
		m, mnt := mount()
		defer func() {
			if err := m.Unmount(); err != nil {
				rt.Error(err)
			}
			m.Wait()
		}()
		path := func(label string) string {
			return filepath.Join(rapid.SampledFrom(dirs).Draw(rt, label+"dir"), rapid.SampledFrom(names).Draw(rt, label))
		}
		n := rapid.IntRange(1, 30).Draw(rt, "n")
		for i := 0; i < n; i++ {
			var op func(base string) (string, error)
			var desc string
			switch rapid.IntRange(0, 10).Draw(rt, "op") {
			case 0, 1:
				p := path("p")
				data := rapid.StringMatching(`[a-z]{0,6}`).Draw(rt, "data")
				fl := rapid.SampledFrom([]int{os.O_APPEND, os.O_TRUNC}).Draw(rt, "flag")
				desc = fmt.Sprintf("write %s %q %d", p, data, fl)
				op = func(b string) (string, error) {
					f, err := os.OpenFile(filepath.Join(b, p), os.O_WRONLY|os.O_CREATE|fl|noBlockOnFIFO(b, p), 0o644)
					if err != nil {
						return "", err
					}
					defer f.Close()
					_, err = f.WriteString(data)
					return "", err
				}
			case 2, 3:
				from, to := path("from"), path("to")
				desc = fmt.Sprintf("link %s %s", from, to)
				op = func(b string) (string, error) { return "", syscall.Link(filepath.Join(b, from), filepath.Join(b, to)) }
			case 4:
				p := path("p")
				desc = "unlink " + p
				op = func(b string) (string, error) { return "", syscall.Unlink(filepath.Join(b, p)) }
			case 5:
				from, to := path("from"), path("to")
				desc = fmt.Sprintf("rename %s %s", from, to)
				op = func(b string) (string, error) {
					return "", syscall.Rename(filepath.Join(b, from), filepath.Join(b, to))
				}
			case 6:
				p := path("p")
				desc = "mkdir " + p
				op = func(b string) (string, error) { return "", syscall.Mkdir(filepath.Join(b, p), 0o755) }
			case 7:
				p := path("p")
				kind := rapid.IntRange(0, 1).Draw(rt, "kind")
				desc = fmt.Sprintf("mkfifo/symlink %d %s", kind, p)
				op = func(b string) (string, error) {
					if kind == 0 {
						return "", syscall.Mknod(filepath.Join(b, p), syscall.S_IFIFO|0o644, 0)
					}
					return "", syscall.Symlink("c", filepath.Join(b, p))
				}
			case 8:
				p, q := path("p"), path("q")
				desc = fmt.Sprintf("stat %s %s", p, q)
				op = func(b string) (string, error) {
					var st, st2 syscall.Stat_t
					if err := syscall.Lstat(filepath.Join(b, p), &st); err != nil {
						return "", err
					}
					s := fmt.Sprintf("mode=%o size=%d", st.Mode, st.Size)
					if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
						s += fmt.Sprintf(" nlink=%d", st.Nlink)
					}
					if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
						c, err := os.ReadFile(filepath.Join(b, p))
						if err != nil {
							return "", err
						}
						s += " " + string(c)
					}
					if syscall.Lstat(filepath.Join(b, q), &st2) == nil {
						s += fmt.Sprintf(" same-as-%s=%v", q, st.Ino == st2.Ino)
					}
					return s, nil
				}
			case 9, 10:
				crash := rapid.Bool().Draw(rt, "crash")
				desc = fmt.Sprintf("end the session (crash=%v)", crash)
				op = func(b string) (string, error) {
					if b == native {
						return "", nil
					}
					waitReleased(m)
					var id store.ID
					var got [][]string
					var err error
					if crash {
						id, got, _, _, err = RecoverCaptureLinks(copyStateDir(t, m.cfg.StateDir), objs, pinned, links)
					} else {
						id, got, _, err = m.CaptureLinks()
					}
					if err != nil {
						return "", err
					}
					if err := m.Unmount(); err != nil {
						return "", err
					}
					m.Wait()
					pinned, links = id, got
					m, mnt = mount()
					return "", nil
				}
			}
			wantRes, wantErr := op(native)
			gotRes, gotErr := op(mnt)
			if errnoOf(wantErr) != errnoOf(gotErr) || wantRes != gotRes {
				rt.Fatalf("%s: native (%q, %v) mount (%q, %v)", desc, wantRes, wantErr, gotRes, gotErr)
			}
		}
		if d := diffMaps(flattenDir(t, mnt), flattenDir(t, native)); d != "" {
			rt.Fatalf("final trees differ (native vs mount):\n%s", d)
		}
	})
}
