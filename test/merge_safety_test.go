package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMarkersStayConflictedUntilResolved: rebase --markers writes markers
// into the child only; land refuses until the path is resolved; resolve of
// the file as it is refuses while it holds markers and takes it once they
// are edited away in the mount.
func TestMarkersStayConflictedUntilResolved(t *testing.T) {
	t.Parallel()
	lines := "1\n2\n3\n4\n5\n6\n7\n8\n9\n"
	e, mp := forkMounted(t, map[string]string{"shared.txt": lines})
	e.execOK(mp, `sed -i 's/^5$/five-child/' shared.txt`)
	mainHead := e.advanceMain(map[string]string{"shared.txt": strings.Replace(lines, "5\n", "five-main\n", 1)})
	e.waitIdle("child")

	r := e.run("rebase", "child", "--markers")
	if r.code != 3 || !strings.Contains(r.stdout, "shared.txt") {
		t.Fatalf("rebase --markers: %s", r)
	}
	got := inSession(t, mp, `cat shared.txt`)
	if !strings.Contains(got, "<<<<<<< ours\nfive-child\n") || !strings.Contains(got, "five-main\n>>>>>>> theirs\n") {
		t.Fatalf("the mount does not show the markers:\n%s", got)
	}
	e.waitIdle("child")
	if r := e.run("land", "child"); r.code != 3 || !strings.Contains(r.stdout, "shared.txt") {
		t.Fatalf("land with markers unresolved: %s", r)
	}
	if e.head("main") != mainHead || strings.Contains(e.content("main", "shared.txt"), "<<<<<<<") {
		t.Fatal("a refused land changed the parent")
	}
	if r := e.run("resolve", "child", "shared.txt"); r.code != 3 || !strings.Contains(r.stderr, "markers") {
		t.Fatalf("resolve of a file that still holds markers: %s", r)
	}
	// Resolve from inside the mount, by a path relative to it.
	want := strings.Replace(lines, "5\n", "five-both\n", 1)
	e.execOK(mp, `printf '%s' "$W" > shared.txt`, "W="+want)
	e.waitIdle("child")
	if r := e.runIn(mp, "resolve", "child", "./shared.txt"); r.code != 0 {
		t.Fatalf("resolve after editing the markers away: %s", r)
	}
	e.ok("land", "child")
	if got := e.content("main", "shared.txt"); got != want {
		t.Fatalf("main's shared.txt after the land = %q", got)
	}
	e.unmount(mp)
	e.fsck()
}

