package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// sandboxGoal is issue #30's goal for a ready agent sandbox: fork, mount
// and the first git status inside, end to end.
const sandboxGoal = 150 * time.Millisecond

// sandboxResult is the time to a ready agent sandbox on the Go tree
// committed to git: a fork of a `create --from-git` workspace, mounted at
// a new mountpoint, and the first git status in it; beside git worktree
// add and cp -a of the same repository, each with its first git status.
type sandboxResult struct {
	files int
	// Per run, each step end to end (process starts included); total is
	// their sum (the steps run back to back).
	fork, mount, status, total []time.Duration
	// gitStatus is the status's own time inside the exec (status is the
	// exec's wall time: lease bind and lease end included).
	gitStatus []time.Duration
	// The references: git worktree add --detach, cp -a of the repository
	// (work tree and .git), each then its first git status.
	worktree, worktreeStatus, cp, cpStatus []time.Duration
	dirty                                  []int // lines any status printed (0: clean)
	err                                    string
}

// runSandbox measures the time to a ready sandbox; a failure is recorded
// in the report and the other measurements stand.
func runSandbox(ctx context.Context, e *benchEnv, res *results) error {
	sr := &sandboxResult{}
	res.sandbox = sr
	if err := e.sandboxRuns(ctx, sr); err != nil {
		sr.err = err.Error()
		logf("sandbox: failed (recorded, continuing): %v", err)
	}
	return nil
}

func (e *benchEnv) sandboxRuns(ctx context.Context, sr *sandboxResult) error {
	repo := filepath.Join(e.work, "sbx-git")
	logf("sandbox: committing a copy of the Go src tree to git")
	n, err := e.goTreeRepo(ctx, repo)
	if err != nil {
		return err
	}
	sr.files = n
	defer os.RemoveAll(repo)

	// The parent an agent forks: imported from the branch with every file
	// stored (--resolve: a parent in use has had its git object
	// references resolved by its mounts, and a fork's mount then has none
	// to resolve), then mounted once with a git status in it (untimed), so
	// that its index carries the untracked cache and the fsmonitor token a
	// parent in use has.
	if _, err := e.acyCmd(ctx, "create", "sbx", "--from-git", repo, "--resolve"); err != nil {
		return err
	}
	outFile := filepath.Join(e.work, "sbx-status.out")
	status := func(dir string) string {
		return fmt.Sprintf("cd %s && git status --porcelain > %s", shq(dir), shq(outFile))
	}
	dirty := func() int {
		b, _ := os.ReadFile(outFile)
		return strings.Count(string(b), "\n")
	}
	exec := func(mp string) (work, wall time.Duration, err error) {
		return e.timeWrapper(ctx, []string{e.acy, "--store", e.store, "exec", mp, "--"}, "", status(mp))
	}
	mp, err := e.mountpoint("sbx")
	if err != nil {
		return err
	}
	if _, err := e.acyCmd(ctx, "mount", "sbx", mp); err != nil {
		forceUnmount(mp)
		return err
	}
	_, _, err = exec(mp)
	if _, uerr := e.acyCmd(ctx, "unmount", mp); uerr != nil {
		forceUnmount(mp)
		if err == nil {
			err = uerr
		}
	}
	if err != nil {
		return fmt.Errorf("the parent's first git status: %w", err)
	}

	for i := 0; i < e.cfg.runs; i++ {
		// The import, the copies and the previous run leave writeback
		// behind that the fork's fsync would pay for (see runForks).
		syscall.Sync()
		ws := fmt.Sprintf("sbx-%d", i)
		f, err := e.acyCmd(ctx, "fork", "sbx", ws)
		if err != nil {
			return err
		}
		mp, err := e.mountpoint(ws)
		if err != nil {
			return err
		}
		m, err := e.acyCmd(ctx, "mount", ws, mp)
		if err != nil {
			forceUnmount(mp)
			return err
		}
		work, wall, err := exec(mp)
		if _, uerr := e.acyCmd(ctx, "unmount", mp); uerr != nil {
			forceUnmount(mp)
			if err == nil {
				err = uerr
			}
		}
		if err != nil {
			return err
		}
		sr.fork, sr.mount, sr.status, sr.gitStatus = append(sr.fork, f.wall), append(sr.mount, m.wall), append(sr.status, wall), append(sr.gitStatus, work)
		sr.total = append(sr.total, f.wall+m.wall+wall)
		sr.dirty = append(sr.dirty, dirty())

		syscall.Sync()
		dst := filepath.Join(e.work, "sbx-worktree")
		w, err := runCmd(ctx, repo, nil, "git", "worktree", "add", "-q", "--detach", dst)
		if err != nil {
			return fmt.Errorf("git worktree add: %w", err)
		}
		_, ws2, err := e.timeWrapper(ctx, nil, "", status(dst))
		if err != nil {
			return err
		}
		sr.worktree, sr.worktreeStatus = append(sr.worktree, w.wall), append(sr.worktreeStatus, ws2)
		sr.dirty = append(sr.dirty, dirty())
		if _, err := runCmd(ctx, repo, nil, "git", "worktree", "remove", "--force", dst); err != nil {
			return fmt.Errorf("git worktree remove: %w", err)
		}

		syscall.Sync()
		dst = filepath.Join(e.work, "sbx-copy")
		c, err := runCmd(ctx, "/", nil, "cp", "-a", repo, dst)
		if err != nil {
			return err
		}
		_, cs, err := e.timeWrapper(ctx, nil, "", status(dst))
		if err != nil {
			return err
		}
		sr.cp, sr.cpStatus = append(sr.cp, c.wall), append(sr.cpStatus, cs)
		sr.dirty = append(sr.dirty, dirty())
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
		logf("sandbox: run %d: fork %v + mount %v + first git status %v (git's own %v) = %v; git worktree add %v + status %v; cp -a %v + status %v", i+1,
			f.wall.Round(time.Millisecond), m.wall.Round(time.Millisecond), wall.Round(time.Millisecond), work.Round(time.Millisecond),
			sr.total[i].Round(time.Millisecond), w.wall.Round(time.Millisecond), ws2.Round(time.Millisecond), c.wall.Round(time.Millisecond), cs.Round(time.Millisecond))
	}
	return nil
}

