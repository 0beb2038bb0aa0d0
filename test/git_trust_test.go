package test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Issue #38 item 1: nothing a workspace (or a repository acyclicfs reads)
// writes makes the daemon run a command. Every planted program below
// touches a marker file under its test's marker directory when it runs;
// the tests assert no marker appears.

// ownerHome gives e's commands, and so the daemon the first of them
// starts, a HOME of their own whose .gitconfig is gitconfig: the store
// owner's trusted git configuration. It must be called before e's first
// command.
func (e *env) ownerHome(gitconfig string) {
	e.t.Helper()
	home := filepath.Join(e.dir, "owner-home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(gitconfig), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.extraEnv = append(e.extraEnv, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
}

// ranMarkers lists the marker files in dir: the planted programs that ran.
func ranMarkers(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ents {
		if strings.HasPrefix(d.Name(), "ran-") {
			out = append(out, d.Name())
		}
	}
	sort.Strings(out)
	return out
}

// plantedDriverScript appends a merge driver x to the repository's
// .git/config in the mount and names it in .gitattributes for shared.txt:
// the driver would touch marker and take theirs whole.
func plantedDriverScript(marker string) string {
	return `cat >> .git/config <<'EOF'
[merge "x"]
	driver = touch ` + marker + `; cat %B > %A
EOF
echo 'shared.txt merge=x' > .gitattributes
`
}

// TestPlantedMergeDriverDoesNotRun: an agent's fork plants a merge driver
// in its .git/config and names it in .gitattributes. When a sibling lands
// and the fork follows, the driver does not run: shared.txt merges as
// text (both sides' lines) and the daemon log names the ignored driver and
// how to allow it. Once the fork has landed, the driver sits in the
// parent's .git/config; a new fork's rebase does not run it either.
func TestPlantedMergeDriverDoesNotRun(t *testing.T) {
	t.Parallel()
	e, m1, m2 := gitForks(t)
	marker := filepath.Join(e.dir, "driver-ran")
	e.commitIn(m1, plantedDriverScript(marker)+`sed -i 's/^2$/two-a1/' shared.txt`, "plant")
	e.commitIn(m2, `sed -i 's/^9$/nine-a2/' shared.txt`, "from a2")
	e.waitIdle("a1")
	e.waitIdle("a2")
	e.ok("land", "a2")
	e.waitIdle("a1")
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the merge driver planted in a1's .git/config ran when a1 followed a2's land")
	}
	both := strings.Replace(strings.Replace(tenLines, "2\n", "two-a1\n", 1), "9\n", "nine-a2\n", 1)
	if got := inSession(t, m1, "cat shared.txt"); got != both {
		t.Fatalf("a1's shared.txt after following = %q, want the text merge %q", got, both)
	}
	log := e.daemonLog()
	if !strings.Contains(log, `merge driver "x"`) || !strings.Contains(log, "merge.x.driver in ~/.gitconfig") {
		t.Fatalf("the daemon log does not name the ignored driver:\n%s", log)
	}

	// a1 lands: main now carries the driver and the attribute.
	e.ok("land", "a1")
	if cfg := e.content("main", ".git/config"); !strings.Contains(cfg, `[merge "x"]`) {
		t.Fatalf("main's .git/config after a1 landed lacks the planted driver:\n%s", cfg)
	}
	// A new fork of main changes shared.txt, a sibling lands another
	// change to it, the fork rebases: still no driver.
	e.ok("fork", "main", "b")
	e.ok("fork", "main", "c")
	e.edit("b", map[string]string{"shared.txt": strings.Replace(both, "4\n", "four-b\n", 1)})
	e.edit("c", map[string]string{"shared.txt": strings.Replace(both, "7\n", "seven-c\n", 1)})
	e.ok("land", "c")
	e.ok("rebase", "b")
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the merge driver in main's .git/config ran at a new fork's rebase")
	}
	want := strings.Replace(strings.Replace(both, "4\n", "four-b\n", 1), "7\n", "seven-c\n", 1)
	if got := e.content("b", "shared.txt"); got != want {
		t.Fatalf("b's shared.txt after the rebase = %q, want %q", got, want)
	}
	e.unmount(m1)
	e.unmount(m2)
	e.fsck()
}

// TestOwnerMergeDriverRuns: a driver the store owner's own git config
// defines runs at a land wherever .gitattributes names it, and wins over
// a definition of the same name the workspace's .git/config plants.
func TestOwnerMergeDriverRuns(t *testing.T) {
	t.Parallel()
	needTool(t, "git")
	e := newEnv(t)
	planted := filepath.Join(e.dir, "planted-ran")
	e.ownerHome("[merge \"both\"]\n\tdriver = cat %A %B > %A.both && mv %A.both %A\n")
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{
		".gitattributes": "notes.txt merge=both\n",
		"notes.txt":      "notes\n",
	})
	git(t, src, "init", "-q", "-b", "main")
	git(t, src, "config", "merge.both.driver", "touch "+planted+"; cat %B > %A")
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "a")
	e.ok("fork", "main", "b")
	e.edit("a", map[string]string{"notes.txt": "notes\nby a\n"})
	e.edit("b", map[string]string{"notes.txt": "notes\nby b\n"})
	e.ok("land", "a")
	e.ok("land", "b")
	if got := e.content("main", "notes.txt"); got != "notes\nby b\nnotes\nby a\n" {
		t.Fatalf("main's notes.txt: the owner's driver did not run: %q", got)
	}
	if _, err := os.Stat(planted); err == nil {
		t.Fatal("the driver of the workspace's .git/config ran")
	}
	e.fsck()
}

