package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the harness end to end with -quick on one workload when
// ACYCLICFS_BENCH_SMOKE=1 (it needs root, /dev/fuse and a few seconds of
// mounting); otherwise the test only proves the package compiles.
func TestSmoke(t *testing.T) {
	if os.Getenv("ACYCLICFS_BENCH_SMOKE") != "1" {
		t.Skip("set ACYCLICFS_BENCH_SMOKE=1 to run the harness smoke test (root, /dev/fuse)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	out := filepath.Join(t.TempDir(), "bench.md")
	cfg, err := parseFlags([]string{"-quick", "-workloads", "seq-write,create-unlink", "-systems", "native,floor,acyclicfs",
		"-no-forks", "-no-cluster", "-seq-mib", "8", "-out", out, "-png", ""})
	if err != nil {
		t.Fatal(err)
	}
	// The __time wrapper re-executes os.Executable(), which is the test
	// binary here; TestMain routes that invocation to timeChild.
	if err := run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| sequential write |", "acyclicfs / native", "| acyclicfs / floor |", "## acyclicfs against the floor"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q:\n%s", want, b)
		}
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick", "-systems", "acyclicfs"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.runs != 1 || cfg.seqMiB != 128 || cfg.systems[0] != sysNative || cfg.forkSizes[1] != 10000 {
		t.Errorf("quick defaults not applied: %+v", cfg)
	}
	if _, err := parseFlags([]string{"-workloads", "nope"}); err == nil {
		t.Error("unknown workload accepted")
	}
	if st := summarize([]float64{3, 1, 2, 10}); st.med != 2.5 || st.min != 1 || st.max != 10 {
		t.Errorf("summarize = %+v", st)
	}
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == timeSubcommand {
		os.Exit(timeChild(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == followSubcommand {
		os.Exit(followChild(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func TestKeptAnalysis(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b.md")
	if got := keptAnalysis(p); got != "" {
		t.Errorf("missing file: got %q", got)
	}
	if err := os.WriteFile(p, []byte("# old table\n"+analysisMarker+"\nmy notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := keptAnalysis(p), "\n"+analysisMarker+"\nmy notes\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestPeerRuns(t *testing.T) {
	cfg, err := parseFlags([]string{"-runs", "3", "-peer-runs", "1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.runSystems(0); strings.Join(got, ",") != strings.Join(allSystems, ",") {
		t.Errorf("run 1 systems = %v, want all", got)
	}
	for r := 1; r < 3; r++ {
		// The floor is no peer: acyclicfs / floor pairs by run.
		if got := cfg.runSystems(r); strings.Join(got, ",") != sysNative+","+sysFloor+","+sysAcyclicfs {
			t.Errorf("run %d systems = %v, want native, floor and acyclicfs", r+1, got)
		}
	}
	if cfg, err := parseFlags([]string{"-runs", "2"}); err != nil || cfg.peerRuns != 2 {
		t.Errorf("default peer runs = %d (%v), want -runs", cfg.peerRuns, err)
	}
	for _, bad := range [][]string{{"-runs", "2", "-peer-runs", "3"}, {"-peer-runs", "-1"}, {"-profile-systems", "native"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	if cfg, err := parseFlags([]string{"-profile-systems", "acyclicfs"}); err != nil || strings.Join(cfg.profSys, ",") != sysAcyclicfs {
		t.Errorf("-profile-systems acyclicfs: %v %v", cfg, err)
	}
}

func TestKeptCensus(t *testing.T) {
	p := filepath.Join(t.TempDir(), "report.md")
	if got := keptCensus(p); got != "" {
		t.Errorf("missing file: got %q", got)
	}
	old := "# report\n\n## In place\n\nx\n" + censusHeading[1:] + " (one run)\n\nCounted from logs.\n\n| a | b |\n\n## Chart\n\nbars\n" + analysisMarker + "\n## FUSE requests per workload in my notes\n"
	if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	want := censusHeading + " (one run)\n\n" + censusKeptNote + "Counted from logs.\n\n| a | b |\n"
	got := keptCensus(p)
	if got != want {
		t.Fatalf("kept census:\n%q\nwant\n%q", got, want)
	}
	// Carried over again: marked once.
	if err := os.WriteFile(p, []byte("# report\n"+got+"\n## Chart\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again := keptCensus(p); again != want {
		t.Fatalf("kept twice:\n%q\nwant\n%q", again, want)
	}
}

// TestPeerFailureReported: a peer's failed workload shows as failed in the
// table with the end of its error, and the ratio it has no sample for is
// empty rather than paired with another run's.
func TestPeerFailureReported(t *testing.T) {
	cfg, err := parseFlags([]string{"-runs", "1", "-systems", "native,passthrough_hp", "-workloads", "untar,git-commit", "-png", ""})
	if err != nil {
		t.Fatal(err)
	}
	r := &results{cfg: cfg, env: &benchEnv{cfg: cfg, work: t.TempDir()},
		samples: map[string]map[string][]sample{
			"untar":      {sysNative: {{work: 400 * time.Millisecond}}, sysPassHP: {{work: 2 * time.Second}}},
			"git-commit": {sysNative: {{work: 6 * time.Second}}},
		},
		failed: map[string]map[string]string{"untar": {}, "git-commit": {sysPassHP: tailLine(strings.Repeat("cd x && git add -A ", 40) + "\nfatal: error when closing loose object file: Bad file descriptor")}},
	}
	md := r.markdown()
	for _, want := range []string{
		"| untar Go src (~11.5k files) | 400.0 ms | 2.00 s | 5.00× |",
		"| git add -A && git commit | 6.00 s | — (failed, below) | — |",
		"git add -A && git commit failed on passthrough_hp (not run on it again): `…",
		"fatal: error when closing loose object file: Bad file descriptor`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if got := tailLine(strings.Repeat("é", 400)); !strings.HasPrefix(got, "…é") || len(got) > 303+2 {
		t.Errorf("tailLine cut a rune or kept too much: %q", got)
	}
}

// TestFloorColumns: with the floor measured, the main table has
// acyclicfs / floor per row with the floor goal, the floor section pairs
// the two by run with their daemon CPU, requests and CPU per request, the
// census lists every opcode per system, and the scaling table divides the
// 1-worker time by the 2-worker time per system.
func TestFloorColumns(t *testing.T) {
	cfg, err := parseFlags([]string{"-runs", "2", "-systems", "native,floor,acyclicfs", "-workloads", "untar,grep,make-j1,make-j2", "-png", ""})
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	r := &results{cfg: cfg, env: &benchEnv{cfg: cfg, work: t.TempDir()},
		samples: map[string]map[string][]sample{
			"untar": {
				sysNative:    {{work: 300 * ms}, {work: 500 * ms}},
				sysFloor:     {{work: 1000 * ms, cpu: 800 * ms}, {work: 2000 * ms, cpu: 1000 * ms}},
				sysAcyclicfs: {{work: 1200 * ms, cpu: 1400 * ms}, {work: 2800 * ms, cpu: 1800 * ms}},
			},
			"grep": {
				sysNative:    {{work: 100 * ms}, {work: 100 * ms}},
				sysFloor:     {{work: 150 * ms}, {work: 150 * ms}},
				sysAcyclicfs: {{work: 150 * ms}, {work: 180 * ms}},
			},
			"make-j1": {
				sysNative:    {{work: 4000 * ms}, {work: 4000 * ms}},
				sysFloor:     {{work: 6000 * ms}, {work: 6000 * ms}},
				sysAcyclicfs: {{work: 6000 * ms}, {work: 6600 * ms}},
			},
			"make-j2": {
				sysNative:    {{work: 2000 * ms}, {work: 2000 * ms}},
				sysFloor:     {{work: 4000 * ms}, {work: 4000 * ms}},
				sysAcyclicfs: {{work: 6000 * ms}, {work: 6000 * ms}},
			},
		},
		failed: map[string]map[string]string{},
		profile: map[string]map[string]*profileResult{
			"untar": {
				sysFloor:     {counts: map[string]int{"CREATE": 100, "WRITE": 50}, total: 150, daemonCPU: 5 * time.Second},
				sysAcyclicfs: {counts: map[string]int{"CREATE": 100, "SETATTR": 100}, total: 200, daemonCPU: 9 * time.Second},
			},
		},
	}
	md := r.markdown()
	for _, want := range []string{
		// Ratios pair by run: 1.2 and 1.4, median 1.3; goal 1.25 not met.
		"| floor | floor / native | acyclicfs | acyclicfs / native | acyclicfs / floor | floor goal | met |",
		"| 1.30× (1.20–1.40) | ≤ 1.25× | **not met** |",
		"## acyclicfs against the floor",
		// Timed-run CPU medians (1.6 s, 0.9 s) over the census counts.
		"| untar Go src (~11.5k files) | 2.00 s (1.20 s–2.80 s) | 1.50 s (1.00 s–2.00 s) | 1.30× (1.20–1.40) | ≤ 1.25× | **not met** | 1.60 s (1.40 s–1.80 s) | 900.0 ms (800.0 ms–1.00 s) | 200 | 150 | 8000.0 µs | 6000.0 µs |",
		"| grep -r fixed string (warm) | 165.0 ms (150.0 ms–180.0 ms) | 150.0 ms (150.0 ms–150.0 ms) | 1.10× (1.00–1.20) | — | — |",
		"| untar Go src (~11.5k files) | CREATE | 100 | 100 |",
		"|  | SETATTR | 0 | 100 |",
		"|  | WRITE | 50 | 0 |",
		"## Parallel tools: scaling from 1 worker to 2",
		"| make -j1 (200 C compiles, ~190 copies) → make -j2 (as make -j1, 2 workers) | 2.00× (2.00–2.00) | 1.50× (1.50–1.50) | 1.05× (1.00–1.10) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// Without the floor, no floor columns or section.
	cfg2, err := parseFlags([]string{"-runs", "1", "-systems", "native,acyclicfs", "-workloads", "untar", "-png", ""})
	if err != nil {
		t.Fatal(err)
	}
	r.cfg, r.env.cfg, r.profile = cfg2, cfg2, nil
	if md := r.markdown(); strings.Contains(md, "| acyclicfs / floor |") || strings.Contains(md, "## acyclicfs against the floor") || strings.Contains(md, "## Parallel tools") {
		t.Errorf("floor columns without the floor:\n%s", md)
	}
}

// TestAttributionColumns: acyclicfs-noattr is measured only when named,
// and the report pairs it with acyclicfs by run (on / off as a percent
// difference) with lease overhead, daemon CPU and load.
func TestAttributionColumns(t *testing.T) {
	if cfg, err := parseFlags(nil); err != nil || contains(cfg.systems, sysAcyNoAttr) {
		t.Errorf("default systems %v (%v): want no %s", cfg.systems, err, sysAcyNoAttr)
	}
	cfg, err := parseFlags([]string{"-runs", "2", "-systems", "acyclicfs,acyclicfs-noattr", "-workloads", "untar", "-png", ""})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{sysNative, sysAcyclicfs, sysAcyNoAttr}; !slices.Equal(cfg.systems, want) {
		t.Errorf("systems %v, want %v", cfg.systems, want)
	}
	ms := time.Millisecond
	r := &results{cfg: cfg, env: &benchEnv{cfg: cfg, work: t.TempDir()}, failed: map[string]map[string]string{},
		samples: map[string]map[string][]sample{"untar": {
			sysNative:    {{work: 300 * ms}, {work: 500 * ms}},
			sysAcyclicfs: {{work: 1020 * ms, overhead: 100 * ms, cpu: 700 * ms, load: 2}, {work: 2200 * ms, overhead: 300 * ms, cpu: 900 * ms, load: 4}},
			sysAcyNoAttr: {{work: 1000 * ms, overhead: 100 * ms, cpu: 600 * ms, load: 3}, {work: 2000 * ms, overhead: 200 * ms, cpu: 800 * ms, load: 5}},
		}}}
	md := r.markdown()
	// Per-run ratios 1.02 and 1.10: median 1.06.
	want := "| untar Go src (~11.5k files) | 1.61 s (1.02 s–2.20 s) | 1.50 s (1.00 s–2.00 s) | +6.0 % (+2.0 – +10.0) | 200.0 ms (100.0 ms–300.0 ms) | 150.0 ms (100.0 ms–200.0 ms) | 800.0 ms (700.0 ms–900.0 ms) | 700.0 ms (600.0 ms–800.0 ms) | 3.5 (2.0–5.0) |"
	if !strings.Contains(md, "## Write attribution on vs off") || !strings.Contains(md, want) {
		t.Errorf("report lacks the attribution section or %q:\n%s", want, md)
	}
	for r := range 4 {
		order := pairOrder(rotate(cfg.systems, r), r)
		if on, off := slices.Index(order, sysAcyclicfs), slices.Index(order, sysAcyNoAttr); (on < off) != (r%2 == 0) {
			t.Errorf("run %d order %v: acyclicfs goes first in even runs only", r, order)
		}
	}
	if _, err := parseFlags([]string{"-systems", "acyclicfs-nope"}); err == nil {
		t.Error("an unknown system was accepted")
	}
}
