package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// landResult is the land of a git commit into a parent that moved by
// another commit, on the Go source tree committed to git.
type landResult struct {
	files    int             // files in the work tree
	land     []time.Duration // acyclicfs land, end to end
	native   []time.Duration // git merge of the same two commits in a native clone
	importNs time.Duration
	err      string
	// The first git status in a fresh fork's mount of the landed
	// repository (its index refreshed in the agents' mounts), and native
	// git status in the source repository.
	status, nativeStatus []time.Duration
	statusErr            string
}

// gitIdentity is the environment every git run of the land section uses.
var gitIdentity = []string{
	"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.com",
	"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.com",
	"GIT_CONFIG_NOSYSTEM=1",
}

// tenEdits appends a line to 10 files of the Go tree (one per package, so
// that they are spread over the tree) and commits them.
var tenEdits = func() string {
	var b strings.Builder
	for _, f := range []string{"fmt/print.go", "os/file.go", "io/io.go", "bytes/buffer.go", "strings/builder.go",
		"sort/sort.go", "errors/errors.go", "bufio/bufio.go", "path/path.go", "time/time.go"} {
		fmt.Fprintf(&b, "echo '// touched by the agent' >> src/%s && ", f)
	}
	b.WriteString("git add -A && git commit -qm 'agent: ten files'")
	return b.String()
}()

// oneEdit is the sibling's commit: another file.
const oneEdit = `echo '// touched by the sibling' >> src/net/net.go && git add -A && git commit -qm 'sibling: one file'`

// runLand measures `acyclicfs land` of a fork whose git commit touches 10
// files into a parent that moved by a sibling's commit (git-aware: the
// .git directories merge with git's rules), and `git merge` of the same
// two changes natively.
func runLand(ctx context.Context, e *benchEnv, res *results) error {
	lr := &landResult{}
	res.land = lr
	repo := filepath.Join(e.work, "land-repo")
	if err := copyTree(ctx, filepath.Join(e.lower, "goroot"), repo); err != nil {
		return err
	}
	logf("land: committing the Go tree to git")
	if _, err := runCmd(ctx, repo, gitIdentity, "sh", "-c", "git init -q -b main && git config gc.auto 0 && git add -A && git commit -qm base"); err != nil {
		return fmt.Errorf("land: git repo: %w", err)
	}
	out, _ := runCmd(ctx, repo, nil, "sh", "-c", "git ls-files | wc -l")
	fmt.Sscan(strings.TrimSpace(out.stdout), &lr.files)
	runGitImport(ctx, e, res, repo, lr.files)
	r, err := e.acyCmd(ctx, "create", "goland", "--from", repo)
	if err != nil {
		return err
	}
	lr.importNs = r.wall
	for i := 0; i < e.cfg.runs; i++ {
		d, err := e.landOnce(ctx, i)
		if err != nil {
			lr.err = err.Error()
			logf("land: failed (recorded, continuing): %v", err)
			break
		}
		lr.land = append(lr.land, d)
		// Natively: the same two commits on two branches of a clone,
		// merged by git (a merge commit, as the land makes).
		clone := filepath.Join(e.work, fmt.Sprintf("land-native-%d", i))
		script := fmt.Sprintf(`set -e
git clone -q %s %s && cd %s && git config gc.auto 0
git checkout -q -b agent && %s
git checkout -q main && %s`, shq(repo), shq(clone), shq(clone), tenEdits, oneEdit)
		if _, err := runCmd(ctx, "/", gitIdentity, "sh", "-c", script); err != nil {
			return fmt.Errorf("land: native clone: %w", err)
		}
		syscall.Sync()
		nr, err := runCmd(ctx, clone, gitIdentity, "git", "merge", "-q", "--no-edit", "agent")
		if err != nil {
			return fmt.Errorf("land: native git merge: %w", err)
		}
		lr.native = append(lr.native, nr.wall)
		logf("land: run %d: acyclicfs land %v, git merge %v", i+1, d.Round(time.Millisecond), nr.wall.Round(time.Millisecond))
	}
	for i := 0; i < e.cfg.runs && lr.err == ""; i++ {
		if err := e.firstStatus(ctx, lr, repo, i); err != nil {
			lr.statusErr = err.Error()
			logf("land: first git status failed (recorded, continuing): %v", err)
			break
		}
	}
	runGitPublish(ctx, e, res, repo, lr.files)
	return nil
}

// firstStatus forks the landed repository, mounts the fork and times the
// first git status in it (one exec, started as soon as mount returns);
// natively, git status in the source repository (warm).
func (e *benchEnv) firstStatus(ctx context.Context, lr *landResult, repo string, i int) error {
	ws := fmt.Sprintf("goland-st%d", i)
	if _, err := e.acyCmd(ctx, "fork", "goland", ws); err != nil {
		return err
	}
	mp, err := e.mountpoint(ws)
	if err != nil {
		return err
	}
	if _, err := e.acyCmd(ctx, "mount", ws, mp); err != nil {
		forceUnmount(mp)
		return err
	}
	defer func() {
		_, _ = e.acyCmd(ctx, "unmount", mp)
		forceUnmount(mp)
	}()
	syscall.Sync()
	work, _, err := e.timeWrapper(ctx, []string{e.acy, "--store", e.store, "exec", mp, "--"}, "", "git status --porcelain >/dev/null")
	if err != nil {
		return err
	}
	lr.status = append(lr.status, work)
	if _, err := runCmd(ctx, repo, gitIdentity, "git", "status", "--porcelain"); err != nil {
		return err
	}
	nw, _, err := e.timeWrapper(ctx, []string{"sh", "-c", "cd " + shq(repo) + " && exec \"$@\"", "sh"}, "", "git status --porcelain >/dev/null")
	if err != nil {
		return err
	}
	lr.nativeStatus = append(lr.nativeStatus, nw)
	logf("land: first git status in a fresh fork %v, native %v", work.Round(time.Millisecond), nw.Round(time.Millisecond))
	return nil
}

