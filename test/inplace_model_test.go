package test

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"
)

// TestInPlaceUnderneathModel: random lease ends of an in-place mount in
// which the view renames, rewrites, chmods, replaces by symlinks and
// removes files and directories while a program holding a descriptor from
// before the mount does the same underneath, between the view's edits and
// the lease end. Whatever they do, every lease end reconciles (an outcome,
// never an error: a head that can no longer be materialized would wedge
// every later reconcile and the unmount), and afterwards DIR underneath
// and the mount show exactly the head. Between rounds the workspace may be
// unmounted while other programs edit DIR; the next mount takes their
// edits in. The final unmount leaves DIR equal to the head's export and
// the store checks clean.
func TestInPlaceUnderneathModel(t *testing.T) {
	files := []string{"a/f1", "a/f2", "b/g1", "top", "c/h1"}
	dirs := []string{"a", "b", "c"}
	type op struct {
		kind string // write, rm, mv, chmod, symlink, rmdir, mvdir
		p, q string
	}
	genOp := rapid.Custom(func(rt *rapid.T) op {
		switch rapid.IntRange(0, 14).Draw(rt, "kind") {
		case 0, 1, 2, 3:
			return op{kind: "write", p: rapid.SampledFrom(files).Draw(rt, "p")}
		case 4, 5:
			return op{kind: "rm", p: rapid.SampledFrom(files).Draw(rt, "p")}
		case 6, 7, 8:
			return op{kind: "mv", p: rapid.SampledFrom(files).Draw(rt, "p"), q: rapid.SampledFrom(files).Draw(rt, "q")}
		case 9, 10:
			return op{kind: "chmod", p: rapid.SampledFrom(files).Draw(rt, "p")}
		case 11:
			return op{kind: "symlink", p: rapid.SampledFrom(files).Draw(rt, "p")}
		case 12:
			return op{kind: "rmdir", p: rapid.SampledFrom(dirs).Draw(rt, "p")}
		}
		return op{kind: "mvdir", p: rapid.SampledFrom(dirs).Draw(rt, "p"), q: rapid.SampledFrom(dirs).Draw(rt, "q")}
	})
	shell := func(o op, content string) string {
		switch o.kind {
		case "write":
			return fmt.Sprintf("mkdir -p %s && printf %q > %s", path.Dir(o.p), content, o.p)
		case "rm":
			return "rm -f " + o.p
		case "mv":
			return fmt.Sprintf("if [ -f %s ] && [ ! -d %s ]; then mkdir -p %s && mv -f %s %s; fi", o.p, o.q, path.Dir(o.q), o.p, o.q)
		case "chmod":
			return fmt.Sprintf("if [ -f %s ] && [ ! -L %s ]; then chmod 755 %s; fi", o.p, o.p, o.p)
		case "symlink":
			return fmt.Sprintf("mkdir -p %s && rm -f %s && ln -s %q %s", path.Dir(o.p), o.p, "target of "+o.p, o.p)
		case "rmdir":
			return "rm -rf " + o.p
		}
		return fmt.Sprintf("if [ -d %s ] && [ ! -e %s ]; then mv %s %s; fi", o.p, o.q, o.p, o.q)
	}
	rapid.Check(t, func(rt *rapid.T) {
		e := newMountEnv(t)
		dir := e.dir + "/work"
		writeTree(t, dir, map[string]string{"a/f1": "f1\n", "a/f2": "f2\n", "b/g1": "g1\n", "top": "top\n"})
		e.ok("create", "ws", "--in-place", dir)
		under, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			rt.Fatal(err)
		}
		defer unix.Close(under)
		underPath := "/proc/self/fd/" + strconv.Itoa(under) + "/" // the slash follows the magic link
		flags := []string{"mount", "ws"}
		if rapid.Bool().Draw(rt, "no warm-up") {
			flags = append(flags, "--warm-entries", "0")
		}
		e.ok(flags...)
		rounds := rapid.IntRange(1, 3).Draw(rt, "rounds")
		for round := range rounds {
			view := rapid.SliceOfN(genOp, 1, 4).Draw(rt, "view")
			below := rapid.SliceOfN(genOp, 0, 3).Draw(rt, "underneath")
			var script []string
			for i, o := range view {
				script = append(script, shell(o, fmt.Sprintf("view %d.%d\n", round, i)))
			}
			gate := e.fifo(fmt.Sprintf("gate%d", round))
			run := e.startExec(dir, strings.Join(script, "; ")+`; read x < "$G"`, "G="+gate.path)
			w := gate.opened(30 * time.Second)
			for i, o := range below {
				underneath(under, o.kind, o.p, o.q, fmt.Sprintf("under %d.%d\n", round, i))
			}
			release(t, w)
			r := run.wait(t)
			if o, _ := parseOutcome(r.stderr); r.code != 0 || !slices.Contains([]string{"current", "rebased", "conflicted"}, o) {
				rt.Fatalf("round %d: the lease end did not reconcile: %s", round, r)
			}
			exp := e.dir + fmt.Sprintf("/head%d", round)
			if r := e.run("export", "ws", exp); r.code != 0 {
				rt.Fatalf("round %d: export of the head: %s", round, r)
			}
			want := treeList(t, exp)
			sameTree(t, fmt.Sprintf("DIR underneath after round %d, against the head", round), want, treeList(t, underPath))
			// The view shows the head too (no stale entry, no EIO).
			_, v := e.execOK(dir, `find . -type f | LC_ALL=C sort | while read -r f; do echo "${f#./}"; cat "$f" || exit 1; done`)
			var shown strings.Builder
			for _, p := range slices.Sorted(maps.Keys(want)) {
				if strings.HasPrefix(want[p], "file") {
					shown.WriteString(p + "\n" + readFile(t, exp+"/"+p))
				}
			}
			if v.stdout != shown.String() {
				rt.Fatalf("round %d: the mount shows\n%s\nwant the head\n%s", round, v.stdout, shown.String())
			}
			if round == rounds-1 || !rapid.Bool().Draw(rt, "remount") {
				continue
			}
			// Unmounted, other programs edit DIR; the next mount takes
			// their edits in before it covers DIR again.
			if o, _ := e.unmount(dir); o != "current" {
				rt.Fatalf("round %d: unmount: outcome %s, want current", round, o)
			}
			for i, o := range rapid.SliceOfN(genOp, 0, 3).Draw(rt, "unmounted") {
				underneath(under, o.kind, o.p, o.q, fmt.Sprintf("unmounted %d.%d\n", round, i))
			}
			if r := e.run(flags...); r.code != 0 {
				rt.Fatalf("round %d: mount again: %s", round, r)
			}
			exp = e.dir + fmt.Sprintf("/remounted%d", round)
			if r := e.run("export", "ws", exp); r.code != 0 {
				rt.Fatalf("round %d: export after the remount: %s", round, r)
			}
			sameTree(t, fmt.Sprintf("DIR underneath after the remount in round %d, against the head", round), treeList(t, exp), treeList(t, underPath))
		}
		if o, _ := e.unmount(dir); o != "current" {
			rt.Fatalf("unmount: outcome %s, want current", o)
		}
		final := e.dir + "/final"
		if r := e.run("export", "ws", final); r.code != 0 {
			rt.Fatalf("export after the unmount: %s", r)
		}
		sameTree(t, "DIR after the unmount, against the head", treeList(t, final), treeList(t, dir))
		e.fsck()
	})
}

