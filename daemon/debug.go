package daemon

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"

	"github.com/acyclicfs/acyclicfs/fusefs"
)

// The daemon's debug endpoints, served on its control socket (the same
// peer check as every other request: the daemon's own user and root).
// They are for profiling a running daemon, e.g.
//
//	curl -s --unix-socket STORE/daemon.sock http://d/debug/memory
//	curl -s --unix-socket STORE/daemon.sock http://d/debug/pprof/heap >heap.pb
//	go tool pprof -top -inuse_space heap.pb
//
// /debug/memory collects garbage first, so its heap figures are the live
// heap; docs/benchmarks.md ("Daemon memory") uses it.

// MemoryReport is /debug/memory's answer.
type MemoryReport struct {
	// HeapInuse, HeapAlloc, HeapSys, StackInuse and Sys are
	// runtime.MemStats's after a full collection (bytes).
	HeapInuse  uint64 `json:"heap_inuse"`
	HeapAlloc  uint64 `json:"heap_alloc"`
	HeapSys    uint64 `json:"heap_sys"`
	StackInuse uint64 `json:"stack_inuse"`
	Sys        uint64 `json:"sys"`
	// RSSAnon and RSSFile are /proc/self/status's RssAnon and RssFile
	// (bytes): anonymous memory (the heap, stacks) and file-backed pages
	// (the metadata database's mmap, the binary).
	RSSAnon uint64 `json:"rss_anon"`
	RSSFile uint64 `json:"rss_file"`
	// GCPercent and MemoryLimit are the collector's settings.
	GCPercent   int   `json:"gc_percent"`
	MemoryLimit int64 `json:"memory_limit"`
	// Mounts are the served mounts' retained-state counts, by workspace.
	Mounts map[string]fusefs.MemoryCounts `json:"mounts"`
}

func (d *Daemon) debugRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/memory", d.handleMemory)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

func (d *Daemon) handleMemory(w http.ResponseWriter, r *http.Request) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep := MemoryReport{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, HeapSys: ms.HeapSys,
		StackInuse: ms.StackInuse, Sys: ms.Sys, Mounts: map[string]fusefs.MemoryCounts{}}
	// Read, not set: debug.SetGCPercent(-1) would turn the collector off
	// for a moment and race with tuneGC.
	gc := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(gc)
	if gc[0].Value.Kind() == metrics.KindUint64 {
		rep.GCPercent = int(gc[0].Value.Uint64())
	}
	if gc[1].Value.Kind() == metrics.KindUint64 {
		rep.MemoryLimit = int64(gc[1].Value.Uint64())
	}
	rep.RSSAnon, rep.RSSFile = procRSS()
	d.mu.Lock()
	names := make([]string, 0, len(d.mounts))
	for name := range d.mounts {
		names = append(names, name)
	}
	sort.Strings(names)
	ms2 := make([]*Mount, 0, len(names))
	for _, n := range names {
		ms2 = append(ms2, d.mounts[n])
	}
	d.mu.Unlock()
	for i, s := range ms2 {
		if s.mnt != nil {
			rep.Mounts[names[i]] = s.mnt.MemoryCounts()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

// procRSS reads RssAnon and RssFile from /proc/self/status (0 if not
// there).
func procRSS() (anon, file uint64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "RssAnon" && k != "RssFile") {
			continue
		}
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if k == "RssAnon" {
			anon = n << 10
		} else {
			file = n << 10
		}
	}
	return anon, file
}