// TestBinaryConflictKeepsBothSides: a sqlite database changed in two forks
// conflicts; both versions stay readable with cat --conflict, land is
// refused until resolved, and nothing is lost.
func TestBinaryConflictKeepsBothSides(t *testing.T) {
	t.Parallel()
	needTool(t, "sqlite3")
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if r, err := runCmd(exec.Command("sqlite3", filepath.Join(src, "app.db"), "create table t(v text); insert into t values('base');")); err != nil || r.code != 0 {
		t.Fatalf("sqlite3: %v %s", err, r)
	}
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "a1")
	e.ok("fork", "main", "a2")
	m1, m2 := e.mountAt("a1"), e.mountAt("a2")
	e.execOK(m1, `sqlite3 app.db "insert into t values('one')"`)
	e.execOK(m2, `sqlite3 app.db "insert into t values('two')"`)
	e.waitIdle("a1")
	e.waitIdle("a2")
	e.ok("land", "a1")
	mainHead := e.head("main")
	r := e.run("land", "a2")
	if r.code != 3 || !strings.Contains(r.stdout, "app.db") || e.head("main") != mainHead {
		t.Fatalf("land of the second database edit: %s", r)
	}
	dump := func(side string) string {
		t.Helper()
		f := filepath.Join(e.dir, "side-"+side+".db")
		c := e.run("cat", "a2", "app.db", "--conflict", side)
		if c.code != 0 {
			t.Fatalf("cat --conflict %s: %s", side, c)
		}
		if err := os.WriteFile(f, []byte(c.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := runCmd(exec.Command("sqlite3", f, "select group_concat(v) from t;"))
		if err != nil || out.code != 0 {
			t.Fatalf("sqlite3 on the %s side: %v %s", side, err, out)
		}
		return strings.TrimSpace(out.stdout)
	}
	if o, th, b := dump("ours"), dump("theirs"), dump("base"); o != "base,two" || th != "base,one" || b != "base" {
		t.Fatalf("sides: ours %q theirs %q base %q", o, th, b)
	}
	// The mount shows ours until resolved; taking theirs then lands.
	if got := inSession(t, m2, `sqlite3 app.db "select group_concat(v) from t"`); strings.TrimSpace(got) != "base,two" {
		t.Fatalf("the mount shows %q, want its own rows", got)
	}
	e.waitIdle("a2")
	e.ok("resolve", "a2", "--all", "--theirs")
	// Resolving a mounted workspace switches its view like any head change.
	if got := inSession(t, m2, `sqlite3 app.db "select group_concat(v) from t"`); strings.TrimSpace(got) != "base,one" {
		t.Fatalf("after resolve --theirs the mount shows %q", got)
	}
	e.waitIdle("a2")
	e.ok("land", "a2")
	e.unmount(m1)
	e.unmount(m2)
	e.fsck()
}

// TestResolveAndMergeCrashAllOrNothing kills the CLI at each step of a
// resolve and of a conflicted rebase: afterwards the workspace is wholly
// before (head, conflicts and all) or wholly after.
func TestResolveAndMergeCrashAllOrNothing(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "base\n", "g": "base\n"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "c")
	e.edit("c", map[string]string{"f": "child\n", "g": "child\n"})
	e.edit("main", map[string]string{"f": "parent\n", "g": "parent\n"})
	crash := func(point string, args ...string) {
		t.Helper()
		cmd := e.command([]string{"ACYCLICFS_FAILPOINT_ARMED=1", "ACYCLICFS_FAILPOINT=" + point}, args...)
		r, err := runCmd(cmd)
		if err != nil || r.code != -1 && r.code != 137 {
			t.Fatalf("%s with %s armed: want a killed process: %v %s", args, point, err, r)
		}
	}
	conflicts := func() string {
		t.Helper()
		st := e.statusOf("c")
		var ps []string
		for _, c := range st.Conflicts {
			ps = append(ps, c.Path)
		}
		return strings.Join(ps, " ")
	}
	before := e.head("c")
	crash("rebase.before-publish", "rebase", "c")
	if e.head("c") != before || conflicts() != "" {
		t.Fatalf("a rebase killed before its publication changed the child: conflicts %q", conflicts())
	}
	e.fails(3, "rebase", "c")
	rebased := e.head("c")
	crash("resolve.before-publish", "resolve", "c", "f", "--theirs")
	if e.head("c") != rebased || conflicts() != "f g" || e.content("c", "f") != "child\n" {
		t.Fatalf("a resolve killed before its publication changed the child: conflicts %q", conflicts())
	}
	crash("resolve.after-publish", "resolve", "c", "f", "--theirs")
	if e.head("c") == rebased || conflicts() != "g" || e.content("c", "f") != "parent\n" {
		t.Fatalf("a resolve killed after its publication is not whole: conflicts %q f %q", conflicts(), e.content("c", "f"))
	}
	e.ok("resolve", "c", "g", "--ours")
	e.ok("land", "c")
	e.fsck()
}

// TestGitattributesMergeRules: .gitattributes merge attributes decide how
// a path merges on land: union takes both sides' lines, binary never
// merges by lines, and a driver from the store owner's git config runs and
// its result is published.
func TestGitattributesMergeRules(t *testing.T) {
	needTool(t, "git")
	e := newEnv(t)
	e.ownerHome("[merge \"both\"]\n\tdriver = cat %A %B > %A.both && mv %A.both %A\n")
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{
		".gitattributes": "CHANGELOG merge=union\n*.bin binary\nnotes.txt merge=both\n",
		"CHANGELOG":      "v1\n",
		"data.bin":       "same text\n",
		"notes.txt":      "notes\n",
	})
	git(t, src, "init", "-q", "-b", "main")
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "a")
	e.ok("fork", "main", "b")
	e.edit("a", map[string]string{"CHANGELOG": "v1\nfrom a\n", "data.bin": "a's text\n", "notes.txt": "notes\nby a\n"})
	e.edit("b", map[string]string{"CHANGELOG": "v1\nfrom b\n", "data.bin": "b's text\n", "notes.txt": "notes\nby b\n"})
	e.ok("land", "a")
	r := e.run("land", "b")
	if r.code != 3 || strings.TrimSpace(r.stdout) != "conflicted\ndata.bin" {
		t.Fatalf("land b: want only data.bin conflicted (binary attribute): %s", r)
	}
	if got := e.content("b", "CHANGELOG"); got != "v1\nfrom b\nfrom a\n" && got != "v1\nfrom a\nfrom b\n" {
		t.Fatalf("union merge of CHANGELOG = %q", got)
	}
	if got := e.content("b", "notes.txt"); got != "notes\nby b\nnotes\nby a\n" {
		t.Fatalf("the merge driver's result = %q", got)
	}
	e.ok("resolve", "b", "data.bin", "--ours")
	e.ok("land", "b")
	if got := e.content("main", "notes.txt"); got != "notes\nby b\nnotes\nby a\n" {
		t.Fatalf("main's notes.txt after the land = %q", got)
	}
	e.fsck()
}
