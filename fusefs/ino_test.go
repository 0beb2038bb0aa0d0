package fusefs

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/internal/pathino"

	"github.com/acyclicfs/acyclicfs/store"
)

// statKey is what git's index compares of a file, as a mount shows it.
type statKey struct {
	ino, size, mtime, ctime int64
	mode                    uint32
}

// statAll lstats paths under mnt in the given order.
func statAll(t *rapid.T, mnt string, paths []string) map[string]statKey {
	out := map[string]statKey{}
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(mnt, p), &st); err != nil {
			t.Fatalf("lstat %s: %v", p, err)
		}
		out[p] = statKey{ino: int64(st.Ino), size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), mode: st.Mode}
	}
	return out
}

// livePaths lists every path below mnt.
func livePaths(t *rapid.T, mnt string) []string {
	var out []string
	err := filepath.Walk(mnt, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != mnt {
			out = append(out, strings.TrimPrefix(p, mnt+"/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func mountFor(t *testing.T, rt *rapid.T, objs *fakeObjects, root store.ID) (*Mount, string) {
	mnt := t.TempDir()
	m, err := MountAt(mnt, Config{Objects: objs, Root: root, StateDir: t.TempDir(), FsName: "fusefs-test"})
	if err != nil {
		rt.Fatal(err)
	}
	return m, mnt
}

func unmountOK(rt *rapid.T, m *Mount) {
	if err := m.Unmount(); err != nil {
		rt.Error(err)
	}
	m.Wait()
}

// TestStableInodeNumbers: the stat git's index compares (inode number,
// size, mtime, ctime, mode) of every path is the same in any fresh mount
// of a tree, whatever order names are looked up in, and a path's number
// depends on the path alone, so it is the same in a mount of another tree
// (a later capture) that holds the path. While tools create, rename, link
// and unlink, no two live names of a mount share a number unless they are
// links of one file.
func TestStableInodeNumbers(t *testing.T) {
	objs := newFakeObjects(t)
	names := []string{"a", "b", "c", "d"}
	rapid.Check(t, func(rt *rapid.T) {
		s := spec{}
		for _, p := range rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "d/a", "d/b", "d/e/c", "c/a", "c/d"}), 1, 7, func(s string) string { return s }).Draw(rt, "files") {
			s[p] = "content of " + p
		}
		for p := range s { // a path that is a file cannot hold others
			for q := range s {
				if strings.HasPrefix(q, p+"/") {
					delete(s, p)
				}
			}
		}
		root := objs.build(t, s)

		ma, a := mountFor(t, rt, objs, root)
		defer unmountOK(rt, ma)
		mb, b := mountFor(t, rt, objs, root)
		defer unmountOK(rt, mb)
		paths := livePaths(rt, a)
		order := rapid.Permutation(paths).Draw(rt, "lookup order")
		sa, sb := statAll(rt, a, paths), statAll(rt, b, order)
		for _, p := range paths {
			if sa[p] != sb[p] {
				rt.Fatalf("%s: %+v in one mount, %+v in another", p, sa[p], sb[p])
			}
			// The number is the one an index written outside any mount
			// (create --from-git) records for the path.
			if want := pathino.Of(p); uint64(sa[p].ino) != want {
				rt.Fatalf("%s: inode %d, pathino.Of says %d", p, sa[p].ino, want)
			}
		}

		// Tools at work in a: identity is which file a name is a link of.
		ident := map[string]int{}
		for i, p := range paths {
			ident[p] = i
		}
		next := len(paths)
		n := rapid.IntRange(1, 12).Draw(rt, "ops")
		for i := 0; i < n; i++ {
			dir := rapid.SampledFrom([]string{"", "d", "c", "n"}).Draw(rt, "dir")
			p := filepath.Join(dir, rapid.SampledFrom(names).Draw(rt, "name"))
			q := filepath.Join(rapid.SampledFrom([]string{"", "d", "c"}).Draw(rt, "dir2"), rapid.SampledFrom(names).Draw(rt, "name2"))
			var err error
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0: // create (or rewrite)
				if _, ok := ident[p]; !ok {
					if err = os.WriteFile(filepath.Join(a, p), []byte("new"), 0o644); err == nil {
						ident[p], next = next, next+1
					}
				}
			case 1: // rename a file over whatever is not a directory
				if fi, e := os.Lstat(filepath.Join(a, p)); e == nil && !fi.IsDir() {
					if fq, e := os.Lstat(filepath.Join(a, q)); e != nil || !fq.IsDir() {
						// Two names of one file: rename(2) does nothing.
						sameFile := false
						if iq, ok := ident[q]; ok && iq == ident[p] {
							sameFile = true
						}
						if err = os.Rename(filepath.Join(a, p), filepath.Join(a, q)); err == nil && p != q && !sameFile {
							ident[q] = ident[p]
							delete(ident, p)
						}
					}
				}
			case 2: // hard link
				if fi, e := os.Lstat(filepath.Join(a, p)); e == nil && fi.Mode().IsRegular() {
					if err = os.Link(filepath.Join(a, p), filepath.Join(a, q)); err == nil {
						ident[q] = ident[p]
					}
				}
			case 3: // unlink
				if fi, e := os.Lstat(filepath.Join(a, p)); e == nil && !fi.IsDir() {
					if err = os.Remove(filepath.Join(a, p)); err == nil {
						delete(ident, p)
					}
				}
			case 4: // mkdir
				if _, e := os.Lstat(filepath.Join(a, p)); e != nil {
					if err = os.Mkdir(filepath.Join(a, p), 0o755); err == nil {
						ident[p], next = next, next+1
					}
				}
			}
			if err != nil && !os.IsNotExist(err) && !os.IsExist(err) && !errors.Is(err, syscall.ENOTDIR) && !errors.Is(err, syscall.EISDIR) {
				rt.Fatalf("op %d: %v", i, err)
			}
			live := livePaths(rt, a)
			st := statAll(rt, a, live)
			byIno := map[int64]string{}
			for _, x := range live {
				if y, ok := byIno[st[x].ino]; ok && ident[x] != ident[y] {
					rt.Fatalf("after op %d: %s and %s share inode %d but are not links of one file", i, x, y, st[x].ino)
				}
				byIno[st[x].ino] = x
			}
		}

		// The capture, mounted twice afresh: the same stat everywhere, and
		// a path's number is the one it had in the first tree's mounts.
		next2, _, err := ma.Capture()
		if err != nil {
			rt.Fatal(err)
		}
		mc, c := mountFor(t, rt, objs, next2)
		defer unmountOK(rt, mc)
		md, d := mountFor(t, rt, objs, next2)
		defer unmountOK(rt, md)
		paths2 := livePaths(rt, c)
		sc, sd := statAll(rt, c, paths2), statAll(rt, d, rapid.Permutation(paths2).Draw(rt, "second lookup order"))
		for _, p := range paths2 {
			if sc[p] != sd[p] {
				rt.Fatalf("%s after capture: %+v in one mount, %+v in another", p, sc[p], sd[p])
			}
			if old, ok := sb[p]; ok && old.ino != sc[p].ino && linksOf(sc, p) == 1 {
				rt.Fatalf("%s: inode %d before the capture, %d after", p, old.ino, sc[p].ino)
			}
		}
	})
}

// linksOf counts the paths of st sharing p's inode number.
func linksOf(st map[string]statKey, p string) int {
	n := 0
	for _, k := range st {
		if k.ino == st[p].ino {
			n++
		}
	}
	return n
}
