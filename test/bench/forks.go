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

// forkResult holds the acyclicfs-only measurements for one tree size.
type forkResult struct {
	files    int
	importNs time.Duration
	fork     []time.Duration // acyclicfs fork
	cp       []time.Duration // cp -a of the tree
	worktree []time.Duration // git worktree add of the same tree
	// capture: exec touching 10 files; overhead is exec's wall time beyond
	// the workload (lease bind + lease end = capture, publish).
	capOver    []time.Duration
	capUnmount []time.Duration
	// rebase: the same, but a sibling lands into the parent during the
	// lease, so lease end captures and rebases onto the new parent head.
	rebOver    []time.Duration
	rebUnmount []time.Duration
	rebErr     string
}

// runForks measures fork against cp -a and git worktree add, and the
// end-of-lease capture (and capture+rebase) with 10 changed files, for each
// tree size.
func runForks(ctx context.Context, e *benchEnv, res *results) error {
	for _, n := range e.cfg.forkSizes {
		fr := &forkResult{files: n}
		res.forks = append(res.forks, fr)
		src := filepath.Join(e.work, fmt.Sprintf("syn-%d", n))
		logf("forks: generating a %d-file tree", n)
		if err := genTree(src, n); err != nil {
			return err
		}
		ws := fmt.Sprintf("syn%d", n)
		r, err := e.acyCmd(ctx, "create", ws, "--from", src)
		if err != nil {
			return err
		}
		fr.importNs = r.wall
		logf("forks: imported %d files in %v", n, r.wall.Round(time.Millisecond))
		repo := filepath.Join(e.work, fmt.Sprintf("git-%d", n))
		if err := copyTree(ctx, src, repo); err != nil {
			return err
		}
		if err := mustSh(ctx, fmt.Sprintf("cd %s && git init -q && git add -A && git -c user.name=b -c user.email=b@example.com commit -qm base && git config gc.auto 0", shq(repo))); err != nil {
			return fmt.Errorf("git repo for %d files: %w", n, err)
		}
		for i := 0; i < e.cfg.runs; i++ {
			// The import and the git repository above (and the previous
			// run's capture) leave up to 100,000 files of writeback; the
			// fork's one fsync would pay for it under ext4's ordered mode
			// (30-68 ms at 100,000 files against 26 ms at 1,000 and 26 ms
			// at 100,000 on a quiet disk), as every timed workload does
			// not (timeChild).
			syscall.Sync()
			r, err := e.acyCmd(ctx, "fork", ws, fmt.Sprintf("%s-f%d", ws, i))
			if err != nil {
				return err
			}
			fr.fork = append(fr.fork, r.wall)

			// cp -a and git worktree add are reference points, run once:
			// at 100,000 files they take 4-30 s a run on this machine.
			cmp := ""
			if i == 0 {
				dst := filepath.Join(e.work, "copy")
				r, err = runCmd(ctx, "/", nil, "cp", "-a", src, dst)
				if err != nil {
					return err
				}
				fr.cp = append(fr.cp, r.wall)
				if err := os.RemoveAll(dst); err != nil {
					return err
				}

				r, err = runCmd(ctx, repo, nil, "git", "worktree", "add", "-q", "--detach", dst)
				if err != nil {
					return err
				}
				fr.worktree = append(fr.worktree, r.wall)
				if err := os.RemoveAll(dst); err != nil {
					return err
				}
				if _, err := runCmd(ctx, repo, nil, "git", "worktree", "prune"); err != nil {
					return err
				}

				cmp = fmt.Sprintf(", cp -a %v, worktree %v", fr.cp[i].Round(time.Millisecond), fr.worktree[i].Round(time.Millisecond))
			}

			// cp -a and git worktree add leave up to 100,000 files of
			// writeback behind; the capture's fsyncs would pay for it
			// (one run measured 772 ms against 43).
			syscall.Sync()
			over, um, err := e.captureOnce(ctx, ws, i, "")
			if err != nil {
				return fmt.Errorf("capture, %d files: %w", n, err)
			}
			fr.capOver = append(fr.capOver, over)
			fr.capUnmount = append(fr.capUnmount, um)

			if fr.rebErr == "" {
				over, um, err = e.captureRebase(ctx, ws, i)
				if err != nil {
					fr.rebErr = err.Error()
					logf("forks: capture+rebase failed (recorded, continuing): %v", err)
				} else {
					fr.rebOver = append(fr.rebOver, over)
					fr.rebUnmount = append(fr.rebUnmount, um)
				}
			}
			logf("forks: %d files run %d: fork %v%s, capture %v (+unmount %v)",
				n, i+1, fr.fork[i].Round(time.Millisecond), cmp, over.Round(time.Millisecond), um.Round(time.Millisecond))
		}
		if err := os.RemoveAll(repo); err != nil {
			return err
		}
	}
	return nil
}