// underneath applies one edit to DIR underneath the mount through under,
// a descriptor from before it; edits that do not apply are skipped.
func underneath(under int, kind, p, q, content string) {
	mkParent := func(p string) {
		if d := path.Dir(p); d != "." {
			_ = unix.Mkdirat(under, d, 0o755)
		}
	}
	switch kind {
	case "write":
		mkParent(p)
		fd, err := unix.Openat(under, p, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return
		}
		_, _ = unix.Write(fd, []byte(content))
		unix.Close(fd)
	case "rm":
		_ = unix.Unlinkat(under, p, 0)
	case "mv":
		var st unix.Stat_t
		if unix.Fstatat(under, p, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return
		}
		mkParent(q)
		_ = unix.Renameat2(under, p, under, q, unix.RENAME_NOREPLACE)
	case "mvdir":
		_ = unix.Renameat2(under, p, under, q, unix.RENAME_NOREPLACE)
	case "chmod":
		_ = unix.Fchmodat(under, p, 0o755, 0)
	case "symlink":
		mkParent(p)
		_ = unix.Unlinkat(under, p, 0)
		_ = unix.Symlinkat("target of "+p+" underneath", under, p)
	case "rmdir": // only an empty one
		_ = unix.Unlinkat(under, p, unix.AT_REMOVEDIR)
	}
}
