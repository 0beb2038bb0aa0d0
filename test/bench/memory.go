package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The daemon's memory (issue #38 item 8): memMounts forks of a git
// workspace, each mounted, run memRounds rounds of what an agent does —
// untar Go's src/net into a new directory, git add, git commit, each as
// one exec lease — and every fork is landed after each round (its
// siblings follow). The daemon's memory is read from its /debug/memory
// (daemon/debug.go) and /proc.
const (
	memMounts = 4
	memRounds = 3
	// The goals, set from the measurement on the 2026-12-07 branch
	// (docs/benchmarks.md "Daemon memory"): the live heap a mount adds
	// while idle (its request buffers, 4 MiB, and tables), the live heap
	// per name the mounts hold (overlay inode, go-fuse node, fsmonitor
	// log entries), and how far anonymous RSS may run ahead of the live
	// heap (the GC's slack, daemon/gctune.go, plus the runtime's own).
	memGoalPerMount = 6 << 20
	memGoalPerName  = 3 << 10
	memGoalSlack    = 64 << 20
)

// memSample is the daemon's memory at one point.
type memSample struct {
	// peakAnon is RssAnon before the forced collection (what the daemon
	// held while working); anon and heap after it (debug/memory).
	peakAnon, anon, file, heap uint64
	names                      int // overlay inodes of every mount
	gcPercent                  int
}

type memoryResult struct {
	base     memSample // one mount, idle
	idle     memSample // memMounts mounts, idle
	rounds   []memSample
	roundDur []time.Duration
	err      string
}

func runMemory(ctx context.Context, e *benchEnv, res *results) error {
	mr := &memoryResult{}
	res.memory = mr
	if err := e.memoryRuns(ctx, mr); err != nil {
		mr.err = err.Error()
		logf("memory: failed (recorded, continuing): %v", err)
	}
	return nil
}

func (e *benchEnv) memoryRuns(ctx context.Context, mr *memoryResult) error {
	st := filepath.Join(e.work, "mem-store")
	acy := func(args ...string) (cmdResult, error) {
		if len(args) > 0 && args[0] == "mount" {
			args = append(args, "--transport", e.cfg.transport)
		}
		return runCmd(ctx, "/", nil, append([]string{e.acy, "--store", st}, args...)...)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := runCmd(sctx, "/", nil, e.acy, "--store", st, "shutdown"); err != nil {
			logf("memory: shutdown: %v", err)
		}
		for i := range memMounts {
			forceUnmount(filepath.Join(e.work, "mnt", fmt.Sprintf("mem-%d", i)))
		}
		os.RemoveAll(st)
	}()
	src := filepath.Join(e.work, "mem-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := os.WriteFile(filepath.Join(src, "README"), []byte("hi\n"), 0o644); err != nil {
		return err
	}
	git := []string{"git", "-c", "user.email=bench@acyclicfs", "-c", "user.name=bench"}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-qm", "init"}} {
		if _, err := runCmd(ctx, src, nil, append(git, args...)...); err != nil {
			return err
		}
	}
	if _, err := acy("init"); err != nil {
		return err
	}
	if _, err := acy("create", "mem", "--from", src); err != nil {
		return err
	}
	var mps []string
	for i := range memMounts {
		ws := fmt.Sprintf("mem-%d", i)
		if _, err := acy("fork", "mem", ws); err != nil {
			return err
		}
		mp, err := e.mountpoint(ws)
		if err != nil {
			return err
		}
		if _, err := acy("mount", ws, mp); err != nil {
			return err
		}
		mps = append(mps, mp)
		if i == 0 {
			s, err := daemonMemory(st)
			if err != nil {
				return err
			}
			mr.base = s
		}
	}
	s, err := daemonMemory(st)
	if err != nil {
		return err
	}
	mr.idle = s
	for r := range memRounds {
		start := time.Now()
		for i, mp := range mps {
			script := fmt.Sprintf("mkdir -p r%d && tar -C r%d -xf %s src/net && %s add -A && %s commit -qm r%d-w%d",
				r, r, shq(e.tarball), strings.Join(git, " "), strings.Join(git, " "), r, i)
			if _, err := acy("exec", mp, "--", "sh", "-c", script); err != nil {
				return fmt.Errorf("round %d, mount %d: %w", r, i, err)
			}
		}
		for i := range mps {
			if _, err := acy("land", fmt.Sprintf("mem-%d", i)); err != nil {
				return fmt.Errorf("round %d: land mem-%d: %w", r, i, err)
			}
		}
		mr.roundDur = append(mr.roundDur, time.Since(start))
		s, err := daemonMemory(st)
		if err != nil {
			return err
		}
		mr.rounds = append(mr.rounds, s)
		logf("memory: round %d: anonymous RSS %.1f MiB at the end of the round, %.1f MiB live heap, %d names, GC percent %d",
			r+1, mibOf(s.peakAnon), mibOf(s.heap), s.names, s.gcPercent)
	}
	return nil
}