// tenChanges appends to 10 existing files of a genTree tree.
func tenChanges(mp string) string {
	var b strings.Builder
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&b, "echo changed >> %s && ", shq(filepath.Join(mp, treeFile(i*7))))
	}
	b.WriteString("true")
	return b.String()
}

// captureOnce forks ws, mounts the fork, runs one exec changing 10 files
// (plus extra, a script run inside the same lease) and unmounts. It returns
// exec's wall time beyond the workload and the unmount time.
func (e *benchEnv) captureOnce(ctx context.Context, ws string, i int, extra string) (time.Duration, time.Duration, error) {
	name := fmt.Sprintf("%s-c%d", ws, i)
	if extra != "" {
		name = fmt.Sprintf("%s-r%d", ws, i)
	}
	if _, err := e.acyCmd(ctx, "fork", ws, name); err != nil {
		return 0, 0, err
	}
	mp, err := e.mountpoint(name)
	if err != nil {
		return 0, 0, err
	}
	// The lease end is measured, not the warm-up's walk competing with it
	// (report.go says so beside the table).
	if _, err := e.acyCmd(ctx, "mount", name, mp, "--wait-warm"); err != nil {
		forceUnmount(mp)
		return 0, 0, err
	}
	timed := tenChanges(mp)
	if extra != "" {
		timed += " && " + extra
	}
	prefix := []string{e.acy, "--store", e.store, "exec", mp, "--"}
	work, wall, err := e.timeWrapper(ctx, prefix, "", timed)
	if err != nil {
		_, _ = e.acyCmd(ctx, "unmount", mp)
		forceUnmount(mp)
		return 0, 0, err
	}
	um, err := e.acyCmd(ctx, "unmount", mp)
	if err != nil {
		forceUnmount(mp)
		return 0, 0, err
	}
	return wall - work, um.wall, nil
}

// captureRebase makes a sibling with one new file, then runs captureOnce
// with the sibling's land inside the lease, so the lease end must rebase.
func (e *benchEnv) captureRebase(ctx context.Context, ws string, i int) (time.Duration, time.Duration, error) {
	sib := fmt.Sprintf("%s-s%d", ws, i)
	if _, err := e.acyCmd(ctx, "fork", ws, sib); err != nil {
		return 0, 0, err
	}
	mp, err := e.mountpoint(sib)
	if err != nil {
		return 0, 0, err
	}
	if _, err := e.acyCmd(ctx, "mount", sib, mp); err != nil {
		forceUnmount(mp)
		return 0, 0, err
	}
	_, err = e.acyCmd(ctx, "exec", mp, "--", "sh", "-c", fmt.Sprintf("echo sibling > %s", shq(mp+"/sibling-"+sib)))
	if _, uerr := e.acyCmd(ctx, "unmount", mp); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		forceUnmount(mp)
		return 0, 0, err
	}
	land := fmt.Sprintf("cd / && %s --store %s land %s >/dev/null", shq(e.acy), shq(e.store), shq(sib))
	return e.captureOnce(ctx, ws, i, land)
}

// treeFile names file i of a genTree tree: 100 files per directory.
func treeFile(i int) string {
	return fmt.Sprintf("d%04d/f%03d.txt", i/100, i%100)
}

// genTree writes n small distinct files under dir, then syncs: the first
// measurement after it would otherwise pay the tree's writeback (a no-op
// lease end right after writing 100,000 files took 627 ms instead of 20).
func genTree(dir string, n int) error {
	return genTreeOf(dir, n, func(i int) string { return fmt.Sprintf("file %d\n", i) })
}

// genTreeOf is genTree with file i's content content(i).
func genTreeOf(dir string, n int, content func(i int) string) error {
	defer syscall.Sync()
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, treeFile(i))
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("gen tree: %w", err)
			}
		}
		if err := os.WriteFile(p, []byte(content(i)), 0o644); err != nil {
			return fmt.Errorf("gen tree: %w", err)
		}
	}
	return nil
}
