package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// profileResult is the FUSE request census of one workload on one system.
type profileResult struct {
	counts    map[string]int // opcode -> requests
	total     int
	daemonCPU time.Duration // user+system CPU of the serving daemon
	work      time.Duration // the (debug-logged, so slower) run's time
}

// profiledSystems are the systems whose daemons log requests in go-fuse's
// debug format.
var profiledSystems = []string{sysLoopback, sysFloor, sysFloorNoOpen, sysFloorNoPT, sysAcyclicfs}

// runProfile mounts loopback, the floor and acyclicfs with request logging and runs
// every workload once, counting requests by opcode. The warm-up, when a
// workload has one, runs in its own invocation before counting starts, so
// the counts are those of the timed part plus (on acyclicfs) the lease end.
func runProfile(ctx context.Context, e *benchEnv, res *results) error {
	res.profile = map[string]map[string]*profileResult{}
	for _, s := range profiledSystems {
		if !contains(e.cfg.systems, s) || !contains(e.cfg.profSys, s) {
			continue
		}
		logf("profile: %s with request logging", s)
		in, err := e.open(ctx, s, 99, true)
		if err != nil {
			return fmt.Errorf("profile: open %s: %w", s, err)
		}
		pid := daemonPID(e, in)
		// The census counts each workload's own requests: the mount's
		// warm-up listing would otherwise land in the first workload's.
		if a, ok := in.(*acyInst); ok {
			if _, err := e.waitWarmed(ctx, a.name, time.Now()); err != nil {
				return fmt.Errorf("profile: wait for the warm-up of %s: %w", s, err)
			}
		}
		for _, wn := range e.cfg.workloads {
			w := findWorkload(wn)
			p := e.params(in, s, 99)
			if w.warm != nil {
				if _, _, err := in.run(ctx, "", w.warm(p)); err != nil {
					return fmt.Errorf("profile: warm %s on %s: %w", wn, s, err)
				}
			}
			off := fileSize(in.debugLog())
			cpu0 := procCPU(pid)
			work, _, err := in.run(ctx, "", w.timed(p))
			if err != nil {
				return fmt.Errorf("profile: %s on %s: %w", wn, s, err)
			}
			// Let the daemon's log writes for the last replies land.
			time.Sleep(200 * time.Millisecond)
			pr, err := countRequests(in.debugLog(), off)
			if err != nil {
				return err
			}
			pr.daemonCPU = procCPU(pid) - cpu0
			pr.work = work
			if res.profile[wn] == nil {
				res.profile[wn] = map[string]*profileResult{}
			}
			res.profile[wn][s] = pr
			logf("  %-14s %-10s %8d requests, daemon CPU %v: %s", wn, s, pr.total, pr.daemonCPU, pr.top(6))
			if w.after != nil {
				if _, _, err := in.run(ctx, "", w.after(p)); err != nil {
					return fmt.Errorf("profile: after %s on %s: %w", wn, s, err)
				}
			}
		}
		if _, err := in.close(ctx); err != nil {
			return fmt.Errorf("profile: close %s: %w", s, err)
		}
	}
	return nil
}

var rxLine = regexp.MustCompile(`\brx \d+: ([A-Z_0-9]+)`)

// countRequests counts go-fuse debug "rx N: OPCODE" lines after offset.
func countRequests(path string, off int64) (*profileResult, error) {
	pr := &profileResult{counts: map[string]int{}}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("request log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, fmt.Errorf("request log: %w", err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := rxLine.FindSubmatch(sc.Bytes()); m != nil {
			pr.counts[string(m[1])]++
			pr.total++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("request log: %w", err)
	}
	return pr, nil
}

// top lists the n most frequent opcodes as "OP=count".
func (p *profileResult) top(n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range p.counts {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var parts []string
	for i, x := range all {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", x.k, x.v))
	}
	return strings.Join(parts, ", ")
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// daemonPID finds the process serving the instance: the peer's child,
// or the acyclicfs daemon of the bench store; 0 for anything else.
func daemonPID(e *benchEnv, in instance) int {
	if r, ok := in.(*remountInst); ok {
		in = r.directInst
	}
	if d, ok := in.(*directInst); ok {
		if d.proc != nil {
			return d.proc.Process.Pid
		}
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 1 && args[0] == e.acy && contains(args, "daemon") && contains(args, e.store) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
			return pid
		}
	}
	return 0
}

// procCPU is the user+system CPU time of pid so far (0 if unknown).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line, in clock ticks (100 Hz on Linux).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
