package workspace

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var gitTestEnv = []string{
	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent",
	"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com",
	"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com",
}

func runGit(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), gitTestEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// withChecks runs rapid with n checks unless the caller set -rapid.checks:
// each check here runs git dozens of times.
func withChecks(n int) (restore func()) {
	f := flag.Lookup("rapid.checks")
	given := false
	flag.Visit(func(v *flag.Flag) { given = given || v.Name == "rapid.checks" })
	if f == nil || given {
		return func() {}
	}
	old := f.Value.String()
	_ = f.Value.Set(fmt.Sprint(n))
	return func() { _ = f.Value.Set(old) }
}

// TestGitHistoriesProperty: random histories of two forks of a small git
// repository — edits committed with git in either fork or in main, lands
// in any order, conflicts settled by a random side. After every step, in
// every workspace's head: git fsck is clean, no file under .git holds a
// conflict marker, and every commit ever made is still reachable from a
// ref or a reflog of some head.
func TestGitHistoriesProperty(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	defer withChecks(12)()
	rapid.Check(t, func(rt *rapid.T) {
		root := t.TempDir()
		m, err := Open(filepath.Join(root, "store"), Options{NoSync: true})
		if err != nil {
			rt.Fatal(err)
		}
		defer m.Close()
		src := filepath.Join(root, "src")
		write(t, src, map[string]string{"a.txt": "a1\na2\na3\n", "b.txt": "b1\nb2\nb3\n", "c.txt": "c1\n"})
		for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "start"}} {
			if _, err := runGit(src, args...); err != nil {
				rt.Fatal(err)
			}
		}
		if _, _, err := m.Create(context.Background(), "main", src); err != nil {
			rt.Fatal(err)
		}
		for _, f := range []string{"f1", "f2"} {
			if _, err := m.Fork("main", f, ""); err != nil {
				rt.Fatal(err)
			}
		}
		made := map[string]string{} // commit id -> the step that made it
		n := 0
		export := func(ws string) string {
			w, err := m.Get(ws)
			if err != nil {
				rt.Fatal(err)
			}
			n++
			dir := filepath.Join(root, fmt.Sprintf("x%d-%s", n, ws))
			if _, err := m.Export(context.Background(), w.Head, dir, false); err != nil {
				rt.Fatal(err)
			}
			return dir
		}
		// Both forks commit first, so that every history has work on two
		// sides to merge; then anything, lands included, in any order.
		ops := append([]string{"c1", "c2"}, rapid.SliceOfN(rapid.SampledFrom([]string{"c1", "c2", "cm", "l1", "l2", "l1", "l2"}), 3, 8).Draw(rt, "ops")...)
		for i, o := range ops {
			op, ws := map[byte]string{'c': "commit", 'l': "land"}[o[0]], map[byte]string{'1': "f1", '2': "f2", 'm': "main"}[o[1]]
			step := fmt.Sprintf("%d %s %s", i, op, ws)
			switch op {
			case "commit":
				dir := export(ws)
				file := rapid.SampledFrom([]string{"a.txt", "b.txt", "c.txt"}).Draw(rt, "file")
				line := rapid.IntRange(0, 3).Draw(rt, "line")
				b, _ := os.ReadFile(filepath.Join(dir, file))
				lines := strings.SplitAfter(string(b), "\n")
				text := fmt.Sprintf("%s by %s at %d\n", file, ws, i)
				if line < len(lines)-1 {
					lines[line] = text
				} else {
					lines = append(lines[:len(lines)-1], text)
				}
				write(t, dir, map[string]string{file: strings.Join(lines, "")})
				if rapid.Bool().Draw(rt, "branch") {
					if _, err := runGit(dir, "checkout", "-q", "-B", "side-"+ws); err != nil {
						rt.Fatal(err)
					}
				}
				for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", step}} {
					if out, err := runGit(dir, args...); err != nil && !strings.Contains(out, "nothing to commit") {
						rt.Fatal(err)
					}
				}
				head, err := runGit(dir, "rev-parse", "HEAD")
				if err != nil {
					rt.Fatal(err)
				}
				made[strings.TrimSpace(head)] = step
				if _, _, err := m.Commit(context.Background(), ws, dir); err != nil {
					rt.Fatal(err)
				}
			case "land":
				res, err := m.Land(context.Background(), ws, RebaseOptions{})
				if err != nil {
					rt.Fatalf("%s: %v", step, err)
				}
				if res.Outcome == OutcomeConflicted {
					side := rapid.SampledFrom([]ResolveSide{ResolveOurs, ResolveTheirs}).Draw(rt, "side")
					if _, err := m.Resolve(ws, nil, ResolveOptions{All: true, Side: side}); err != nil {
						rt.Fatalf("%s: resolve: %v", step, err)
					}
					if rapid.Bool().Draw(rt, "land again") {
						if res, err := m.Land(context.Background(), ws, RebaseOptions{}); err != nil || res.Outcome == OutcomeConflicted {
							rt.Fatalf("%s: land after resolving everything: %v %+v", step, err, res)
						}
					}
				}
			}
			reachable := map[string]bool{}
			for _, w := range []string{"main", "f1", "f2"} {
				dir := export(w)
				if out, err := runGit(dir, "fsck", "--strict", "--no-progress", "--no-dangling"); err != nil {
					rt.Fatalf("after %s: git fsck in %s: %v\n%s", step, w, err, out)
				}
				filepath.Walk(filepath.Join(dir, ".git"), func(p string, fi os.FileInfo, err error) error {
					if err == nil && fi.Mode().IsRegular() && !strings.Contains(p, "/objects/") {
						if b, _ := os.ReadFile(p); strings.Contains(string(b), "<<<<<<<") {
							rt.Fatalf("after %s: markers in %s of %s", step, p, w)
						}
					}
					return nil
				})
				out, err := runGit(dir, "rev-list", "--all", "--reflog")
				if err != nil {
					rt.Fatalf("after %s: %v", step, err)
				}
				for _, c := range strings.Fields(out) {
					reachable[c] = true
				}
			}
			for c, by := range made {
				if !reachable[c] {
					rt.Fatalf("after %s: commit %s (made by %s) is reachable from no head", step, c, by)
				}
			}
		}
		if probs, err := m.Fsck(); err != nil || len(probs) > 0 {
			rt.Fatalf("store fsck: %v %v", err, probs)
		}
	})
}
