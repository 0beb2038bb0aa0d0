package gitsafe

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A repository whose config (through an include) names a hooks path with
// a reference-transaction hook and an fsmonitor: plain git runs them,
// git with Args and Env does not.
func TestArgsWinOverRepositoryConfig(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	marks := filepath.Join(dir, "marks")
	hooks := filepath.Join(dir, "hooks")
	for _, d := range []string{marks, hooks} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull, "HOME=" + dir,
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com"}
	git := func(safe bool, args ...string) {
		t.Helper()
		env := append(os.Environ(), base...)
		if safe {
			args = Command(args...)
			env = append(env, Env()...)
		}
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = repo, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(false, "init", "-q")
	git(false, "commit", "-q", "--allow-empty", "-m", "x")
	for _, h := range []string{"reference-transaction", "fsmonitor"} {
		script := "#!/bin/sh\ntouch " + filepath.Join(marks, h) + "\n"
		if err := os.WriteFile(filepath.Join(hooks, h), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	inc := filepath.Join(dir, "included")
	if err := os.WriteFile(inc, []byte("[core]\n\thooksPath = "+hooks+"\n\tfsmonitor = "+filepath.Join(hooks, "fsmonitor")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(false, "config", "include.path", inc)
	ran := func() []string {
		ents, _ := os.ReadDir(marks)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
			os.Remove(filepath.Join(marks, e.Name()))
		}
		return out
	}
	git(true, "update-ref", "refs/heads/safe", "HEAD")
	git(true, "status", "--porcelain")
	if got := ran(); len(got) != 0 {
		t.Fatalf("with gitsafe, the repository's programs ran: %v", got)
	}
	git(false, "update-ref", "refs/heads/plain", "HEAD")
	git(false, "status", "--porcelain")
	if got := ran(); len(got) != 2 {
		t.Fatalf("without gitsafe, the programs that ran = %v, want both (the test proves nothing)", got)
	}
}
