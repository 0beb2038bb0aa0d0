package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// gitImportResult compares `acyclicfs create --from-git` with
// `git worktree add` of the same commit, and times the first git status
// in the new workspace's mount.
type gitImportResult struct {
	files int
	// fromGit[0] imports into a store without the tree's blobs (cold);
	// the later runs find them (a second workspace of the repository).
	fromGit  []time.Duration
	worktree []time.Duration
	// status is the first git status in a fresh mount of the imported
	// workspace; native is git status in the source repository (warm).
	status, native []time.Duration
	err            string
}

// runGitImport runs before the land section's `create --from` of repo, so
// that the first `create --from-git` finds none of its blobs.
func runGitImport(ctx context.Context, e *benchEnv, res *results, repo string, files int) {
	gr := &gitImportResult{files: files}
	res.gitImport = gr
	if err := e.gitImportRuns(ctx, gr, repo); err != nil {
		gr.err = err.Error()
		logf("git import: failed (recorded, continuing): %v", err)
	}
}

func (e *benchEnv) gitImportRuns(ctx context.Context, gr *gitImportResult, repo string) error {
	for i := 0; i < e.cfg.runs; i++ {
		ws := fmt.Sprintf("fromgit%d", i)
		syscall.Sync()
		r, err := e.acyCmd(ctx, "create", ws, "--from-git", repo)
		if err != nil {
			return err
		}
		gr.fromGit = append(gr.fromGit, r.wall)
		dst := filepath.Join(e.work, fmt.Sprintf("worktree-%d", i))
		syscall.Sync()
		w, err := runCmd(ctx, repo, nil, "git", "worktree", "add", "-q", "--detach", dst)
		if err != nil {
			return fmt.Errorf("git worktree add: %w", err)
		}
		gr.worktree = append(gr.worktree, w.wall)
		if _, err := runCmd(ctx, repo, nil, "git", "worktree", "remove", "--force", dst); err != nil {
			return fmt.Errorf("git worktree remove: %w", err)
		}
		mp, err := e.mountpoint(ws)
		if err != nil {
			return err
		}
		if _, err := e.acyCmd(ctx, "mount", ws, mp); err != nil {
			forceUnmount(mp)
			return err
		}
		syscall.Sync()
		work, _, err := e.timeWrapper(ctx, []string{e.acy, "--store", e.store, "exec", mp, "--"}, "", "git status --porcelain >/dev/null")
		_, _ = e.acyCmd(ctx, "unmount", mp)
		forceUnmount(mp)
		if err != nil {
			return err
		}
		gr.status = append(gr.status, work)
		nw, _, err := e.timeWrapper(ctx, []string{"sh", "-c", "cd " + shq(repo) + " && exec \"$@\"", "sh"}, "", "git status --porcelain >/dev/null")
		if err != nil {
			return err
		}
		gr.native = append(gr.native, nw)
		logf("git import: run %d: create --from-git %v, git worktree add %v; first git status %v, native %v", i+1,
			r.wall.Round(time.Millisecond), w.wall.Round(time.Millisecond), work.Round(time.Millisecond), nw.Round(time.Millisecond))
	}
	return nil
}

func (r *results) gitImportMarkdown(b *strings.Builder) {
	gr := r.gitImport
	b.WriteString("\n## acyclicfs only: a workspace from a git branch\n\n")
	fmt.Fprintf(b, "The Go source tree committed to git (%d files). `acyclicfs create WS --from-git REPO` (the commit's tree read from the repository's objects, a working `.git` sharing them, an index matching the mount; docs/git.md) against `git worktree add --detach` of the same commit, end to end. The first run imports into a store that has none of the tree's blobs; later runs find them (a second workspace of the repository writes no blob). Files are git object references read from the repository on demand (docs/git.md), so the first run reads and writes no blob either. Then the first `git status` in a fresh mount of the workspace (one `exec` started as soon as `mount` returns) against `git status` in the source repository (warm).\n\n", gr.files)
	hdr := []string{"", "create --from-git", "git worktree add", "ratio", "first git status in the mount", "native git status", "ratio"}
	writeRow(b, hdr)
	writeSep(b, len(hdr))
	if len(gr.fromGit) > 0 && len(gr.worktree) > 0 {
		writeRow(b, []string{"first run (cold store)", fmtSec(gr.fromGit[0].Seconds()), fmtSec(gr.worktree[0].Seconds()),
			fmt.Sprintf("%.2f×", gr.fromGit[0].Seconds()/maxf(gr.worktree[0].Seconds(), 1e-9)), "", "", ""})
	}
	if len(gr.fromGit) > 1 {
		writeRow(b, []string{"later runs, median (min–max)", fmtStat(durStat(gr.fromGit[1:])), fmtStat(durStat(gr.worktree[1:])),
			fmtRatio(summarize(ratios(gr.fromGit[1:], gr.worktree[1:]))), "", "", ""})
	}
	writeRow(b, []string{"all runs", "", "", "", fmtStat(durStat(gr.status)), fmtStat(durStat(gr.native)), fmtRatio(summarize(ratios(gr.status, gr.native)))})
	if gr.err != "" {
		fmt.Fprintf(b, "\n- failed: `%s`\n", oneLine(gr.err))
	}
	if len(gr.fromGit) > 0 && len(gr.worktree) > 0 {
		cold := gr.fromGit[0].Seconds() / maxf(gr.worktree[0].Seconds(), 1e-9)
		fmt.Fprintf(b, "\nGoal: import well under `git worktree add` of the same commit (≤ 0.75×) — into a store without the blobs %.2f× — %s", cold, metStr(cold <= 0.75))
		if len(gr.fromGit) > 1 {
			warm := summarize(ratios(gr.fromGit[1:], gr.worktree[1:])).med
			fmt.Fprintf(b, "; a further workspace of the repository %.2f× — %s", warm, metStr(warm <= 0.75))
		}
		b.WriteString("\n")
	}
}
