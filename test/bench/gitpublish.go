package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// gitPublishResult is `acyclicfs git publish` of 10 changed files in a
// create --from-git workspace of the Go tree (one commit of uncommitted
// changes onto a fresh branch), against `git add -A && git commit` of the
// same 10 files in a native worktree: what an agent in a clone does
// before it pushes.
type gitPublishResult struct {
	files int
	// publish[0] is the workspace's first publish (it names every
	// directory); the later ones find the unchanged ones named.
	publish, native []time.Duration
	err             string
}

// tenAppends is tenEdits without its commit.
var tenAppends = strings.TrimSuffix(tenEdits, "git add -A && git commit -qm 'agent: ten files'") + "true"

// runGitPublish runs after the land section, on its repository.
func runGitPublish(ctx context.Context, e *benchEnv, res *results, repo string, files int) {
	gp := &gitPublishResult{files: files}
	res.gitPublish = gp
	if err := e.gitPublishRuns(ctx, gp, repo); err != nil {
		gp.err = err.Error()
		logf("git publish: failed (recorded, continuing): %v", err)
	}
}

func (e *benchEnv) gitPublishRuns(ctx context.Context, gp *gitPublishResult, repo string) error {
	out, err := runCmd(ctx, repo, nil, "git", "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	head := strings.TrimSpace(out.stdout)
	const ws = "publisher"
	if _, err := e.acyCmd(ctx, "create", ws, "--from-git", repo); err != nil {
		return err
	}
	mp, err := e.mountpoint(ws)
	if err != nil {
		return err
	}
	for i := 0; i < e.cfg.runs; i++ {
		branch := fmt.Sprintf("bench-publish-%d", i)
		if _, err := runCmd(ctx, repo, nil, "git", "branch", branch, head); err != nil {
			return fmt.Errorf("git branch: %w", err)
		}
		if _, err := e.acyCmd(ctx, "git", "bind", ws, repo, "--branch", branch, "--force"); err != nil {
			return err
		}
		// The agent's edits, in the mount (not timed).
		if _, err := e.acyCmd(ctx, "mount", ws, mp); err != nil {
			forceUnmount(mp)
			return err
		}
		_, err := runCmd(ctx, "/", nil, e.acy, "--store", e.store, "exec", mp, "--", "sh", "-c", tenAppends)
		_, _ = e.acyCmd(ctx, "unmount", mp)
		forceUnmount(mp)
		if err != nil {
			return err
		}
		syscall.Sync()
		r, err := runCmd(ctx, "/", gitIdentity, e.acy, "--store", e.store, "git", "publish", ws)
		if err != nil {
			return err
		}
		gp.publish = append(gp.publish, r.wall)

		dst := filepath.Join(e.work, fmt.Sprintf("publish-native-%d", i))
		if _, err := runCmd(ctx, repo, nil, "git", "worktree", "add", "-q", "--detach", dst, head); err != nil {
			return fmt.Errorf("git worktree add: %w", err)
		}
		if _, err := runCmd(ctx, dst, nil, "sh", "-c", tenAppends); err != nil {
			return err
		}
		syscall.Sync()
		nr, err := runCmd(ctx, dst, gitIdentity, "sh", "-c", "git add -A && git commit -qm 'agent: ten files'")
		if err != nil {
			return fmt.Errorf("native commit: %w", err)
		}
		gp.native = append(gp.native, nr.wall)
		if _, err := runCmd(ctx, repo, nil, "git", "worktree", "remove", "--force", dst); err != nil {
			return fmt.Errorf("git worktree remove: %w", err)
		}
		logf("git publish: run %d: acyclicfs git publish %v, git add + commit %v", i+1, r.wall.Round(time.Millisecond), nr.wall.Round(time.Millisecond))
	}
	return nil
}

func (r *results) gitPublishMarkdown(b *strings.Builder) {
	gp := r.gitPublish
	b.WriteString("\n## acyclicfs only: publishing a workspace to a git branch\n\n")
	fmt.Fprintf(b, "The Go source tree committed to git (%d files), a `create --from-git` workspace of it in which an agent appended a line to 10 files (in the mount, not timed); then `acyclicfs git publish` of it, end to end: the 10 changes become one commit on a fresh branch of the repository, compare-and-swapped (docs/git.md \"Publishing\"). Natively: `git add -A && git commit` of the same 10 files in a worktree of the same commit. The first publish names every directory of the tree (the blobs are named by the import); later ones find the unchanged directories named.\n\n", gp.files)
	hdr := []string{"", "acyclicfs git publish", "git add -A && git commit", "ratio"}
	writeRow(b, hdr)
	writeSep(b, len(hdr))
	if len(gp.publish) > 0 && len(gp.native) > 0 {
		writeRow(b, []string{"first publish", fmtSec(gp.publish[0].Seconds()), fmtSec(gp.native[0].Seconds()),
			fmt.Sprintf("%.2f×", gp.publish[0].Seconds()/maxf(gp.native[0].Seconds(), 1e-9))})
	}
	if len(gp.publish) > 1 && len(gp.native) > 1 {
		writeRow(b, []string{"later publishes, median (min–max)", fmtStat(durStat(gp.publish[1:])), fmtStat(durStat(gp.native[1:])),
			fmtRatio(summarize(ratios(gp.publish[1:], gp.native[1:])))})
	}
	if gp.err != "" {
		fmt.Fprintf(b, "\n- failed: `%s`\n", oneLine(gp.err))
	}
	if len(gp.publish) > 0 {
		st := durStat(gp.publish)
		fmt.Fprintf(b, "\nGoal: well under a second with 10 files changed — median %s — %s\n", fmtSec(st.med), metStr(st.med < 1))
	}
}
