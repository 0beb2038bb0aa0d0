package test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGitStatusInANewForkReadsNothing: a repository imported with create
// --from, its index refreshed once in a mount and landed; in a new fork's
// mount the first git status finds every file's stat as the index has it
// (inode numbers are a function of the path, ctime of what the store
// records), so it re-hashes nothing and leaves .git/index unchanged.
func TestGitStatusInANewForkReadsNothing(t *testing.T) {
	t.Parallel()
	needTool(t, "git")
	e := newMountEnv(t)
	repo := filepath.Join(e.dir, "repo")
	files := map[string]string{}
	for i := 0; i < 60; i++ {
		files[fmt.Sprintf("pkg%d/file%d.go", i%6, i)] = fmt.Sprintf("package pkg%d // %d\n", i%6, i)
	}
	writeTree(t, repo, files)
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "start")
	e.ok("create", "main", "--from", repo)

	// The index came from the source directory: its inode numbers are not
	// the mount's, so the first status in a mount refreshes it. Without
	// the fsmonitor hook: git stats every file then, which is what this
	// test is about (with it, git stats nothing, and its untracked cache,
	// keyed by the worktree's path, is rebuilt in each new mountpoint).
	e.ok("fork", "main", "f1")
	m1 := e.mountAt("f1", "--no-fsmonitor")
	if got := inSession(t, m1, gitShellEnv()+"git status --porcelain"); got != "" {
		t.Fatalf("git status in f1: %q", got)
	}
	e.unmount(m1)
	e.ok("land", "f1")

	for _, ws := range []string{"f2", "f3"} {
		e.ok("fork", "main", ws)
		mp := e.mountAt(ws, "--no-fsmonitor")
		sum := func() string {
			t.Helper()
			return fmt.Sprintf("%x", sha256.Sum256([]byte(inSession(t, mp, "cat .git/index"))))
		}
		before := sum()
		if got := inSession(t, mp, gitShellEnv()+"git status --porcelain"); got != "" {
			t.Fatalf("git status in %s: %q", ws, got)
		}
		if after := sum(); after != before {
			t.Fatalf("git status in a new fork %s rewrote .git/index: it found stat data changed", ws)
		}
		// The same files, the same numbers as in the other forks' mounts.
		if ino := strings.TrimSpace(inSession(t, mp, "stat -c %i pkg3/file9.go")); ino == "" || ino == "0" {
			t.Fatalf("inode number %q", ino)
		}
		e.unmount(mp)
	}
	if _, err := os.Stat(repo); err != nil {
		t.Fatal(err)
	}
	e.fsck()
}
