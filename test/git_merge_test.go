package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitEnv is the environment for git runs in tests: no user or system
// configuration, a fixed identity.
var gitEnv = []string{
	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent",
	"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com",
	"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com",
}

// git runs git in dir and returns its output; it fails the test on error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), gitEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// gitShellEnv is gitEnv as `export` lines for scripts run in a mount.
func gitShellEnv() string {
	return "export " + strings.Join(gitEnv, " ") + "\n"
}

var tenLines = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"

// gitForks makes a repository with shared.txt, a.txt and b.txt committed
// on main, imports it as workspace main, and mounts two forks a1 and a2.
func gitForks(t *testing.T) (e *env, m1, m2 string) {
	t.Helper()
	needTool(t, "git")
	e = newMountEnv(t)
	repo := filepath.Join(e.dir, "repo")
	writeTree(t, repo, map[string]string{"shared.txt": tenLines, "a.txt": "a\n", "b.txt": "b\n"})
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "start")
	e.ok("create", "main", "--from", repo)
	e.ok("fork", "main", "a1")
	e.ok("fork", "main", "a2")
	return e, e.mountAt("a1"), e.mountAt("a2")
}

// commitIn edits the work tree in mp with script and commits it there.
func (e *env) commitIn(mp, script, msg string) {
	e.t.Helper()
	e.execOK(mp, gitShellEnv()+"set -e\n"+script+"\ngit add -A\ngit commit -q -m '"+msg+"'\n")
}

// checkRepo exports ws and checks git's view of it: fsck clean, status
// clean, no conflict marker under .git. It returns the export.
func (e *env) checkRepo(ws string) string {
	e.t.Helper()
	out := e.exportTo(ws, "export-"+ws)
	git(e.t, out, "fsck", "--strict", "--no-progress")
	if st := git(e.t, out, "status", "--porcelain"); st != "" {
		e.t.Fatalf("git status in %s's export is not clean:\n%s", ws, st)
	}
	filepath.Walk(filepath.Join(out, ".git"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && !strings.Contains(p, "/objects/") {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), "<<<<<<<") {
				e.t.Errorf("conflict markers in %s", p)
			}
		}
		return nil
	})
	return out
}

// TestGitForksBothCommitAndLand: two agents commit in forks of one
// repository; both land, and the parent's repository holds both commits,
// a clean status and a clean fsck — different files, then different lines
// of one file.
func TestGitForksBothCommitAndLand(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		one, two string // scripts run in a1 and a2
		want     map[string]string
	}{
		{"different files", `echo a1 >> a.txt`, `echo a2 >> b.txt`,
			map[string]string{"a.txt": "a\na1\n", "b.txt": "b\na2\n", "shared.txt": tenLines}},
		{"different lines", `sed -i 's/^2$/two-a1/' shared.txt`, `sed -i 's/^9$/nine-a2/' shared.txt`,
			map[string]string{"shared.txt": strings.Replace(strings.Replace(tenLines, "2\n", "two-a1\n", 1), "9\n", "nine-a2\n", 1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, m1, m2 := gitForks(t)
			e.commitIn(m1, c.one, "from a1")
			e.commitIn(m2, c.two, "from a2")
			e.waitIdle("a1")
			e.waitIdle("a2")
			e.ok("land", "a1")
			e.ok("land", "a2")
			if cs := e.statusOf("a2").Conflicts; len(cs) != 0 {
				t.Fatalf("conflicts recorded: %+v", cs)
			}
			out := e.checkRepo("main")
			subjects := git(t, out, "log", "--format=%s", "main")
			if !strings.Contains(subjects, "from a1\n") || !strings.Contains(subjects, "from a2\n") || !strings.HasSuffix(subjects, "start\n") {
				t.Fatalf("git log main:\n%s", subjects)
			}
			for p, want := range c.want {
				if got := readFile(t, filepath.Join(out, p)); got != want {
					t.Errorf("%s = %q, want %q", p, got, want)
				}
			}
			// The mounts followed: a1's repository is the landed one too.
			e.waitIdle("a1")
			if got := inSession(t, m1, gitShellEnv()+`git status --porcelain; git log --format=%s -n 3 main | sort`); !strings.Contains(got, "from a2") {
				t.Fatalf("a1's mount after both landed: %q", got)
			}
			e.unmount(m1)
			e.unmount(m2)
			e.fsck()
		})
	}
}

