package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
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
	rr := &gitResolveResult{}
	res.gitResolve = rr
	if err := e.gitResolveRuns(ctx, rr, repo); err != nil {
		rr.err = err.Error()
		logf("git resolve: failed (recorded, continuing): %v", err)
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
		w, err := e.timeWorktreeAdd(ctx, repo, fmt.Sprintf("worktree-%d", i))
		if err != nil {
			return err
		}
		gr.worktree = append(gr.worktree, w)
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
			r.wall.Round(time.Millisecond), w.Round(time.Millisecond), work.Round(time.Millisecond), nw.Round(time.Millisecond))
	}
	return nil
}

func (r *results) gitImportMarkdown(b *strings.Builder) {
	gr := r.gitImport
	b.WriteString("\n## acyclicfs only: a workspace from a git branch\n\n")
	fmt.Fprintf(b, "The Go source tree committed to git (%d files). `acyclicfs create WS --from-git REPO` (the commit's tree read from the repository's objects, a working `.git` sharing them, an index matching the mount; docs/git.md) against `git worktree add --detach` of the same commit, end to end. The first run imports into a store that has none of the tree's blobs; later runs find them (a second workspace of the repository writes no blob). Files are git object references read from the repository on demand (docs/git.md), so the first run reads and writes no blob either; the daemon stores them in the background after the first mount (the later runs' references are the same, resolved already; the next section measures it cold). Then the first `git status` in a fresh mount of the workspace (one `exec` started as soon as `mount` returns; in the first run while the resolution runs) against `git status` in the source repository (warm).\n\n", gr.files)
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

// gitResolveResult measures the lazy import's background resolution (git
// object references stored by the daemon after the mount), each run in
// fresh stores so that every run is cold: the lazy import against `git
// worktree add` and against an eager import (`create --from-git
// --resolve`), alternated; the time from `mount` until the daemon has
// resolved every reference; and a full read of the tree (`tar c .`)
// through a mount started right after the import (while the resolution
// runs), through a mount after it, and through a mount of the eager
// import.
type gitResolveResult struct {
	lazy, worktree, eager []time.Duration
	// resolved: from the mount command's start until status reports the
	// resolution finished; daemon: its own start-to-finish.
	resolved, daemon         []time.Duration
	tarEarly, tarAfter, tarE []time.Duration
	refs                     int64
	err                      string
}

// acyAt runs acyclicfs on store (a store of its own, served by its own
// daemon).
func (e *benchEnv) acyAt(ctx context.Context, store string, args ...string) (cmdResult, error) {
	if len(args) > 0 && args[0] == "mount" {
		args = append(args[:len(args):len(args)], "--transport", e.cfg.transport)
	}
	return runCmd(ctx, "/", nil, append([]string{e.acy, "--store", store}, args...)...)
}

// tarThrough reads every file of the mount at mp (a session of store's
// daemon) and returns the wall time.
func (e *benchEnv) tarThrough(ctx context.Context, store, mp string) (time.Duration, error) {
	r, err := e.acyAt(ctx, store, "exec", mp, "--", "sh", "-c", "tar cf - . | cat >/dev/null")
	return r.wall, err
}

// waitGitResolved polls status --json of store until ws's mount reports
// its resolution finished (no event is reported for it) and returns the
// daemon's own duration and the reference count.
func (e *benchEnv) waitGitResolved(ctx context.Context, store, ws string) (time.Duration, int64, error) {
	for {
		r, err := e.acyAt(ctx, store, "--json", "status", ws)
		if err != nil {
			return 0, 0, err
		}
		var st struct {
			Workspaces []struct {
				GitRefs *struct {
					Total      int64  `json:"total"`
					Running    bool   `json:"running"`
					Finished   string `json:"finished"`
					DurationMS int64  `json:"duration_ms"`
					Error      string `json:"error"`
				} `json:"git_refs"`
			} `json:"workspaces"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			return 0, 0, fmt.Errorf("parse status --json: %w", err)
		}
		if len(st.Workspaces) == 1 && st.Workspaces[0].GitRefs != nil {
			g := st.Workspaces[0].GitRefs
			if g.Error != "" {
				return 0, 0, fmt.Errorf("resolution of %s: %s", ws, g.Error)
			}
			if !g.Running && g.Finished != "" {
				return time.Duration(g.DurationMS) * time.Millisecond, g.Total, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *benchEnv) gitResolveRuns(ctx context.Context, gr *gitResolveResult, repo string) error {
	for i := 0; i < e.cfg.runs; i++ {
		lazy := filepath.Join(e.work, fmt.Sprintf("gitlazy-%d", i))
		eager := filepath.Join(e.work, fmt.Sprintf("giteager-%d", i))
		err := e.gitResolveOnce(ctx, gr, repo, lazy, eager, i)
		for _, s := range []string{lazy, eager} {
			_, _ = e.acyAt(context.Background(), s, "shutdown")
			mnts, _ := filepath.Glob(filepath.Join(e.work, "mnt", "gr*"))
			for _, mp := range mnts {
				forceUnmount(mp)
			}
			_ = os.RemoveAll(s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *benchEnv) gitResolveOnce(ctx context.Context, gr *gitResolveResult, repo, lazy, eager string, i int) error {
	// Alternated: the lazy import, git worktree add, the eager import.
	syscall.Sync()
	r, err := e.acyAt(ctx, lazy, "create", "g", "--from-git", repo)
	if err != nil {
		return err
	}
	gr.lazy = append(gr.lazy, r.wall)
	w, err := e.timeWorktreeAdd(ctx, repo, fmt.Sprintf("worktree-r%d", i))
	if err != nil {
		return err
	}
	gr.worktree = append(gr.worktree, w)
	syscall.Sync()
	eg, err := e.acyAt(ctx, eager, "create", "g", "--from-git", repo, "--resolve")
	if err != nil {
		return err
	}
	gr.eager = append(gr.eager, eg.wall)

	// The lazy import mounted: a full read at once (while the daemon
	// resolves), then the wait for the resolution.
	syscall.Sync()
	mp, err := e.mountpoint(fmt.Sprintf("gr-lazy-%d", i))
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := e.acyAt(ctx, lazy, "mount", "g", mp); err != nil {
		return err
	}
	early, err := e.tarThrough(ctx, lazy, mp)
	if err != nil {
		return err
	}
	daemonDur, refs, err := e.waitGitResolved(ctx, lazy, "g")
	if err != nil {
		return err
	}
	gr.resolved = append(gr.resolved, time.Since(start))
	gr.daemon, gr.refs = append(gr.daemon, daemonDur), refs
	gr.tarEarly = append(gr.tarEarly, early)
	if _, err := e.acyAt(ctx, lazy, "unmount", mp); err != nil {
		return err
	}
	// A fresh mount after the resolution, and one of the eager import.
	for _, s := range []struct {
		store string
		out   *[]time.Duration
	}{{lazy, &gr.tarAfter}, {eager, &gr.tarE}} {
		syscall.Sync()
		if _, err := e.acyAt(ctx, s.store, "mount", "g", mp); err != nil {
			return err
		}
		d, err := e.tarThrough(ctx, s.store, mp)
		if err != nil {
			return err
		}
		*s.out = append(*s.out, d)
		if _, err := e.acyAt(ctx, s.store, "unmount", mp); err != nil {
			return err
		}
	}
	logf("git resolve: run %d: lazy create %v, git worktree add %v, eager create %v; mount→resolved %v (daemon %v, %d refs); tar right after mount %v, after resolution %v, eager %v",
		i+1, r.wall.Round(time.Millisecond), w.Round(time.Millisecond), eg.wall.Round(time.Millisecond),
		gr.resolved[i].Round(time.Millisecond), daemonDur, refs, early.Round(time.Millisecond), gr.tarAfter[i].Round(time.Millisecond), gr.tarE[i].Round(time.Millisecond))
	return nil
}

func (r *results) gitResolveMarkdown(b *strings.Builder) {
	gr := r.gitResolve
	b.WriteString("\n### The lazy import's background resolution\n\n")
	fmt.Fprintf(b, "Each run in fresh stores (cold): `create --from-git` (lazy: git object references), `git worktree add --detach` and `create --from-git --resolve` (eager: every blob read, stored and synced before it returns), alternated. Then the lazy workspace is mounted and the whole tree read through it at once (`tar cf - .`, while the daemon resolves in the background: reads of unresolved files come from git), the time from `mount` until `status` reports every one of its %d references resolved, and the same read through a fresh mount after the resolution and through a mount of the eager import.\n\n", gr.refs)
	hdr := []string{"", "median (min–max)", "ratio to git worktree add"}
	writeRow(b, hdr)
	writeSep(b, len(hdr))
	rows := []struct {
		name  string
		ds    []time.Duration
		ratio bool // an import, against git worktree add of the same run
	}{
		{"create --from-git (lazy)", gr.lazy, true}, {"git worktree add", gr.worktree, false}, {"create --from-git --resolve (eager)", gr.eager, true},
		{"mount → resolution done", gr.resolved, false}, {"resolution, the daemon's own time", gr.daemon, false},
		{"tar of the tree right after mount", gr.tarEarly, false}, {"tar after the resolution", gr.tarAfter, false}, {"tar of the eager import", gr.tarE, false},
	}
	for _, row := range rows {
		if len(row.ds) == 0 {
			continue
		}
		ratio := ""
		if row.ratio && len(row.ds) == len(gr.worktree) {
			ratio = fmtRatio(summarize(ratios(row.ds, gr.worktree)))
		}
		writeRow(b, []string{row.name, fmtStat(durStat(row.ds)), ratio})
	}
	if gr.err != "" {
		fmt.Fprintf(b, "\n- failed: `%s`\n", oneLine(gr.err))
	}
	if len(gr.lazy) > 0 && len(gr.lazy) == len(gr.worktree) {
		cold := summarize(ratios(gr.lazy, gr.worktree)).med
		fmt.Fprintf(b, "\nGoal: a cold import ≤ 0.75× `git worktree add` in the same run — %.2f× (median) — %s\n", cold, metStr(cold <= 0.75))
	}
}

// timeWorktreeAdd times `git worktree add --detach` of repo's HEAD into
// e.work/name (after a sync, as every import it is compared with), then
// removes that worktree.
func (e *benchEnv) timeWorktreeAdd(ctx context.Context, repo, name string) (time.Duration, error) {
	dst := filepath.Join(e.work, name)
	syscall.Sync()
	w, err := runCmd(ctx, repo, nil, "git", "worktree", "add", "-q", "--detach", dst)
	if err != nil {
		return 0, fmt.Errorf("git worktree add: %w", err)
	}
	if _, err := runCmd(ctx, repo, nil, "git", "worktree", "remove", "--force", dst); err != nil {
		return 0, fmt.Errorf("git worktree remove: %w", err)
	}
	return w.wall, nil
}