// plantRepo makes the repository at repo name programs in every way git
// can be told to run one: hooks in .git/hooks and in a core.hooksPath an
// [include] names, core.fsmonitor, a filter and a textconv named by
// .gitattributes, signature checks with gpg.program. Each touches
// marks/ran-NAME. It runs no git itself (the test's own git would run
// them).
func plantRepo(t *testing.T, repo, marks string) {
	t.Helper()
	tools := filepath.Join(marks, "tools")
	prog := func(path, name, tail string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte("#!/bin/sh\ntouch "+filepath.Join(marks, "ran-"+name)+"\n"+tail), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []string{"reference-transaction", "post-commit", "pre-commit", "post-merge", "post-checkout", "pre-auto-gc", "post-rewrite"} {
		prog(filepath.Join(repo, ".git", "hooks", h), "hook-"+h, "")
		prog(filepath.Join(tools, "hooks", h), "hookspath-"+h, "")
	}
	prog(filepath.Join(tools, "fsmonitor"), "fsmonitor", "")
	prog(filepath.Join(tools, "clean"), "filter-clean", "cat\n")
	prog(filepath.Join(tools, "smudge"), "filter-smudge", "cat\n")
	prog(filepath.Join(tools, "textconv"), "textconv", "cat \"$1\"\n")
	prog(filepath.Join(tools, "gpg"), "gpg", "")
	included := filepath.Join(tools, "included")
	if err := os.WriteFile(included, []byte("[core]\n\thooksPath = "+filepath.Join(tools, "hooks")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(repo, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("[core]\n\tfsmonitor = " + filepath.Join(tools, "fsmonitor") + "\n" +
		"[include]\n\tpath = " + included + "\n" +
		"[filter \"f\"]\n\tclean = " + filepath.Join(tools, "clean") + "\n\tsmudge = " + filepath.Join(tools, "smudge") + "\n" +
		"[diff \"t\"]\n\ttextconv = " + filepath.Join(tools, "textconv") + "\n" +
		"[log]\n\tshowSignature = true\n[gpg]\n\tprogram = " + filepath.Join(tools, "gpg") + "\n" +
		"[gc]\n\tauto = 1\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, ".git", "info", "attributes"), []byte("* filter=f diff=t\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGitRunsNothingTheRepositoryConfigures: with programs planted in
// every way git can be told to run one — in the repository that is
// imported, bound, published to and pulled from, and in a workspace's own
// .git — none runs in any git the daemon or the CLI starts: create
// --from-git, pull, land and the follow it makes, publish.
func TestGitRunsNothingTheRepositoryConfigures(t *testing.T) {
	t.Parallel()
	e, repo := gitRepo3(t, "ws")
	marks := filepath.Join(e.dir, "marks")
	if err := os.MkdirAll(marks, 0o755); err != nil {
		t.Fatal(err)
	}
	// REPO's feature moves before anything is planted (the push runs the
	// test's own git in REPO).
	pushTo(t, e, repo, "feature", "pusher", map[string]string{"theirs.txt": "theirs\n"}, "theirs")
	plantRepo(t, repo, marks)
	check := func(step string) {
		t.Helper()
		if ran := ranMarkers(t, marks); len(ran) > 0 {
			t.Fatalf("after %s, planted programs ran: %v", step, ran)
		}
	}

	e.ok("create", "imported", "--from-git", repo+"@feature")
	check("create --from-git")
	if r := e.gitRun("git", "pull", "ws"); r.code != 0 {
		t.Fatalf("git pull ws: %s", r)
	}
	check("git pull")

	// A fork of ws plants the same in its own .git and changes a file;
	// a sibling lands first, so the fork follows, then lands.
	e.ok("fork", "ws", "kid")
	e.ok("fork", "ws", "sib")
	kid := e.mountAt("kid")
	stage := filepath.Join(e.dir, "stage")
	writeTree(t, stage, map[string]string{".git/config": "", ".git/info/attributes": ""})
	plantRepo(t, stage, marks)
	e.execOK(kid, `set -e
cat "$S/.git/config" >> .git/config
cp -r "$S/.git/hooks" .git/
cp "$S/.git/info/attributes" .git/info/attributes
echo '* merge=x filter=f diff=t' > .gitattributes
sed -i 's/^2$/two-kid/' a.txt
`, "S="+stage)
	e.edit("sib", map[string]string{"a.txt": strings.Replace(tenLines, "9\n", "nine-sib\n", 1)})
	e.waitIdle("kid")
	e.ok("land", "sib")
	e.waitIdle("kid")
	check("land of a sibling and the follow")
	e.ok("land", "kid")
	check("land")
	if got := e.content("ws", "a.txt"); !strings.Contains(got, "two-kid") || !strings.Contains(got, "nine-sib") {
		t.Fatalf("ws's a.txt after both landed = %q", got)
	}
	if out := e.gitOK("git", "publish", "ws"); !strings.HasPrefix(out, "published feature: ") {
		t.Fatalf("publish printed %q", out)
	}
	check("git publish")
	e.unmount(kid)
	check("unmount")
	// The planted programs do run for git itself, so the test would see
	// them if they ran (REPO's own git status runs the fsmonitor and the
	// hooks path's reference-transaction runs at an update-ref).
	git(t, repo, "update-ref", "refs/heads/probe", "feature")
	if ran := ranMarkers(t, marks); len(ran) == 0 {
		t.Fatal("the planted hooks do not run for git itself: the test proves nothing")
	}
	e.fsck()
}
