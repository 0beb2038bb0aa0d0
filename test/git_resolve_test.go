package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gitRefsJSON is status --json's git_refs of a mount.
type gitRefsJSON struct {
	Total     int64  `json:"total"`
	Resolved  int64  `json:"resolved"`
	Remaining int64  `json:"remaining"`
	Running   bool   `json:"running"`
	Finished  string `json:"finished"`
	Error     string `json:"error"`
}

// gitRefsOf returns ws's background resolution as status --json shows it
// (nil: none).
func (e *env) gitRefsOf(ws string) *gitRefsJSON {
	e.t.Helper()
	r := e.run("--json", "status", ws)
	if r.code != 0 {
		e.t.Fatalf("status --json: %s", r)
	}
	var st struct {
		Workspaces []struct {
			GitRefs *gitRefsJSON `json:"git_refs"`
		} `json:"workspaces"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Workspaces) != 1 {
		e.t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return st.Workspaces[0].GitRefs
}

// waitResolved polls status until ws's mount has resolved its git object
// references (the daemon reports no event for it) and returns the last
// status.
func (e *env) waitResolved(ws string) *gitRefsJSON {
	e.t.Helper()
	var g *gitRefsJSON
	waitFor(e.t, 60*time.Second, ws+"'s git object references to resolve", func() bool {
		g = e.gitRefsOf(ws)
		if g != nil && g.Error != "" {
			e.t.Fatalf("resolution failed: %+v", g)
		}
		return g != nil && !g.Running && g.Finished != ""
	})
	return g
}

// manyFilesRepo is a repository of n small files in a few directories
// (distinct contents), a symlink and an executable.
func manyFilesRepo(t *testing.T, e *env, n int) (string, map[string]string) {
	t.Helper()
	repo := filepath.Join(e.dir, "many")
	files := map[string]string{"run.sh": "#!/bin/sh\necho run\n"}
	for i := range n {
		files[fmt.Sprintf("d%d/f%04d.txt", i%7, i)] = fmt.Sprintf("file %d\n%s", i, strings.Repeat("x", i%300))
	}
	writeTree(t, repo, files)
	if err := os.Chmod(filepath.Join(repo, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d0/f0000.txt", filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "many")
	return repo, files
}

// checkTree reads every file of files under dir and the symlink.
func checkTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, want := range files {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(b) != want {
			t.Fatalf("%s: %q %v, want %q", p, b, err, want)
		}
	}
	if l, err := os.Readlink(filepath.Join(dir, "link")); err != nil || l != "d0/f0000.txt" {
		t.Fatalf("link: %q %v", l, err)
	}
}

// loseObjects makes every object of repo unreadable to git (the objects
// directory moved away) and returns how to put it back.
func loseObjects(t *testing.T, repo string) (restore func()) {
	t.Helper()
	objs := filepath.Join(repo, ".git", "objects")
	if err := os.Rename(objs, objs+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(objs, 0o755); err != nil {
		t.Fatal(err)
	}
	return func() {
		_ = os.RemoveAll(objs)
		if err := os.Rename(objs+".away", objs); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGitResolveBackground: a workspace created from git reads its files
// from the repository until the daemon, having mounted it, stored them in
// the background; status shows the progress and when it finished. Then
// every file reads with the repository's objects gone — through the
// mount, a later mount, cat — and fsck is clean; a file read before the
// resolution reads the same after it. Without the resolution those reads
// fail (checked first).
func TestGitResolveBackground(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo, files := manyFilesRepo(t, e, 300)
	e.ok("create", "g", "--from-git", repo)
	before := e.run("cat", "g", "d3/f0010.txt").stdout

	// Unresolved, the files need the repository.
	restore := loseObjects(t, repo)
	if r := e.run("cat", "g", "d3/f0010.txt"); r.code == 0 {
		t.Fatalf("cat of an unresolved reference with the objects gone: %s", r)
	}
	restore()

	mp := e.mountAt("g")
	g := e.waitResolved("g")
	// Every blob but run.sh's and the symlink's are distinct: 302 references.
	if g.Total != int64(len(files)+1) || g.Resolved != g.Total || g.Remaining != 0 {
		t.Fatalf("resolution: %+v, want %d resolved", g, len(files)+1)
	}
	if out := e.run("status", "g").stdout; !strings.Contains(out, fmt.Sprintf("git-refs g: all %d files stored", g.Total)) {
		t.Fatalf("status text does not report the finished resolution:\n%s", out)
	}

	restore = loseObjects(t, repo)
	defer restore()
	checkTree(t, mp, files)
	if got := readFile(t, filepath.Join(mp, "d3/f0010.txt")); got != before {
		t.Fatalf("read after resolution %q, before %q", got, before)
	}
	e.unmount(mp)
	if got := e.run("cat", "g", "d3/f0010.txt").stdout; got != before {
		t.Fatalf("cat after resolution %q, before %q", got, before)
	}
	e.ok("gc")
	e.fsck() // no missing-git-object although the repository has none
	mp = e.mountAt("g")
	if g := e.gitRefsOf("g"); g != nil {
		t.Fatalf("a resolved tree's mount shows a resolution: %+v", g)
	}
	checkTree(t, mp, files)
	e.unmount(mp)
}

// TestGitResolveCreateResolve: create --from-git --resolve stores every
// file before it returns: the repository's objects are not needed after.
func TestGitResolveCreateResolve(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo, files := manyFilesRepo(t, e, 100)
	r := e.run("--json", "create", "g", "--from-git", repo, "--resolve")
	var created struct {
		Resolved int `json:"resolved"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil || created.Resolved != len(files)+1 {
		t.Fatalf("create --resolve --json: %s", r)
	}
	defer loseObjects(t, repo)()
	e.fsck()
	mp := e.mountAt("g")
	if g := e.gitRefsOf("g"); g != nil {
		t.Fatalf("the mount of a resolved import shows a resolution: %+v", g)
	}
	checkTree(t, mp, files)
	e.unmount(mp)
	if r := e.run("create", "h", "--resolve"); r.code != 2 {
		t.Fatalf("--resolve without --from-git: %s", r)
	}
}

// TestGitResolveCrash: the daemon dies by SIGKILL in the middle of the
// background resolution — after its first chunk was recorded, or after a
// chunk's blobs were synced but before they were recorded. The next mount
// recovers and goes on with what is left (fewer references after the
// first point, all of them after the second), completes, and every file
// reads as the commit holds it, without the repository; fsck is clean.
func TestGitResolveCrash(t *testing.T) {
	needTool(t, "git")
	for _, point := range []string{"gitresolve.after-chunk", "gitresolve.before-record"} {
		t.Run(point, func(t *testing.T) {
			e := newMountEnv(t)
			repo, files := manyFilesRepo(t, e, 300)
			e.ok("create", "g", "--from-git", repo)
			mp := filepath.Join(e.dir, "mnt")
			if err := os.Mkdir(mp, 0o755); err != nil {
				t.Fatal(err)
			}
			e.mountWithFailpoint(point, "g", mp)
			pid := e.daemonPID()
			if pid == 0 {
				t.Fatal("no daemon pid")
			}
			if err := waitGone(pid, 60*time.Second); err != nil {
				t.Fatalf("the daemon did not die at %s: %v", point, err)
			}
			if r := e.run("mount", "g", mp); r.code != 0 {
				t.Fatalf("remount after the crash: %s", r)
			}
			g := e.waitResolved("g")
			all := int64(len(files) + 1)
			switch {
			case point == "gitresolve.after-chunk" && (g.Total >= all || g.Total == 0):
				t.Fatalf("after a crash past the first chunk the remount resolved %d of %d: the chunk was lost", g.Total, all)
			case point == "gitresolve.before-record" && g.Total != all:
				t.Fatalf("after a crash before the first chunk was recorded the remount resolved %d, want %d", g.Total, all)
			}
			restore := loseObjects(t, repo)
			defer restore()
			checkTree(t, mp, files)
			e.unmount(mp)
			e.ok("gc")
			e.fsck()
		})
	}
}

// TestGitResolveUnmount: an unmount while the resolution runs stops it
// and leaves nothing broken: fsck is clean, and the next mount finishes
// it.
func TestGitResolveUnmount(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo, files := manyFilesRepo(t, e, 1500)
	e.ok("create", "g", "--from-git", repo)
	mp := e.mountAt("g")
	e.unmount(mp) // at once: the resolution of 1,500 files has barely begun
	e.fsck()
	if !strings.Contains(e.daemonLog(), "stopped after") {
		t.Logf("the resolution ended before the unmount (nothing stopped):\n%s", e.daemonLog())
	}
	mp = e.mountAt("g")
	g := e.waitResolved("g")
	if g.Resolved != g.Total {
		t.Fatalf("resolution after the remount: %+v", g)
	}
	defer loseObjects(t, repo)()
	checkTree(t, mp, files)
	e.unmount(mp)
	e.fsck()
}
