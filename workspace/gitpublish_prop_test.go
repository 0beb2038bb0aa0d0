package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// TestGitPublishProperty: two workspaces bound to one branch, with random
// edits, publishes (one at a time or both at once), pulls and pushes by
// someone else. After every step: the branch only moves forward (no
// commit it held is lost); each binding's base is a commit the branch
// held; a publish either moved the branch to the commit its binding now
// names, with the workspace's files, or failed with a refusal that moved
// neither the branch nor its binding; of two concurrent publishes with
// changes, at most one moved the branch.
func TestGitPublishProperty(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	defer withChecks(8)()
	rapid.Check(t, func(rt *rapid.T) {
		root := t.TempDir()
		repo := filepath.Join(root, "repo")
		write(t, repo, map[string]string{"a.txt": "a\n"})
		for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "start"}, {"branch", "b"}} {
			if out, err := runGit(repo, args...); err != nil {
				rt.Fatal(out, err)
			}
		}
		m, err := Open(filepath.Join(root, "store"), Options{NoSync: true})
		if err != nil {
			rt.Fatal(err)
		}
		defer m.Close()
		git := func(args ...string) string {
			out, err := runGit(repo, args...)
			if err != nil {
				rt.Fatal(err)
			}
			return strings.TrimSpace(out)
		}
		wss := []string{"w0", "w1"}
		dirs := map[string]string{}
		for _, ws := range wss {
			dirs[ws] = filepath.Join(root, "dir-"+ws)
			write(t, dirs[ws], map[string]string{"a.txt": "a\n"})
			if _, _, err := m.Create(context.Background(), ws, dirs[ws]); err != nil {
				rt.Fatal(err)
			}
			if _, err := m.GitBind(ws, repo, GitBindOptions{Branch: "b", Env: gitTestEnv}); err != nil {
				rt.Fatal(err)
			}
		}
		held := []string{git("rev-parse", "b")} // every value the branch had
		refusal := func(err error) bool {
			return errors.Is(err, ErrNotFastForward) || errors.Is(err, ErrRefMoved) || errors.Is(err, ErrBindingMoved)
		}
		check := func() {
			cur := git("rev-parse", "b")
			if cur != held[len(held)-1] {
				held = append(held, cur)
			}
			for _, h := range held {
				if _, err := runGit(repo, "merge-base", "--is-ancestor", h, cur); err != nil {
					rt.Fatalf("the branch lost %s (now %s)", h, cur)
				}
			}
			for _, ws := range wss {
				b, _, _, err := m.GitBinding(ws)
				if err != nil {
					rt.Fatal(err)
				}
				if _, err := runGit(repo, "merge-base", "--is-ancestor", b.Base, cur); err != nil {
					rt.Fatalf("%s's base %s is no commit the branch held", ws, b.Base)
				}
			}
		}
		publish := func(ws string) (PublishResult, error) {
			return m.GitPublish(context.Background(), ws, PublishOptions{Env: gitTestEnv})
		}
		binding := func(ws string) GitBinding {
			b, _, _, err := m.GitBinding(ws)
			if err != nil {
				rt.Fatal(err)
			}
			return b
		}
		// afterPublish checks one publish's outcome against ws's binding
		// before it.
		afterPublish := func(ws string, res PublishResult, err error, before GitBinding) {
			b, _, _, berr := m.GitBinding(ws)
			if berr != nil {
				rt.Fatal(berr)
			}
			switch {
			case err == nil && !res.Already:
				if b.Published != res.New || b.Base != res.New {
					rt.Fatalf("%s published %s, its binding names %s/%s", ws, res.New, b.Published, b.Base)
				}
				want, _ := os.ReadFile(filepath.Join(dirs[ws], "a.txt"))
				if got := git("show", res.New+":a.txt"); got != strings.TrimSpace(string(want)) {
					rt.Fatalf("%s published a.txt %q, its file holds %q", ws, got, want)
				}
			case err == nil:
			case refusal(err):
				if b != before {
					rt.Fatalf("refused publish of %s moved its binding: %+v -> %+v", ws, before, b)
				}
			default:
				rt.Fatalf("publish %s: %v", ws, err)
			}
		}
		n := 0
		rt.Repeat(map[string]func(*rapid.T){
			"edit": func(rt *rapid.T) {
				ws := rapid.SampledFrom(wss).Draw(rt, "ws")
				n++
				write(t, dirs[ws], map[string]string{"a.txt": fmt.Sprintf("%s edit %d\n", ws, n)})
				if _, _, err := m.Commit(context.Background(), ws, dirs[ws]); err != nil {
					rt.Fatal(err)
				}
			},
			"publish": func(rt *rapid.T) {
				ws := rapid.SampledFrom(wss).Draw(rt, "ws")
				before, bind := git("rev-parse", "b"), binding(ws)
				res, err := publish(ws)
				now := git("rev-parse", "b")
				if err != nil && now != before {
					rt.Fatalf("a refused publish moved the branch %s -> %s", before, now)
				}
				afterPublish(ws, res, err, bind)
				check()
			},
			"publish both at once": func(rt *rapid.T) {
				var wg sync.WaitGroup
				res := make([]PublishResult, 2)
				errs := make([]error, 2)
				binds := []GitBinding{binding(wss[0]), binding(wss[1])}
				for i, ws := range wss {
					wg.Add(1)
					go func() {
						defer wg.Done()
						res[i], errs[i] = publish(ws)
					}()
				}
				wg.Wait()
				moved := 0
				for i, ws := range wss {
					if errs[i] == nil && !res[i].Already {
						moved++
					}
					afterPublish(ws, res[i], errs[i], binds[i])
				}
				if moved > 1 {
					rt.Fatalf("both publishes moved the branch: %+v %+v", res[0], res[1])
				}
				check()
			},
			"push elsewhere": func(rt *rapid.T) {
				n++
				tree := git("rev-parse", "b^{tree}")
				c := git("commit-tree", tree, "-p", "b", "-m", fmt.Sprint("elsewhere ", n))
				git("update-ref", "refs/heads/b", c)
				check()
			},
			"pull": func(rt *rapid.T) {
				ws := rapid.SampledFrom(wss).Draw(rt, "ws")
				res, err := m.GitPull(t.Context(), ws, gitTestEnv)
				if err != nil {
					rt.Fatalf("pull %s: %v", ws, err)
				}
				if len(res.Conflicts) > 0 {
					// Take ours: the workspace's file.
					if _, err := m.Resolve(ws, nil, ResolveOptions{All: true, Side: ResolveOurs}); err != nil {
						rt.Fatal(err)
					}
				}
				w, err := m.Get(ws)
				if err != nil {
					rt.Fatal(err)
				}
				os.RemoveAll(dirs[ws])
				if _, err := m.Export(context.Background(), w.Head, dirs[ws], false); err != nil {
					rt.Fatal(err)
				}
				if b, _, _, _ := m.GitBinding(ws); b.Base != git("rev-parse", "b") {
					rt.Fatalf("%s's base after pull is %s, the branch %s", ws, b.Base, git("rev-parse", "b"))
				}
				check()
			},
		})
	})
}
