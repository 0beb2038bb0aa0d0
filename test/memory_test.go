package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// daemonMemory is what the daemon's /debug/memory answers (daemon
// MemoryReport), the fields the tests read.
type daemonMemory struct {
	HeapAlloc uint64 `json:"heap_alloc"`
	HeapInuse uint64 `json:"heap_inuse"`
	RSSAnon   uint64 `json:"rss_anon"`
	GCPercent int    `json:"gc_percent"`
	Mounts    map[string]struct {
		Inodes  int `json:"inodes"`
		Inos    int `json:"inos"`
		Nodes   int `json:"nodes"`
		Writers int `json:"writers"`
	} `json:"mounts"`
}

// memory asks the store's daemon for /debug/memory (which collects
// garbage first) over its control socket.
func (e *env) memory() daemonMemory {
	e.t.Helper()
	sock := filepath.Join(e.store, "daemon.sock")
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://daemon/debug/memory")
	if err != nil {
		e.t.Fatalf("GET /debug/memory: %v", err)
	}
	defer resp.Body.Close()
	var m daemonMemory
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET /debug/memory: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		e.t.Fatalf("decode /debug/memory: %v", err)
	}
	return m
}

// Memory bounds the daemon keeps (docs/benchmarks.md "Daemon memory").
const (
	// memPerMount bounds the live heap a mount adds while idle: its
	// request buffers (4 MiB) and tables.
	memPerMount = 6 << 20
	// memRoundGrowth bounds how much the live heap may grow from the end
	// of round 2 to the end of the last round of a steady workload.
	memRoundGrowth = 2 << 20
)

// TestDaemonMemoryBounded: three mounts run rounds of a steady workload
// (replace a directory of 300 files, end the lease, land). Each mount
// adds a bounded live heap to the daemon, and once the first rounds have
// warmed it, more rounds add nothing past a small margin: no table keeps
// what a round removed. Before the fix each /dev/fuse mount kept 9 MiB of
// request buffers (the test failed with 8.8 MiB per mount); the tables
// that kept every file ever made are checked in fusefs
// (TestRetainedStateBoundedAcrossRounds).
func TestDaemonMemoryBounded(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"README": "hi\n", "keep/a": "a\n"})
	e.ok("init")
	e.ok("create", "main", "--from", src)
	const n, rounds = 3, 5
	var mps []string
	for i := range n {
		name := fmt.Sprintf("w%d", i)
		e.ok("fork", "main", name)
		mps = append(mps, e.mountAt(name))
		if i == 0 {
			// The baseline: a daemon serving one mount.
			e.execOK(mps[0], "ls >/dev/null")
		}
	}
	one := e.memory()
	var after []daemonMemory
	for r := range rounds {
		for _, mp := range mps {
			e.execOK(mp, fmt.Sprintf(`rm -rf work && mkdir work && cd work && i=0 && while [ $i -lt 300 ]; do echo r%d-$i > f$i; i=$((i+1)); done`, r))
		}
		for i := range mps {
			e.ok("land", fmt.Sprintf("w%d", i))
		}
		after = append(after, e.memory())
		t.Logf("round %d: heap %.1f MiB live, %.1f MiB in use, anonymous RSS %.1f MiB, GC percent %d, mounts %+v", r,
			mib(after[r].HeapAlloc), mib(after[r].HeapInuse), mib(after[r].RSSAnon), after[r].GCPercent, after[r].Mounts)
	}
	last, warm := after[rounds-1], after[1]
	for name, c := range last.Mounts {
		w := warm.Mounts[name]
		if c.Inos > w.Inos+10 || c.Inodes > w.Inodes+10 || c.Writers > w.Writers+10 {
			t.Errorf("mount %s: tables grew from round 2 to round %d: inode numbers %d → %d, inodes %d → %d, writers %d → %d",
				name, rounds, w.Inos, c.Inos, w.Inodes, c.Inodes, w.Writers, c.Writers)
		}
	}
	if last.HeapAlloc > warm.HeapAlloc+memRoundGrowth {
		t.Errorf("live heap grew from %.1f MiB after round 2 to %.1f MiB after round %d (margin %.0f MiB)",
			mib(warm.HeapAlloc), mib(last.HeapAlloc), rounds, mib(memRoundGrowth))
	}
	if per := (int64(last.HeapAlloc) - int64(one.HeapAlloc)) / (n - 1); per > memPerMount {
		t.Errorf("each mount past the first adds %.1f MiB of live heap (bound %.0f MiB): %.1f MiB with one mount idle, %.1f MiB with %d after %d rounds",
			mib(uint64(per)), mib(memPerMount), mib(one.HeapAlloc), mib(last.HeapAlloc), n, rounds)
	}
	if b, _ := os.ReadFile(filepath.Join(e.store, "daemon.log")); !strings.Contains(string(b), "lowered to keep the heap within") {
		t.Errorf("the daemon's log does not state its GC policy:\n%s", b)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
