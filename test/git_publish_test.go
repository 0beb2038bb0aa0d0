package test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// gitRun runs acyclicfs with gitEnv (a git identity) and returns the result.
func (e *env) gitRun(args ...string) result {
	e.t.Helper()
	r, err := runCmd(e.command(gitEnv, args...))
	if err != nil {
		e.t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// gitOK is gitRun for a command that must succeed.
func (e *env) gitOK(args ...string) string {
	e.t.Helper()
	r := e.gitRun(args...)
	if r.code != 0 {
		e.t.Fatalf("acyclicfs %s: %s", strings.Join(args, " "), r)
	}
	return r.line()
}

// repoSnap is what publish must leave alone in REPO: the work tree's
// status, the index file's bytes, every ref but the published branch.
type repoSnap struct {
	status string
	index  []byte
	refs   string
}

func snapRepo(t *testing.T, repo, except string) repoSnap {
	t.Helper()
	idx, err := os.ReadFile(filepath.Join(repo, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, l := range strings.Split(git(t, repo, "for-each-ref", "--format=%(refname) %(objectname)"), "\n") {
		if l != "" && !strings.HasPrefix(l, except+" ") {
			refs = append(refs, l)
		}
	}
	return repoSnap{git(t, repo, "status", "--porcelain"), idx, strings.Join(refs, "\n")}
}

func (s repoSnap) same(t *testing.T, o repoSnap) {
	t.Helper()
	if s.status != o.status {
		t.Errorf("REPO's status changed: %q -> %q", s.status, o.status)
	}
	if !bytes.Equal(s.index, o.index) {
		t.Errorf("REPO's index file changed")
	}
	if s.refs != o.refs {
		t.Errorf("REPO's other refs changed:\n%s\n->\n%s", s.refs, o.refs)
	}
}

// gitRepo3 makes REPO with branches main (checked out), feature and other,
// a clone of it checked out on feature imported as workspace ws, and binds
// ws to REPO's feature. It returns the env and REPO's path.
func gitRepo3(t *testing.T, ws string) (*env, string) {
	t.Helper()
	needTool(t, "git")
	e := newMountEnv(t)
	repo := filepath.Join(e.dir, "repo")
	writeTree(t, repo, map[string]string{
		"a.txt": tenLines, "b.txt": "b\n", ".gitignore": "*.log\nbuild/\n",
		"keep.log": "tracked although ignored\n",
	})
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", "-A")
	git(t, repo, "add", "-f", "keep.log")
	git(t, repo, "commit", "-q", "-m", "start")
	git(t, repo, "branch", "feature")
	git(t, repo, "branch", "other")
	co := filepath.Join(e.dir, "co-"+ws)
	git(t, e.dir, "clone", "-q", "-b", "feature", repo, co)
	e.ok("create", ws, "--from", co)
	e.gitOK("git", "bind", ws, repo, "--branch", "feature")
	return e, repo
}

// gitShow is `git show WS --json`.
type gitShowJSON struct {
	Repo, Branch, Base, Published, Current, OnLand string
	Moved                                          bool
}

func (e *env) gitShow(ws string) gitShowJSON {
	e.t.Helper()
	var s struct {
		Repo      string `json:"repo"`
		Branch    string `json:"branch"`
		Base      string `json:"base"`
		Published string `json:"published"`
		Current   string `json:"current"`
		OnLand    string `json:"on_land"`
		Moved     bool   `json:"moved"`
	}
	if err := json.Unmarshal([]byte(e.gitRun("git", "show", ws, "--json").stdout), &s); err != nil {
		e.t.Fatalf("git show %s --json: %v", ws, err)
	}
	return gitShowJSON{s.Repo, s.Branch, s.Base, s.Published, s.Current, s.OnLand, s.Moved}
}

// TestGitPublishFromMount: a commit made in the mount and uncommitted
// changes after it reach REPO's bound branch: the commit as it is, the
// changes as one commit on top whose message lists the workspace's log;
// ignored files stay out, a tracked file matching an ignore pattern is
// in. REPO's work tree, index and other refs are untouched. A second
// publish is a no-op.
func TestGitPublishFromMount(t *testing.T) {
	t.Parallel()
	e, repo := gitRepo3(t, "ws")
	show := e.gitShow("ws")
	if show.Branch != "refs/heads/feature" || show.Moved || show.Base != strings.TrimSpace(git(t, repo, "rev-parse", "feature")) {
		t.Fatalf("git show after bind: %+v", show)
	}
	before := snapRepo(t, repo, "refs/heads/feature")
	mp := e.mountAt("ws")
	e.commitIn(mp, `echo agent >> b.txt`, "agent work")
	e.execOK(mp, `set -e; echo more >> a.txt; echo new > new.txt; echo junk > junk.log; mkdir build; echo o > build/out; echo kept >> keep.log`)
	e.waitIdle("ws")

	out := e.gitOK("git", "publish", "ws", "-m", "agent: finish")
	if !strings.HasPrefix(out, "published feature: ") {
		t.Fatalf("publish printed %q", out)
	}
	subjects := git(t, repo, "log", "--format=%s", "feature")
	if subjects != "agent: finish\nagent work\nstart\n" {
		t.Fatalf("git log feature:\n%s", subjects)
	}
	body := git(t, repo, "log", "-1", "--format=%b", "feature")
	if !strings.Contains(body, "since the last publish") || !strings.Contains(body, e.head("ws")) {
		t.Errorf("the commit's message does not list the workspace's log:\n%s\nlog head %s", body, e.head("ws"))
	}
	files := git(t, repo, "ls-tree", "-r", "--name-only", "feature")
	if files != ".gitignore\na.txt\nb.txt\nkeep.log\nnew.txt\n" {
		t.Fatalf("published tree:\n%s", files)
	}
	if got := git(t, repo, "show", "feature:keep.log"); got != "tracked although ignored\nkept\n" {
		t.Errorf("keep.log = %q", got)
	}
	if got := git(t, repo, "show", "feature:a.txt"); got != tenLines+"more\n" {
		t.Errorf("a.txt = %q", got)
	}
	git(t, repo, "fsck", "--strict", "--no-progress")
	snapRepo(t, repo, "refs/heads/feature").same(t, before)
	if s := e.gitShow("ws"); s.Published != strings.TrimSpace(git(t, repo, "rev-parse", "feature")) || s.Moved {
		t.Errorf("git show after publish: %+v", s)
	}
	// Nothing new: a no-op.
	if out := e.gitOK("git", "publish", "ws"); !strings.HasPrefix(out, "already published: feature at ") {
		t.Fatalf("second publish printed %q", out)
	}
	// A later change after the commit of uncommitted changes: on top of it.
	e.execOK(mp, `echo later >> b.txt`)
	e.waitIdle("ws")
	e.gitOK("git", "publish", "ws", "-m", "later")
	if subjects := git(t, repo, "log", "--format=%s", "feature"); subjects != "later\nagent: finish\nagent work\nstart\n" {
		t.Fatalf("git log feature after the third publish:\n%s", subjects)
	}
	e.unmount(mp)
	e.fsck()
}

// TestGitPublishRefused: publish while REPO's branch moved since the
// workspace agreed with it exits 3 and changes nothing; bind of a bound
// workspace needs --force; unbind ends publishing.
func TestGitPublishRefused(t *testing.T) {
	t.Parallel()
	e, repo := gitRepo3(t, "ws")
	e.fails(3, "git", "bind", "ws", repo, "--branch", "other")
	e.fails(2, "git", "bind", "ws", repo, "--branch", "nosuch", "--force")
	e.fails(2, "git", "bind", "ws", e.dir, "--force")
	e.fails(2, "git", "publish", "nosuch")
	// Without --branch: REPO's current branch (main); back to feature.
	e.gitOK("git", "bind", "ws", repo, "--force")
	if s := e.gitShow("ws"); s.Branch != "refs/heads/main" || s.Repo != filepath.Join(repo, ".git") {
		t.Fatalf("bind without --branch: %+v", s)
	}
	e.gitOK("git", "bind", "ws", repo, "--branch", "feature", "--force")
	e.fails(2, "git", "bind", "ws", repo, "--branch", "feature", "--force", "--on-land", "sometimes")

	// Someone else moves feature.
	other := filepath.Join(e.dir, "other-clone")
	git(t, e.dir, "clone", "-q", "-b", "feature", repo, other)
	writeTree(t, other, map[string]string{"c.txt": "c\n"})
	git(t, other, "add", "-A")
	git(t, other, "commit", "-q", "-m", "elsewhere")
	git(t, other, "push", "-q", "origin", "feature")
	if !e.gitShow("ws").Moved {
		t.Fatalf("git show does not see feature moved")
	}
	work := filepath.Join(e.dir, "work")
	e.ok("export", "ws", work)
	writeTree(t, work, map[string]string{"a.txt": "changed\n"})
	e.ok("commit", "ws", work)
	before := snapRepo(t, repo, "")
	r := e.gitRun("git", "publish", "ws")
	if r.code != 3 || !strings.Contains(r.stderr, "git pull") {
		t.Fatalf("publish after feature moved: %s", r)
	}
	snapRepo(t, repo, "").same(t, before)

	e.ok("git", "unbind", "ws")
	e.fails(2, "git", "publish", "ws")
	e.fails(2, "git", "show", "ws")
	e.fsck()
}

// TestGitPublishTwoWorkspacesOneBranch: two workspaces bound to one
// branch publish at once: exactly one wins, the other exits 3, and the
// branch holds the winner's commit.
func TestGitPublishTwoWorkspacesOneBranch(t *testing.T) {
	t.Parallel()
	e, repo := gitRepo3(t, "w1")
	co := filepath.Join(e.dir, "co-w1")
	e.ok("create", "w2", "--from", co)
	e.gitOK("git", "bind", "w2", repo, "--branch", "feature")
	for _, ws := range []string{"w1", "w2"} {
		work := filepath.Join(e.dir, "work-"+ws)
		e.ok("export", ws, work)
		writeTree(t, work, map[string]string{ws + ".txt": ws + "\n"})
		e.ok("commit", ws, work)
	}
	start := strings.TrimSpace(git(t, repo, "rev-parse", "feature"))
	var wg sync.WaitGroup
	res := make([]result, 2)
	for i, ws := range []string{"w1", "w2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := runCmd(e.command(gitEnv, "git", "publish", ws, "--json"))
			if err != nil {
				t.Error(err)
			}
			res[i] = r
		}()
	}
	wg.Wait()
	won := -1
	for i, r := range res {
		switch r.code {
		case 0:
			if won >= 0 {
				t.Fatalf("both publishes won:\n%s\n%s", res[0], res[1])
			}
			won = i
		case 3:
		default:
			t.Fatalf("publish %d: %s", i+1, r)
		}
	}
	if won < 0 {
		t.Fatalf("no publish won:\n%s\n%s", res[0], res[1])
	}
	var pr struct{ Old, New string }
	if err := json.Unmarshal([]byte(res[won].stdout), &pr); err != nil {
		t.Fatal(err)
	}
	if now := strings.TrimSpace(git(t, repo, "rev-parse", "feature")); now != pr.New || pr.Old != start {
		t.Fatalf("feature is %s; the winner published %s..%s from %s", now, pr.Old, pr.New, start)
	}
	winner := []string{"w1", "w2"}[won]
	if files := git(t, repo, "ls-tree", "--name-only", "feature"); !strings.Contains(files, winner+".txt") || strings.Contains(files, []string{"w2", "w1"}[won]+".txt") {
		t.Fatalf("feature's files: %s", files)
	}
	e.fsck()
}

// TestGitLandPublishes: a workspace bound with --on-land publish
// publishes when a fork lands into it, and land says so.
func TestGitLandPublishes(t *testing.T) {
	t.Parallel()
	e, repo := gitRepo3(t, "ws")
	e.gitOK("git", "bind", "ws", repo, "--branch", "feature", "--on-land", "publish", "--force")
	e.ok("fork", "ws", "kid")
	work := filepath.Join(e.dir, "work")
	e.ok("export", "kid", work)
	writeTree(t, work, map[string]string{"kid.txt": "from kid\n"})
	e.ok("commit", "kid", work)
	r := e.gitRun("land", "kid")
	if r.code != 0 || !strings.Contains(r.stdout, "published feature: ") {
		t.Fatalf("land kid: %s", r)
	}
	if got := git(t, repo, "show", "feature:kid.txt"); got != "from kid\n" {
		t.Fatalf("feature:kid.txt = %q", got)
	}
	// Someone else moves feature: the next land stands, its publish is
	// refused and reported, land exits 0.
	pushTo(t, e, repo, "feature", "pusher", map[string]string{"other.txt": "other\n"}, "elsewhere")
	moved := strings.TrimSpace(git(t, repo, "rev-parse", "feature"))
	e.ok("fork", "ws", "kid2")
	work2 := filepath.Join(e.dir, "work2")
	e.ok("export", "kid2", work2)
	writeTree(t, work2, map[string]string{"kid2.txt": "from kid2\n"})
	e.ok("commit", "kid2", work2)
	r = e.gitRun("land", "kid2")
	if r.code != 0 || !strings.Contains(r.stderr, "warning: landed; publishing ws") || !strings.Contains(r.stderr, "not a fast-forward") {
		t.Fatalf("land kid2 with feature moved: %s", r)
	}
	if got := readFile(t, filepath.Join(e.exportTo("ws", "ws-after"), "kid2.txt")); got != "from kid2\n" {
		t.Fatalf("the land did not stand: kid2.txt = %q", got)
	}
	if now := strings.TrimSpace(git(t, repo, "rev-parse", "feature")); now != moved {
		t.Fatalf("feature moved by a refused publish: %s -> %s", moved, now)
	}
	e.fsck()
}

// TestGitPublishFromGitWorkspace: a workspace made by create --from-git
// (objects shared through alternates) publishes a commit made in its
// mount to its branch; REPO's dirty work tree, staged index and other refs
// stay as they were.
func TestGitPublishFromGitWorkspace(t *testing.T) {
	t.Parallel()
	needTool(t, "git")
	e := newMountEnv(t)
	repo := threeBranches(t, e)
	e.ok("create", "f", "--from-git", repo+"@feature")
	before := snapRepo(t, repo, "refs/heads/feature")
	mp := e.mountAt("f")
	e.commitIn(mp, "echo inside > src/inside.txt", "inside f")
	e.waitIdle("f")
	if out := e.gitOK("git", "publish", "f"); !strings.HasPrefix(out, "published feature: ") {
		t.Fatalf("publish printed %q", out)
	}
	if got := git(t, repo, "log", "--format=%s", "feature"); got != "inside f\nfeature work\nstart\n" {
		t.Fatalf("git log feature:\n%s", got)
	}
	// The commit itself, not a new one: nothing was uncommitted.
	if got, want := strings.TrimSpace(git(t, repo, "rev-parse", "feature")), strings.TrimSpace(git(t, mp, "rev-parse", "HEAD")); got != want {
		t.Fatalf("feature = %s, the workspace's HEAD = %s", got, want)
	}
	git(t, repo, "fsck", "--strict", "--no-progress")
	snapRepo(t, repo, "refs/heads/feature").same(t, before)
	e.unmount(mp)
	e.fsck()
}

// pushTo commits files on REPO's branch from a fresh clone and pushes.
func pushTo(t *testing.T, e *env, repo, branch, name string, files map[string]string, msg string) {
	t.Helper()
	c := filepath.Join(e.dir, name)
	git(t, e.dir, "clone", "-q", "-b", branch, repo, c)
	writeTree(t, c, files)
	git(t, c, "add", "-A")
	git(t, c, "commit", "-q", "-m", msg)
	git(t, c, "push", "-q", "origin", branch)
}

// TestGitPullIntoMount: a commit pushed to REPO's branch reaches a
// mounted workspace when its session ends (a pull run during the session
// is queued for its final close), merged git-aware with the workspace's
// own commit: git log inside shows both, the files of both are there, git
// status is clean; the merged state then publishes as a fast-forward.
func TestGitPullIntoMount(t *testing.T) {
	t.Parallel()
	e, repo := gitRepo3(t, "ws")
	mp := e.mountAt("ws")
	e.commitIn(mp, `echo mine > mine.txt`, "mine")
	pushTo(t, e, repo, "feature", "pusher", map[string]string{"theirs.txt": "theirs\n"}, "theirs")
	if s := e.gitShow("ws"); !s.Moved {
		t.Fatalf("git show: feature did not move: %+v", s)
	}

	// A session open in the mount: the pull is queued for its final
	// close; nothing moves before.
	f := e.fifo("hold")
	bg := e.startExec(mp, "read x < "+f.path)
	w := f.opened(10 * time.Second)
	head := e.head("ws")
	if r := e.gitRun("git", "pull", "ws"); r.code != 0 || r.line() != "queued" {
		t.Fatalf("pull with a session open: %s", r)
	}
	if e.head("ws") != head {
		t.Fatalf("the head moved while the session ran")
	}
	if s := e.gitShow("ws"); !s.Moved {
		t.Fatalf("the binding moved while the session ran: %+v", s)
	}
	release(t, w)
	if r := bg.wait(t); r.code != 0 || !strings.Contains(r.stderr, "rebased") {
		t.Fatalf("the session's end: %s", r)
	}
	e.waitIdle("ws")
	got := inSession(t, mp, gitShellEnv()+`cat mine.txt theirs.txt; git log --format=%s | sort | tr '\n' ' '; echo; git status --porcelain`)
	if got != "mine\ntheirs\nmine start theirs \n" && !strings.HasPrefix(got, "mine\ntheirs\n") {
		t.Fatalf("the mount after pull:\n%s", got)
	}
	for _, s := range []string{"mine ", "theirs ", "start "} {
		if !strings.Contains(got, s) {
			t.Fatalf("git log in the mount lacks %q:\n%s", s, got)
		}
	}
	if lines := strings.Split(strings.TrimSpace(got), "\n"); len(lines) != 3 {
		t.Fatalf("git status in the mount is not clean:\n%s", got)
	}
	if s := e.gitShow("ws"); s.Moved || s.Base != strings.TrimSpace(git(t, repo, "rev-parse", "feature")) {
		t.Fatalf("git show after pull: %+v", s)
	}
	// Pulled again: nothing to do.
	if out := e.gitOK("git", "pull", "ws"); out != "current" {
		t.Fatalf("second pull printed %q", out)
	}
	// An idle mount: the pull runs at once and the mount shows it.
	pushTo(t, e, repo, "feature", "pusher2", map[string]string{"second.txt": "second\n"}, "second")
	if out := e.gitOK("git", "pull", "ws"); out != "rebased" {
		t.Fatalf("pull into the idle mount printed %q", out)
	}
	if got := inSession(t, mp, gitShellEnv()+`cat second.txt; git status --porcelain`); got != "second\n" {
		t.Fatalf("the idle mount after pull: %q", got)
	}
	// The merge is a fast-forward of feature.
	e.gitOK("git", "publish", "ws")
	subjects := git(t, repo, "log", "--format=%s", "feature")
	for _, s := range []string{"mine\n", "theirs\n", "second\n", "start\n"} {
		if !strings.Contains(subjects, s) {
			t.Fatalf("feature after publish lacks %q:\n%s", s, subjects)
		}
	}
	git(t, repo, "fsck", "--strict", "--no-progress")
	e.unmount(mp)
	e.fsck()
}

// TestGitPullConflict: the workspace and REPO's branch change the same
// line: pull exits 3 with the path, the conflict is recorded as a
// rebase's (status lists it, cat --conflict shows the sides, resolve
// settles it), and the binding took the commit in.
func TestGitPullConflict(t *testing.T) {
	t.Parallel()
	e, repo := gitRepo3(t, "ws")
	work := filepath.Join(e.dir, "work")
	e.ok("export", "ws", work)
	writeTree(t, work, map[string]string{"a.txt": strings.Replace(tenLines, "5\n", "five-ours\n", 1)})
	e.ok("commit", "ws", work)
	pushTo(t, e, repo, "feature", "pusher", map[string]string{"a.txt": strings.Replace(tenLines, "5\n", "five-theirs\n", 1)}, "theirs five")
	r := e.gitRun("git", "pull", "ws")
	if r.code != 3 || !strings.HasPrefix(r.stdout, "conflicted\n") || !strings.Contains(r.stdout, "a.txt") {
		t.Fatalf("pull: %s", r)
	}
	if cs := e.statusOf("ws").Conflicts; len(cs) == 0 {
		t.Fatalf("no conflict recorded")
	}
	if got := readConflictSide(e, "theirs"); !strings.Contains(got, "five-theirs") {
		t.Fatalf("theirs side: %q", got)
	}
	if got := readConflictSide(e, "ours"); !strings.Contains(got, "five-ours") {
		t.Fatalf("ours side: %q", got)
	}
	e.ok("resolve", "ws", "a.txt", "--theirs")
	if got := readFile(t, filepath.Join(e.exportTo("ws", "after"), "a.txt")); !strings.Contains(got, "five-theirs") {
		t.Fatalf("a.txt after resolve: %q", got)
	}
	if s := e.gitShow("ws"); s.Moved {
		t.Fatalf("the binding did not take the commit in: %+v", s)
	}
	e.fsck()
}

// readConflictSide is `cat ws a.txt --conflict side`'s whole output.
func readConflictSide(e *env, side string) string {
	e.t.Helper()
	return e.run("cat", "ws", "a.txt", "--conflict", side).stdout
}

// TestGitPullFromGitWorkspace: a create --from-git workspace (objects
// shared through alternates) with a commit of its own pulls its branch's
// advance: the export's repository has both commits in a merge, a clean
// status and a clean fsck; REPO's work tree, index and other refs stay.
func TestGitPullFromGitWorkspace(t *testing.T) {
	t.Parallel()
	needTool(t, "git")
	e := newMountEnv(t)
	repo := threeBranches(t, e)
	e.ok("create", "f", "--from-git", repo+"@feature")
	mp := e.mountAt("f")
	e.commitIn(mp, "echo inside > src/inside.txt", "inside f")
	e.unmount(mp)
	before := snapRepo(t, repo, "refs/heads/feature")
	// feature moves in REPO: a commit made on it without a checkout.
	tree := strings.TrimSpace(git(t, repo, "rev-parse", "feature^{tree}"))
	c := strings.TrimSpace(git(t, repo, "commit-tree", tree, "-p", "feature", "-m", "upstream"))
	git(t, repo, "update-ref", "refs/heads/feature", c)
	before2 := snapRepo(t, repo, "")
	if out := e.gitOK("git", "pull", "f"); out != "rebased" {
		t.Fatalf("pull printed %q", out)
	}
	snapRepo(t, repo, "").same(t, before2)
	_ = before
	out := e.checkRepo("f")
	log := git(t, out, "log", "--format=%s", "feature")
	for _, s := range []string{"inside f\n", "upstream\n", "feature work\n"} {
		if !strings.Contains(log, s) {
			t.Fatalf("git log after pull lacks %q:\n%s", s, log)
		}
	}
	e.fsck()
}

// TestGitFromGitForksLand: two forks of a create --from-git workspace
// (objects shared through alternates) commit and land: the git-aware
// merge reads the repository's objects through the sides' alternates and
// makes a merge commit, where it recorded a ref conflict before.
func TestGitFromGitForksLand(t *testing.T) {
	t.Parallel()
	needTool(t, "git")
	e := newEnv(t)
	repo := threeBranches(t, e)
	e.ok("create", "m", "--from-git", repo+"@feature")
	for _, f := range []string{"a", "b"} {
		e.ok("fork", "m", f)
		work := filepath.Join(e.dir, "work-"+f)
		e.ok("export", f, work)
		writeTree(t, work, map[string]string{f + ".txt": f + "\n"})
		git(t, work, "add", "-A")
		git(t, work, "commit", "-q", "-m", "from "+f)
		e.ok("commit", f, work)
	}
	e.ok("land", "a")
	e.ok("land", "b")
	log := git(t, e.checkRepo("m"), "log", "--format=%s", "feature")
	for _, s := range []string{"from a\n", "from b\n", "feature work\n"} {
		if !strings.Contains(log, s) {
			t.Fatalf("git log after both lands lacks %q:\n%s", s, log)
		}
	}
	e.fsck()
}

// TestMCPGitPublish: an agent publishes and pulls through `acyclicfs
// mcp`: git_publish moves the bound branch (the identity comes from the
// MCP server's environment), a refused publish is a tool error with exit
// 3, git_pull takes the branch's advance in.
func TestMCPGitPublish(t *testing.T) {
	t.Parallel()
	e, repo := gitRepo3(t, "ws")
	work := filepath.Join(e.dir, "work")
	e.ok("export", "ws", work)
	writeTree(t, work, map[string]string{"mcp.txt": "via mcp\n"})
	e.ok("commit", "ws", work)
	// The MCP server (and the commands it runs) with a git identity.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(bin, "--store", e.store, "mcp")
	cmd.Dir, cmd.Env = e.dir, append(os.Environ(), gitEnv...)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var pub struct{ Result struct{ Old, New string } }
	structured(t, call(t, cs, "git_publish", map[string]any{"workspace": "ws", "message": "from mcp"}, false), &pub)
	if now := strings.TrimSpace(git(t, repo, "rev-parse", "feature")); now != pub.Result.New || pub.Result.Old == now {
		t.Fatalf("feature = %s after git_publish %+v", now, pub)
	}
	pushTo(t, e, repo, "feature", "pusher", map[string]string{"up.txt": "up\n"}, "upstream")
	writeTree(t, work, map[string]string{"mcp.txt": "via mcp, again\n"})
	e.ok("commit", "ws", work)
	if msg := text(call(t, cs, "git_publish", map[string]any{"workspace": "ws"}, true)); !strings.Contains(msg, "exit 3") {
		t.Fatalf("refused publish: %q", msg)
	}
	call(t, cs, "git_pull", map[string]any{"workspace": "ws"}, false)
	call(t, cs, "git_publish", map[string]any{"workspace": "ws"}, false)
	if got := git(t, repo, "show", "feature:up.txt"); got != "up\n" {
		t.Fatalf("feature:up.txt = %q", got)
	}
	if got := git(t, repo, "show", "feature:mcp.txt"); got != "via mcp, again\n" {
		t.Fatalf("feature:mcp.txt = %q", got)
	}
	e.fsck()
}

// TestGitPublishOtherBranch: publish --branch B creates B (or moves it)
// without moving the binding; bind through a linked worktree of REPO
// records REPO's common git directory.
func TestGitPublishOtherBranch(t *testing.T) {
	t.Parallel()
	e, repo := gitRepo3(t, "ws")
	before := e.gitShow("ws")
	work := filepath.Join(e.dir, "work")
	e.ok("export", "ws", work)
	writeTree(t, work, map[string]string{"side.txt": "side\n"})
	e.ok("commit", "ws", work)
	if out := e.gitOK("git", "publish", "ws", "--branch", "side"); !strings.HasPrefix(out, "published side: -..") {
		t.Fatalf("publish --branch side printed %q", out)
	}
	if got := git(t, repo, "show", "side:side.txt"); got != "side\n" {
		t.Fatalf("side:side.txt = %q", got)
	}
	if got := git(t, repo, "log", "--format=%s", "side"); !strings.HasSuffix(got, "start\n") {
		t.Fatalf("side's history: %q", got)
	}
	if after := e.gitShow("ws"); after != before {
		t.Fatalf("publish --branch moved the binding: %+v -> %+v", before, after)
	}
	e.fails(2, "git", "publish", "ws", "--branch", "bad..name")

	wt := filepath.Join(e.dir, "linked")
	git(t, repo, "worktree", "add", "-q", wt, "other")
	e.gitOK("git", "bind", "ws", wt, "--force")
	if s := e.gitShow("ws"); s.Repo != filepath.Join(repo, ".git") || s.Branch != "refs/heads/other" {
		t.Fatalf("bind through a linked worktree: %+v", s)
	}
	e.fsck()
}