// landOnce forks two workspaces of goland. The agent commits ten files in
// its mount and keeps a lease open (a session still at work) while the
// sibling commits one file and lands, so the agent's rebase is left to its
// final close, as for a real agent. Timed: the lease end (capture, the
// git-aware rebase onto the moved parent, the view switch) plus `land` of
// the agent.
func (e *benchEnv) landOnce(ctx context.Context, i int) (time.Duration, error) {
	agent, sib := fmt.Sprintf("goland-a%d", i), fmt.Sprintf("goland-s%d", i)
	mounts := map[string]string{}
	defer func() {
		for _, mp := range mounts {
			_, _ = e.acyCmd(ctx, "unmount", mp)
			forceUnmount(mp)
		}
	}()
	for _, ws := range []string{agent, sib} {
		if _, err := e.acyCmd(ctx, "fork", "goland", ws); err != nil {
			return 0, err
		}
		mp, err := e.mountpoint(ws)
		if err != nil {
			return 0, err
		}
		if _, err := e.acyCmd(ctx, "mount", ws, mp); err != nil {
			forceUnmount(mp)
			return 0, err
		}
		mounts[ws] = mp
	}
	commit := func(ws, script string) error {
		_, err := runCmd(ctx, "/", gitIdentity, e.acy, "--store", e.store, "exec", mounts[ws], "--", "sh", "-c", script)
		return err
	}
	if err := commit(agent, tenEdits); err != nil {
		return 0, fmt.Errorf("agent's commit: %w", err)
	}
	lease, err := e.acyCmd(ctx, "lease", "begin", mounts[agent], "--owner", "bench")
	if err != nil {
		return 0, err
	}
	if err := commit(sib, oneEdit); err != nil {
		return 0, fmt.Errorf("sibling's commit: %w", err)
	}
	if _, err := e.acyCmd(ctx, "land", sib); err != nil {
		return 0, fmt.Errorf("sibling's land: %w", err)
	}
	syscall.Sync()
	end, err := e.acyCmd(ctx, "lease", "end", mounts[agent], strings.TrimSpace(lease.stdout))
	if err != nil {
		return 0, fmt.Errorf("agent's lease end: %w", err)
	}
	if !strings.Contains(end.stdout, "rebased") {
		return 0, fmt.Errorf("agent's lease end: want a rebase, got %q", strings.TrimSpace(end.stdout))
	}
	r, err := e.acyCmd(ctx, "land", agent)
	if err != nil {
		return 0, fmt.Errorf("agent's land: %w", err)
	}
	return end.wall + r.wall, nil
}

func (r *results) landMarkdown(b *strings.Builder) {
	lr := r.land
	b.WriteString("\n## acyclicfs only: land of a git commit into a parent that moved\n\n")
	fmt.Fprintf(b, "The Go source tree committed to git (%d files; imported in %s). Per run, two mounted forks: a sibling commits one file (`git commit` in its mount) and lands while the agent, which committed ten files, still holds a lease; timed end to end (process starts included): the agent's `lease end` — capture, and the rebase onto the moved parent, which merges the two diverged commits git-aware (a merge commit from `git merge-tree`, objects and reflogs by union, the index moved along) and the work tree line by line, then the view switch — plus `acyclicfs land` of the agent. Beside it, `git merge` of the same two changes on two branches of a native clone.\n\n", lr.files, fmtSec(lr.importNs.Seconds()))
	hdr := []string{"", "acyclicfs lease end (rebase) + land", "git merge (native)"}
	writeRow(b, hdr)
	writeSep(b, len(hdr))
	writeRow(b, []string{"median (min–max)", fmtStat(durStat(lr.land)), fmtStat(durStat(lr.native))})
	st := durStat(lr.land)
	switch {
	case lr.err != "":
		fmt.Fprintf(b, "\n- failed: `%s` — **not met**\n", oneLine(lr.err))
	case st.n > 0:
		fmt.Fprintf(b, "\nGoal: land ≤ 150 ms end to end — %s\n", metStr(st.med <= 0.150))
	}
	b.WriteString("\n**The first git status in a fresh fork's mount** of that repository after the landings (its index was refreshed in the agents' mounts and landed with their commits): one `exec` started as soon as `mount` returns, against `git status` in the source repository natively (warm). Inode numbers are a function of the path and ctime of what the store records, so the index's stat data match in every fork and git reads no file.\n\n")
	hdr = []string{"", "acyclicfs, fresh fork", "native", "ratio"}
	writeRow(b, hdr)
	writeSep(b, len(hdr))
	writeRow(b, []string{"median (min–max)", fmtStat(durStat(lr.status)), fmtStat(durStat(lr.nativeStatus)), fmtRatio(summarize(ratios(lr.status, lr.nativeStatus)))})
	if lr.statusErr != "" {
		fmt.Fprintf(b, "\n- failed: `%s`\n", oneLine(lr.statusErr))
	}
	if r.inplace != nil && r.inplace.git != nil && len(r.inplace.git.cold) > 0 && len(lr.status) > 0 {
		fs, ip := durStat(lr.status), durStat(r.inplace.git.cold)
		fmt.Fprintf(b, "\nGoal (issue: stable inode numbers): within 1.2× of the in-place workspace's first status in the same run (%s) — %.2f× — %s\n", fmtSec(ip.med), fs.med/maxf(ip.med, 1e-9), metStr(fs.med <= 1.2*ip.med))
	}
}
