package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// fsmonitorRunsMax bounds the fsmonitor repetitions (three give a median).
const fsmonitorRunsMax = 3

// fsmonitorGit holds git status in a mounted repository with and without
// the mount's fsmonitor hook (docs/git.md "fsmonitor"), against native.
type fsmonitorGit struct {
	files            int
	native1, native2 []time.Duration // native status twice per run
	// Without the hook (mount --no-fsmonitor), then with it: the first
	// and second status after a mount, and the first and second after a
	// remount (the index then carries what the previous mount left).
	off1, off2, offRe1, offRe2 []time.Duration
	on1, on2, onRe1, onRe2     []time.Duration
	// With the hook and a warm-up asked for (--warm-entries): git stats
	// nothing, so the metadata warm-up only competes with it for the
	// daemon and the CPU (a mount with the hook skips it by default).
	cold1, cold2, coldRe1, coldRe2 []time.Duration
	// Then a mount at a new mountpoint, twice (git keys its untracked
	// cache by the work tree's path; the mount moves it).
	offNew1, offNew2, onNew1, onNew2, coldNew1, coldNew2 []time.Duration
	dirty                                                []int // lines any status printed (0: clean)
	err                                                  string
}

// runFSMonitorGit commits a copy of the Go src tree to git natively,
// imports it with `create --from` (.git copied), forks two workspaces,
// and per run times git status natively twice, then in a mount of one
// fork without the hook and of the other with it: twice after mounting,
// twice after remounting. Each status in the mount is its own exec.
func runFSMonitorGit(ctx context.Context, e *benchEnv, res *results) error {
	g := &fsmonitorGit{}
	res.fsmonitor = g
	if err := e.fsmonitorGit(ctx, g, min(e.cfg.runs, fsmonitorRunsMax)); err != nil {
		// Recorded in the report; the other measurements stand.
		g.err = err.Error()
		logf("fsmonitor: git status measurement failed (recorded, continuing): %v", err)
	}
	return nil
}

func (e *benchEnv) fsmonitorGit(ctx context.Context, g *fsmonitorGit, runs int) error {
	repo := filepath.Join(e.work, "fsm-git")
	logf("fsmonitor: committing a copy of the Go src tree to git")
	n, err := e.goTreeRepo(ctx, repo)
	if err != nil {
		return err
	}
	g.files = n
	if _, err := e.acyCmd(ctx, "create", "fsmgit", "--from", repo); err != nil {
		return err
	}
	for _, ws := range []string{"fsmoff", "fsmon", "fsmcold"} {
		if _, err := e.acyCmd(ctx, "fork", "fsmgit", ws); err != nil {
			return err
		}
	}
	outFile := filepath.Join(e.work, "fsm-status.out")
	status := func(dir string) string {
		return fmt.Sprintf("cd %s && git status --porcelain > %s", shq(dir), shq(outFile))
	}
	dirty := func() int {
		b, _ := os.ReadFile(outFile)
		return strings.Count(string(b), "\n")
	}
	// twice mounts ws, times two statuses and unmounts.
	twice := func(ws, mp string, flags ...string) (time.Duration, time.Duration, error) {
		if _, err := e.acyCmd(ctx, append([]string{"mount", ws, mp}, flags...)...); err != nil {
			forceUnmount(mp)
			return 0, 0, err
		}
		defer func() {
			if _, err := e.acyCmd(ctx, "unmount", mp); err != nil {
				forceUnmount(mp)
			}
		}()
		prefix := []string{e.acy, "--store", e.store, "exec", mp, "--"}
		var ds [2]time.Duration
		for i := range ds {
			w, _, err := e.timeWrapper(ctx, prefix, "", status(mp))
			if err != nil {
				return 0, 0, err
			}
			ds[i] = w
			g.dirty = append(g.dirty, dirty())
		}
		return ds[0], ds[1], nil
	}
	for i := 0; i < runs; i++ {
		w, _, err := e.timeWrapper(ctx, nil, "", status(repo))
		if err != nil {
			return err
		}
		g.native1, g.dirty = append(g.native1, w), append(g.dirty, dirty())
		if w, _, err = e.timeWrapper(ctx, nil, "", status(repo)); err != nil {
			return err
		}
		g.native2, g.dirty = append(g.native2, w), append(g.dirty, dirty())
		for _, v := range []struct {
			ws             string
			flags          []string
			a, b, reA, reB *[]time.Duration
			newA, newB     *[]time.Duration
		}{
			{"fsmoff", []string{"--no-fsmonitor"}, &g.off1, &g.off2, &g.offRe1, &g.offRe2, &g.offNew1, &g.offNew2},
			{"fsmon", nil, &g.on1, &g.on2, &g.onRe1, &g.onRe2, &g.onNew1, &g.onNew2},
			{"fsmcold", []string{"--warm-entries", "50000"}, &g.cold1, &g.cold2, &g.coldRe1, &g.coldRe2, &g.coldNew1, &g.coldNew2},
		} {
			mp := filepath.Join(e.work, "mnt", fmt.Sprintf("%s-%d", v.ws, i))
			if err := os.MkdirAll(mp, 0o755); err != nil {
				return err
			}
			a, b, err := twice(v.ws, mp, v.flags...)
			if err != nil {
				return fmt.Errorf("%s: %w", v.ws, err)
			}
			ra, rb, err := twice(v.ws, mp, v.flags...)
			if err != nil {
				return fmt.Errorf("%s remounted: %w", v.ws, err)
			}
			mpNew := filepath.Join(e.work, "mnt", fmt.Sprintf("%s-%d-elsewhere", v.ws, i))
			if err := os.MkdirAll(mpNew, 0o755); err != nil {
				return err
			}
			na, nb, err := twice(v.ws, mpNew, v.flags...)
			if err != nil {
				return fmt.Errorf("%s at a new mountpoint: %w", v.ws, err)
			}
			*v.a, *v.b, *v.reA, *v.reB = append(*v.a, a), append(*v.b, b), append(*v.reA, ra), append(*v.reB, rb)
			*v.newA, *v.newB = append(*v.newA, na), append(*v.newB, nb)
		}
		logf("fsmonitor: git status run %d: native %v then %v; without the hook %v then %v, remounted %v then %v, elsewhere %v; with it %v then %v, remounted %v then %v, elsewhere %v; with it and a warm-up %v then %v, remounted %v then %v, elsewhere %v",
			i+1, g.native1[i].Round(time.Millisecond), g.native2[i].Round(time.Millisecond),
			g.off1[i].Round(time.Millisecond), g.off2[i].Round(time.Millisecond), g.offRe1[i].Round(time.Millisecond), g.offRe2[i].Round(time.Millisecond), g.offNew1[i].Round(time.Millisecond),
			g.on1[i].Round(time.Millisecond), g.on2[i].Round(time.Millisecond), g.onRe1[i].Round(time.Millisecond), g.onRe2[i].Round(time.Millisecond), g.onNew1[i].Round(time.Millisecond),
			g.cold1[i].Round(time.Millisecond), g.cold2[i].Round(time.Millisecond), g.coldRe1[i].Round(time.Millisecond), g.coldRe2[i].Round(time.Millisecond), g.coldNew1[i].Round(time.Millisecond))
	}
	return nil
}

