package workspace

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

var testGitEnv = []string{
	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent",
	"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com",
	"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com",
}

func pubGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), testGitEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// boundWorkspace makes REPO (main, feature), a clone on feature imported
// as ws, bound to feature, with one uncommitted change.
func boundWorkspace(t *testing.T) (m *Manager, repo string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	repo = filepath.Join(dir, "repo")
	os.MkdirAll(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "a.txt"), []byte("a\n"), 0o644)
	pubGit(t, repo, "init", "-q", "-b", "main")
	pubGit(t, repo, "add", "-A")
	pubGit(t, repo, "commit", "-q", "-m", "start")
	pubGit(t, repo, "branch", "feature")
	co := filepath.Join(dir, "co")
	pubGit(t, dir, "clone", "-q", "-b", "feature", repo, co)
	os.WriteFile(filepath.Join(co, "a.txt"), []byte("changed\n"), 0o644)
	m, err := Open(filepath.Join(dir, "store"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if _, _, err := m.Create(context.Background(), "ws", co); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GitBind("ws", repo, GitBindOptions{Branch: "feature", Env: testGitEnv}); err != nil {
		t.Fatal(err)
	}
	return m, repo
}

// A branch moved between publish's read and its compare-and-swap: publish
// fails with ErrRefMoved, the branch keeps the other writer's value, the
// binding does not move.
func TestGitPublishLosesTheRace(t *testing.T) {
	m, repo := boundWorkspace(t)
	before, _, _, err := m.GitBinding("ws")
	if err != nil {
		t.Fatal(err)
	}
	var theirs string
	publishBeforeCAS = func(_, branch string) {
		tree := pubGit(t, repo, "rev-parse", "feature^{tree}")
		theirs = pubGit(t, repo, "commit-tree", tree, "-p", "feature", "-m", "someone else")
		pubGit(t, repo, "update-ref", branch, theirs)
	}
	t.Cleanup(func() { publishBeforeCAS = nil })
	_, err = m.GitPublish(context.Background(), "ws", PublishOptions{Env: testGitEnv})
	if !errors.Is(err, ErrRefMoved) {
		t.Fatalf("publish = %v, want ErrRefMoved", err)
	}
	if now := pubGit(t, repo, "rev-parse", "feature"); now != theirs {
		t.Fatalf("feature = %s, want the other writer's %s", now, theirs)
	}
	after, _, _, err := m.GitBinding("ws")
	if err != nil || after != before {
		t.Fatalf("binding moved: %+v -> %+v (%v)", before, after, err)
	}
	// Without the race, the same publish is refused as not a fast-forward.
	publishBeforeCAS = nil
	if _, err := m.GitPublish(context.Background(), "ws", PublishOptions{Env: testGitEnv}); !errors.Is(err, ErrNotFastForward) {
		t.Fatalf("publish after the move = %v, want ErrNotFastForward", err)
	}
}

// Publishing twice from the same store state is stable, and the second,
// from the object-name cache alone, names the same commit tree.
func TestGitPublishCacheAgrees(t *testing.T) {
	m, repo := boundWorkspace(t)
	res, err := m.GitPublish(context.Background(), "ws", PublishOptions{Env: testGitEnv})
	if err != nil || res.Committed == "" {
		t.Fatalf("publish = %+v, %v", res, err)
	}
	tree := pubGit(t, repo, "rev-parse", "feature^{tree}")
	// As another process would: the cache comes from its file.
	m.gn.oids.mu.Lock()
	m.gn.oids.m, m.gn.oids.loaded, m.gn.oids.dirty = nil, nil, nil
	m.gn.oids.mu.Unlock()
	res2, err := m.GitPublish(context.Background(), "ws", PublishOptions{Env: testGitEnv})
	if err != nil || !res2.Already || res2.New != res.New {
		t.Fatalf("second publish = %+v, %v", res2, err)
	}
	if got := pubGit(t, repo, "rev-parse", res.New+"^{tree}"); got != tree {
		t.Fatalf("tree %s, want %s", got, tree)
	}
}

// Special files (a FIFO here) are not published: git records none.
func TestGitPublishSkipsSpecialFiles(t *testing.T) {
	m, repo := boundWorkspace(t)
	w, err := m.Get("ws")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := m.Export(context.Background(), w.Head, dir, false); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Commit(context.Background(), "ws", dir); err != nil {
		t.Fatal(err)
	}
	root, _ := m.rootOf(mustHead(t, m, "ws"))
	if e, err := m.entryAt(root, "pipe"); err != nil || e == nil || !e.Kind.IsSpecial() {
		t.Fatalf("the workspace does not hold the FIFO: %+v %v", e, err)
	}
	if _, err := m.GitPublish(context.Background(), "ws", PublishOptions{Env: testGitEnv}); err != nil {
		t.Fatal(err)
	}
	if files := pubGit(t, repo, "ls-tree", "--name-only", "feature"); files != "a.txt" {
		t.Fatalf("published files: %q", files)
	}
}

func mustHead(t *testing.T, m *Manager, ws string) store.ID {
	t.Helper()
	w, err := m.Get(ws)
	if err != nil {
		t.Fatal(err)
	}
	return w.Head
}