// TestGitForksSameLine: both agents change and commit the same line. The
// second land is refused and moves nothing; the content and the ref are
// recorded conflicts with both sides readable; taking theirs lands, with a
// clean repository and the other side's commit still reachable.
func TestGitForksSameLine(t *testing.T) {
	t.Parallel()
	e, m1, m2 := gitForks(t)
	e.commitIn(m1, `sed -i 's/^5$/five-a1/' shared.txt`, "a1 five")
	e.commitIn(m2, `sed -i 's/^5$/five-a2/' shared.txt`, "a2 five")
	ours := strings.TrimSpace(inSession(t, m2, gitShellEnv()+`git rev-parse HEAD`))
	e.waitIdle("a1")
	e.waitIdle("a2")
	e.ok("land", "a1")
	mainHead := e.head("main")
	r := e.run("land", "a2")
	if r.code != 3 || e.head("main") != mainHead {
		t.Fatalf("land of a same-line edit: %s", r)
	}
	kinds := map[string]string{}
	for _, c := range e.statusOf("a2").Conflicts {
		kinds[c.Path] = c.Kind
	}
	if kinds["shared.txt"] != "content" || kinds[".git/refs/heads/main"] != "git-ref" {
		t.Fatalf("recorded conflicts %v, want shared.txt (content) and the ref (git-ref)", kinds)
	}
	if got := e.run("cat", "a2", "shared.txt", "--conflict", "theirs").stdout; !strings.Contains(got, "five-a1\n") {
		t.Fatalf("cat --conflict theirs: %q", got)
	}
	// Inside the mount git sees ours on main and theirs kept aside.
	e.waitIdle("a2")
	if got := inSession(t, m2, gitShellEnv()+`git log --format=%s -n1 main; git log --format=%s -n1 refs/acyclicfs/theirs/heads/main`); got != "a2 five\na1 five\n" {
		t.Fatalf("refs in the conflicted mount: %q", got)
	}
	e.waitIdle("a2")
	e.ok("resolve", "a2", "--all", "--theirs")
	e.ok("land", "a2")
	out := e.exportTo("main", "landed")
	git(t, out, "fsck", "--strict", "--no-progress")
	if got := git(t, out, "log", "--format=%s", "main"); got != "a1 five\nstart\n" {
		t.Fatalf("git log main after taking theirs: %q", got)
	}
	if all := git(t, out, "rev-list", "--all", "--reflog"); !strings.Contains(all, ours) {
		t.Fatalf("a2's own commit %s is no longer reachable", ours)
	}
	e.unmount(m1)
	e.unmount(m2)
	e.fsck()
}

// TestGitMergeCrashAllOrNothing kills the git-aware rebase of an idle
// sibling that follows a land — once while git's scratch directory is in
// use, once just before the publication: each time the sibling is wholly
// as before or wholly rebased (the next command may finish the follow),
// the store checks clean, no scratch directory is left, and both commits
// land in the end.
func TestGitMergeCrashAllOrNothing(t *testing.T) {
	needTool(t, "git")
	for _, point := range []string{"gitmerge.after-git", "rebase.before-publish"} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			repo := filepath.Join(e.dir, "repo")
			writeTree(t, repo, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
			git(t, repo, "init", "-q", "-b", "main")
			git(t, repo, "add", "-A")
			git(t, repo, "commit", "-q", "-m", "start")
			e.ok("create", "main", "--from", repo)
			for i, ws := range []string{"a1", "a2"} {
				e.ok("fork", "main", ws)
				dir := e.checkout(ws, "work-"+ws)
				writeTree(t, dir, map[string]string{[]string{"a.txt", "b.txt"}[i]: "from " + ws + "\n"})
				git(t, dir, "commit", "-q", "-am", "from "+ws)
				e.ok("commit", ws, dir)
			}
			before := e.head("a2")
			// land a1 publishes, then its idle sibling a2 follows: the
			// git-aware merge that the failpoint kills.
			r, err := runCmd(e.command([]string{"ACYCLICFS_FAILPOINT_ARMED=1", "ACYCLICFS_FAILPOINT=" + point}, "land", "a1"))
			if err != nil || r.code != -1 && r.code != 137 {
				t.Fatalf("land with %s armed: want a killed process: %v %s", point, err, r)
			}
			if h := e.head("a2"); h != before {
				if got := e.run("rebase", "a2"); got.line() != "current" {
					t.Fatalf("a2 moved by the recovery, yet not wholly: %s", got)
				}
			}
			if cs := e.statusOf("a2").Conflicts; len(cs) != 0 {
				t.Fatalf("conflicts after a crash: %+v", cs)
			}
			if left, _ := filepath.Glob(filepath.Join(e.store, "tmp", "acyclicfs-gitmerge-*")); len(left) != 0 {
				t.Fatalf("scratch git directories left: %q", left)
			}
			e.fsck()
			e.ok("land", "a2")
			out := e.checkRepo("main")
			if got := git(t, out, "log", "--format=%s", "main"); !strings.Contains(got, "from a1\n") || !strings.Contains(got, "from a2\n") {
				t.Fatalf("git log main: %q", got)
			}
		})
	}
}