func (r *results) fsmonitorMarkdown(b *strings.Builder) {
	g := r.fsmonitor
	b.WriteString("\n### git status with the fsmonitor hook\n\n")
	fmt.Fprintf(b, "A copy of the Go src tree (%d tracked files) committed to git natively, imported with `create --from` (its `.git` copied) and forked three times. Per run: `git status --porcelain` natively twice; then in a mount of one fork made with `--no-fsmonitor`, of another with the hook (docs/git.md \"fsmonitor\"), and of the third with the hook and a metadata warm-up asked for (`--warm-entries 50000`; a mount with the hook skips it by default, docs/git.md \"The metadata warm-up\"), each status its own `exec`: mount, status twice, unmount, mount again at the same place, status twice, unmount, mount at a new mountpoint, status twice, unmount. The first status after the first mount with the hook scans (the index has no token yet; from the second run on that mount is at a new place too); after a remount the index carries the previous mount's token; at a new mountpoint the mount moved the index's untracked cache there (docs/git.md \"The untracked cache at another mountpoint\"). Ratios are per run against native's second status.\n\n", g.files)
	fmt.Fprintf(b, "Native: 1st %s, 2nd %s; dirty lines (every status) %s.\n\n", fmtStat(durStat(g.native1)), fmtStat(durStat(g.native2)), intStatI(g.dirty))
	hdr := []string{"mount", "1st after mount", "2nd", "1st after remount", "2nd", "1st at a new mountpoint", "2nd", "1st after remount / native", "2nd / native", "1st at a new mountpoint / native"}
	writeRow(b, hdr)
	writeSep(b, len(hdr))
	for _, v := range []struct {
		label                       string
		a, b2, reA, reB, newA, newB []time.Duration
	}{
		{"without the hook", g.off1, g.off2, g.offRe1, g.offRe2, g.offNew1, g.offNew2},
		{"with the hook", g.on1, g.on2, g.onRe1, g.onRe2, g.onNew1, g.onNew2},
		{"with the hook, `--warm-entries 50000`", g.cold1, g.cold2, g.coldRe1, g.coldRe2, g.coldNew1, g.coldNew2},
	} {
		writeRow(b, []string{v.label, fmtStat(durStat(v.a)), fmtStat(durStat(v.b2)), fmtStat(durStat(v.reA)), fmtStat(durStat(v.reB)),
			fmtStat(durStat(v.newA)), fmtStat(durStat(v.newB)),
			fmtRatio(summarize(ratios(v.reA, g.native2))), fmtRatio(summarize(ratios(v.b2, g.native2))), fmtRatio(summarize(ratios(v.newA, g.native2)))})
	}
	b.WriteString("\n")
	goal := func(label string, a []time.Duration) {
		if st := summarize(ratios(a, g.native2)); st.n > 0 {
			fmt.Fprintf(b, "- %s ≤ 1.0× native: %.2f× — %s\n", label, st.med, metStr(st.med <= 1.0))
		}
	}
	goal("first git status after a remount, with the hook", g.onRe1)
	goal("first git status at a new mountpoint, with the hook", g.onNew1)
	goal("second git status, with the hook", g.on2)
	goal("first git status after a remount, with the hook and a warm-up asked for", g.coldRe1)
	if g.err != "" {
		fmt.Fprintf(b, "- the fsmonitor measurement failed: `%s`\n", oneLine(g.err))
	}
}