// daemonMemory reads the store's daemon's RssAnon, then its
// /debug/memory (which collects first).
func daemonMemory(store string) (memSample, error) {
	var s memSample
	b, err := os.ReadFile(filepath.Join(store, "daemon.pid"))
	if err != nil {
		return s, err
	}
	pid := strings.TrimSpace(string(b))
	s.peakAnon, _ = procStatusKB(pid, "RssAnon")
	sock := filepath.Join(store, "daemon.sock")
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://daemon/debug/memory")
	if err != nil {
		return s, fmt.Errorf("daemon /debug/memory: %w", err)
	}
	defer resp.Body.Close()
	var m struct {
		HeapAlloc uint64 `json:"heap_alloc"`
		RSSAnon   uint64 `json:"rss_anon"`
		RSSFile   uint64 `json:"rss_file"`
		GCPercent int    `json:"gc_percent"`
		Mounts    map[string]struct {
			Inodes int `json:"inodes"`
		} `json:"mounts"`
	}
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("daemon /debug/memory: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return s, fmt.Errorf("daemon /debug/memory: %w", err)
	}
	s.anon, s.file, s.heap, s.gcPercent = m.RSSAnon, m.RSSFile, m.HeapAlloc, m.GCPercent
	for _, c := range m.Mounts {
		s.names += c.Inodes
	}
	return s, nil
}

// procStatusKB reads a "kB" field of /proc/PID/status, in bytes.
func procStatusKB(pid, field string) (uint64, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == field {
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%s/status", field, pid)
}

func mibOf(b uint64) float64 { return float64(b) / (1 << 20) }

// perMount is the live heap each mount past the first adds, idle.
func (mr *memoryResult) perMount() float64 {
	return (float64(mr.idle.heap) - float64(mr.base.heap)) / (memMounts - 1)
}

// perName is the live heap per name the rounds added to the mounts.
func (mr *memoryResult) perName() float64 {
	last := mr.rounds[len(mr.rounds)-1]
	if last.names <= mr.idle.names {
		return 0
	}
	return (float64(last.heap) - float64(mr.idle.heap)) / float64(last.names-mr.idle.names)
}

// worstSlack is the most the anonymous RSS ran ahead of the live heap
// at the end of a round.
func (mr *memoryResult) worstSlack() float64 {
	w := 0.0
	for _, s := range mr.rounds {
		w = max(w, float64(s.peakAnon)-float64(s.heap))
	}
	return w
}

const memoryHeading = "\n## acyclicfs only: daemon memory\n"

func (r *results) memoryMarkdown(b *strings.Builder) {
	mr := r.memory
	b.WriteString(memoryHeading + "\n")
	fmt.Fprintf(b, "%d forks of a git workspace, each mounted; %d rounds, each: in every mount, as one `acyclicfs exec` lease, untar Go's `src/net` into a new directory, `git add -A` and `git commit`; then `acyclicfs land` of every fork (its siblings follow). The daemon's anonymous RSS (`RssAnon`) is read at the end of each round, then its live heap and resident sizes after a forced collection from its `/debug/memory` (docs/design.md \"Memory\"); *names* are the overlay inodes the mounts hold. The tree grows by a round's files each round, so the names do.\n\n", memMounts, memRounds)
	hdr := []string{"", "time", "anonymous RSS", "live heap", "anonymous RSS after GC", "file RSS", "names", "GC percent"}
	writeRow(b, hdr)
	writeSep(b, len(hdr))
	row := func(label string, s memSample, d string) {
		writeRow(b, []string{label, d, fmtMiB(s.peakAnon), fmtMiB(s.heap), fmtMiB(s.anon), fmtMiB(s.file), strconv.Itoa(s.names), strconv.Itoa(s.gcPercent)})
	}
	if mr.base.heap > 0 {
		row("1 mount, idle", mr.base, "")
	}
	if mr.idle.heap > 0 {
		row(fmt.Sprintf("%d mounts, idle", memMounts), mr.idle, "")
	}
	for i, s := range mr.rounds {
		row(fmt.Sprintf("after round %d", i+1), s, fmtSec(mr.roundDur[i].Seconds()))
	}
	b.WriteString("\n")
	if len(mr.rounds) == memRounds {
		pm, pn, sl := mr.perMount(), mr.perName(), mr.worstSlack()
		fmt.Fprintf(b, "- live heap per mount (idle) ≤ %s: %s — %s\n", fmtMiB(memGoalPerMount), fmtMiB(uint64(max(pm, 0))), metStr(pm <= memGoalPerMount))
		fmt.Fprintf(b, "- live heap per cached name ≤ %.1f KiB: %.2f KiB — %s\n", float64(memGoalPerName)/1024, pn/1024, metStr(pn <= memGoalPerName))
		fmt.Fprintf(b, "- anonymous RSS beyond the live heap ≤ %s: %s at most — %s\n", fmtMiB(memGoalSlack), fmtMiB(uint64(max(sl, 0))), metStr(sl <= memGoalSlack))
	}
	if mr.err != "" {
		fmt.Fprintf(b, "- the memory measurement failed: `%s`\n", oneLine(mr.err))
	}
}

func fmtMiB(b uint64) string { return fmt.Sprintf("%.1f MiB", mibOf(b)) }
