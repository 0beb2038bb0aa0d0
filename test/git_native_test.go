package test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// threeBranches makes a repository with branches main, feature and old
// (each with its own commits), an annotated tag, an executable, a symlink
// and a nested directory, checked out on main with a dirty working tree
// and a staged change, so that any write to it shows.
func threeBranches(t *testing.T, e *env) string {
	t.Helper()
	repo := filepath.Join(e.dir, "repo")
	writeTree(t, repo, map[string]string{"README": "hello\n", "src/a.go": "package a\n", "src/deep/b.txt": "b\n", "run.sh": "#!/bin/sh\necho run\n"})
	if err := os.Chmod(filepath.Join(repo, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src/a.go", filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "start")
	git(t, repo, "branch", "old")
	git(t, repo, "checkout", "-q", "-b", "feature")
	writeTree(t, repo, map[string]string{"src/feature.go": "package a // feature\n"})
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "feature work")
	git(t, repo, "checkout", "-q", "main")
	writeTree(t, repo, map[string]string{"README": "hello, main\n"})
	git(t, repo, "commit", "-q", "-am", "main moves")
	git(t, repo, "tag", "-a", "-m", "release", "v1")
	writeTree(t, repo, map[string]string{"README": "uncommitted edit\n", "staged.txt": "staged\n"})
	git(t, repo, "add", "staged.txt")
	return repo
}

// repoState is everything of a repository a read must not change: its
// refs, HEAD, index bytes and working tree status.
func repoState(t *testing.T, repo string) string {
	t.Helper()
	idx, err := os.ReadFile(filepath.Join(repo, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	head, err := os.ReadFile(filepath.Join(repo, ".git", "HEAD"))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s\n%s\nindex %x\n%s", git(t, repo, "for-each-ref"), head, sha256.Sum256(idx),
		git(t, repo, "-c", "core.fsmonitor=false", "status", "--porcelain", "--untracked-files=all"))
}

// TestCreateFromGit: a workspace started from each branch of a
// repository holds that branch's tree and a working .git: git status is
// clean (with no file's stat differing from the index, so git reads
// none), git log is the repository's, git commit works; the repository's
// refs, HEAD, index and working tree are untouched throughout.
func TestCreateFromGit(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo := threeBranches(t, e)
	before := repoState(t, repo)

	var out struct {
		Workspace, Repo, Branch, Commit string
		Files                           int
	}
	if err := json.Unmarshal([]byte(e.run("--json", "create", "m", "--from-git", repo).stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.Branch != "main" || out.Repo != filepath.Join(repo, ".git") || out.Commit != strings.TrimSpace(git(t, repo, "rev-parse", "main")) || out.Files != 5 {
		t.Fatalf("create --from-git printed %+v", out)
	}
	e.ok("create", "f", "--from-git", repo+"@feature")
	e.ok("create", "o", "--from-git", repo+"@refs/heads/old")
	e.ok("create", "tag", "--from-git", repo+"@v1")

	for ws, branch := range map[string]string{"m": "main", "f": "feature", "o": "old", "tag": ""} {
		mp := e.mountAt(ws)
		// The index's stat data is what the mount reports: git finds no
		// file to re-read.
		if d := git(t, mp, "-c", "core.fsmonitor=false", "diff-files", "--name-only"); d != "" {
			t.Fatalf("%s: stat data differs from the index for %q", ws, d)
		}
		if st := git(t, mp, "status", "--porcelain", "--untracked-files=all"); st != "" {
			t.Fatalf("%s: git status in a fresh workspace: %q", ws, st)
		}
		// The index carries the commit's trees (git's cache tree): git
		// compares it with HEAD reading the root tree only.
		if n := treesTraversed(t, mp, "status", "--porcelain"); n != 1 {
			t.Fatalf("%s: git status read %d tree objects, want 1 (the index has no cache tree)", ws, n)
		}
		rev := branch
		if rev == "" {
			rev = "v1"
		}
		if got, want := git(t, mp, "log", "--format=%H %s", "HEAD"), git(t, repo, "log", "--format=%H %s", rev); got != want {
			t.Fatalf("%s: git log\n%s\nwant\n%s", ws, got, want)
		}
		cur := strings.TrimSpace(git(t, mp, "branch", "--show-current"))
		if cur != branch {
			t.Fatalf("%s: on branch %q, want %q", ws, cur, branch)
		}
		for _, b := range []string{"main", "feature", "old"} {
			git(t, mp, "rev-parse", "--verify", "-q", "refs/heads/"+b)
		}
		e.unmount(mp)
	}
	if got, _ := os.ReadFile(filepath.Join(e.exportTo("f", "export-f"), "src", "feature.go")); string(got) != "package a // feature\n" {
		t.Fatalf("feature branch's file: %q", got)
	}

	// Work inside: edit, commit, and the commit is the workspace's.
	mp := e.mountAt("m")
	e.commitIn(mp, "echo inside > src/new.txt\nchmod +x run.sh", "inside")
	if got := git(t, mp, "log", "--format=%s", "-n", "2"); got != "inside\nmain moves\n" {
		t.Fatalf("log after a commit inside: %q", got)
	}
	if st := git(t, mp, "status", "--porcelain"); st != "" {
		t.Fatalf("status after commit: %q", st)
	}
	// The commit's tree, read object by object, is the index: the cache
	// tree the import wrote was invalidated where the commit changed it.
	if got, want := git(t, mp, "ls-tree", "-r", "--format=%(objectmode) %(objectname) 0\t%(path)", "HEAD"), git(t, mp, "ls-files", "-s"); got != want {
		t.Fatalf("HEAD's tree\n%s\nwant the index\n%s", got, want)
	}
	e.unmount(mp)
	if got := git(t, e.checkRepo("m"), "log", "--format=%s", "-n", "1"); got != "inside\n" {
		t.Fatalf("exported repository's log: %q", got)
	}
	if after := repoState(t, repo); after != before {
		t.Fatalf("the repository changed:\n%s\nwas\n%s", after, before)
	}
	e.fsck()
}

// treesTraversed runs git args in dir and returns how many tree objects
// git read for unpack_trees (trace2's traverse_trees_count).
func treesTraversed(t *testing.T, dir string, args ...string) int {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "trace2")
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), gitEnv...), "GIT_TRACE2_EVENT="+trace)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"traverse_trees_count":(\d+)`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// Bad inputs to --from-git exit 2, name what is wrong and create nothing.
func TestCreateFromGitRefuses(t *testing.T) {
	needTool(t, "git")
	e := newEnv(t)
	repo := threeBranches(t, e)
	e.ok("create", "taken")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"create", "w", "--from-git", repo + "@nope"}, "no such revision"},
		{[]string{"create", "w", "--from-git", e.dir}, "not a git repository"},
		{[]string{"create", "w", "--from-git", filepath.Join(e.dir, "missing")}, "not a git repository"},
		{[]string{"create", "w", "--from-git", repo + "@"}, "empty revision"},
		{[]string{"create", "w", "--from-git", repo, "--from", repo}, "exclude each other"},
		{[]string{"create", "w", "--from-git", ""}, "needs a directory"},
		{[]string{"create", "taken", "--from-git", repo}, "exists"},
		{[]string{"create", "bad/name", "--from-git", repo}, "name"},
	} {
		r := e.fails(2, c.args...)
		if !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: stderr %q does not say %q", c.args, r.stderr, c.msg)
		}
	}
	if got := strings.Fields(e.ok("list")); len(got) == 0 || strings.Contains(e.ok("list"), "\nw") {
		t.Fatalf("list after refusals: %q", e.ok("list"))
	}
}