// sumDur adds two series run by run.
func sumDur(a, b []time.Duration) []time.Duration {
	s := make([]time.Duration, min(len(a), len(b)))
	for i := range s {
		s[i] = a[i] + b[i]
	}
	return s
}

func (r *results) sandboxMarkdown(b *strings.Builder) {
	sr := r.sandbox
	b.WriteString("\n## acyclicfs only: time to a ready agent sandbox\n\n")
	fmt.Fprintf(b, "The Go source tree committed to git (%d files), imported with `create --from-git --resolve` (every file stored, as a parent in use has them once its mounts resolved them; docs/git.md), then mounted once and `git status` run in it (untimed: the parent's index then carries the untracked cache and the fsmonitor token a parent in use has). Per run: `acyclicfs fork` of it, `acyclicfs mount` of the fork at a new mountpoint, `acyclicfs exec MP -- git status --porcelain` (its wall time: the lease's bind and end included; *git's own* is the status alone, timed inside the lease), each end to end with its process start, and their sum. Beside it, the same ready state natively: `git worktree add --detach` of the same commit, and `cp -a` of the repository (work tree and `.git`), each followed by its first `git status --porcelain`. %d run(s), median (min–max).\n\n", sr.files, len(sr.total))
	hdr := []string{"", "fork, or the copy", "mount", "first git status (exec for acyclicfs)", "git's own", "total", "goal", "met"}
	writeRow(b, hdr)
	writeSep(b, len(hdr))
	if st := durStat(sr.total); st.n > 0 {
		writeRow(b, []string{"acyclicfs", fmtStat(durStat(sr.fork)), fmtStat(durStat(sr.mount)), fmtStat(durStat(sr.status)), fmtStat(durStat(sr.gitStatus)),
			fmtStat(st), "≤ " + fmtSec(sandboxGoal.Seconds()), metStr(st.med <= sandboxGoal.Seconds())})
	}
	for _, v := range []struct {
		label     string
		make, sts []time.Duration
	}{
		{"git worktree add --detach", sr.worktree, sr.worktreeStatus},
		{"cp -a", sr.cp, sr.cpStatus},
	} {
		if len(v.make) > 0 {
			writeRow(b, []string{v.label, fmtStat(durStat(v.make)), "", fmtStat(durStat(v.sts)), "", fmtStat(durStat(sumDur(v.make, v.sts))), "", ""})
		}
	}
	fmt.Fprintf(b, "\nDirty lines (every status): %s.\n\n", intStatI(sr.dirty))
	if st := durStat(sr.total); st.n > 0 {
		fmt.Fprintf(b, "- ready sandbox (fork + mount + first git status) ≤ %s: %s — %s\n", fmtSec(sandboxGoal.Seconds()), fmtSec(st.med), metStr(st.med <= sandboxGoal.Seconds()))
	}
	if sr.err != "" {
		fmt.Fprintf(b, "- the sandbox measurement failed: `%s`\n", oneLine(sr.err))
	}
}
