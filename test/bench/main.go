// Command bench measures acyclicfs against a native directory, go-fuse's
// loopback example, fuse-overlayfs and libfuse's passthrough_hp on the same
// workloads, side by side in one run, and writes the results as a markdown report (and optionally a PNG
// bar chart of the ratios to native).
//
// Run it from the repository root as root (it mounts FUSE filesystems):
//
//	go run ./test/bench                  # 5 runs, 1 GiB sequential file
//	go run ./test/bench -runs 3          # fewer runs
//	go run ./test/bench -quick           # 1 run, 128 MiB file, 10,000-file fork tree
//	go run ./test/bench -profile         # also count FUSE requests per workload (--debug)
//	go run ./test/bench -no-inplace      # skip the in-place workspace measurements
//	go run ./test/bench -no-cluster      # skip the store on etcd (cluster.go)
//	go run ./test/bench -only-cluster    # only that group, spliced into the report
//
// Every system gets the same lower tree: the Go distribution's src directory
// laid out as a GOROOT (src, VERSION, go.env and a symlink to the real pkg
// directory so `go build` finds the toolchain). Native, loopback and
// passthrough_hp get a fresh copy per run; fuse-overlayfs stacks a fresh
// upper directory over the shared pristine tree; acyclicfs forks a workspace
// imported once from it and mounts the fork.
//
// Each workload runs as `sh -c SCRIPT` under a tiny timing wrapper (this
// binary re-executed as `__time`), so the measured interval is the workload
// process itself on every system. On acyclicfs the wrapper runs under
// `acyclicfs exec MOUNTPOINT --`, i.e. as one explicit lease; the time the
// exec spends after the workload exits (ending the lease: capture, publish,
// reconcile) is reported separately, as is the unmount time.
//
// Runs alternate the order of the systems, and ratios to native are computed
// pair by pair within the same run before taking the median, so slow drift
// in machine load affects both sides of each ratio alike.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// config is the parsed command line.
type config struct {
	runs        int
	peerRuns    int // runs of the peers (loopback, fuse-overlayfs, passthrough_hp); <= runs
	quick       bool
	systems     []string
	workloads   []string
	seqMiB      int
	forkSizes   []int
	dir         string
	freshFS     string // -fresh-fs: size of a fresh ext4 holding the work directory
	keep        bool
	out         string
	png         string
	profile     bool
	profSys     []string // systems the census covers
	noForks     bool
	noLand      bool
	noInPlace   bool
	noFSMon     bool
	noSandbox   bool
	noMemory    bool
	noCluster   bool
	onlyClust   bool // -only-cluster: the cluster group alone, spliced into the report
	clusterRuns int
	transport   string // every acyclicfs mount's --transport
	acyclicfs   string
	loopback    string
	floor       string // floorfs binary ("": build ./test/bench/floorfs)
	passHP      string // libfuse's passthrough_hp binary ("": bin/passthrough_hp)
	repo        string
	buildPkg    string
	commandStr  string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == timeSubcommand {
		os.Exit(timeChild(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == followSubcommand {
		os.Exit(followChild(os.Args[2:]))
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	cfg := &config{}
	var systems, workloads, forkSizes, profSys string
	fs.IntVar(&cfg.runs, "runs", 5, "runs per system and workload")
	fs.IntVar(&cfg.peerRuns, "peer-runs", 0, "runs of the systems acyclicfs is compared with besides native (loopback, fuse-overlayfs, passthrough_hp); 0: as many as -runs")
	fs.BoolVar(&cfg.quick, "quick", false, "1 run, 128 MiB sequential file, fork sizes 1000,10000")
	fs.StringVar(&systems, "systems", strings.Join(allSystems, ","), "comma-separated systems to measure (also "+sysAcyNoAttr+": acyclicfs mounted with --no-attribution, reported against acyclicfs)")
	fs.StringVar(&workloads, "workloads", strings.Join(workloadNames(), ","), "comma-separated workloads to run (also grep-again: grep after two untimed passes)")
	fs.IntVar(&cfg.seqMiB, "seq-mib", 1024, "size of the sequential write/read file in MiB")
	fs.StringVar(&forkSizes, "fork-sizes", "1000,100000", "tree sizes (files) for the acyclicfs-only fork and capture measurements")
	fs.BoolVar(&cfg.noForks, "no-forks", false, "skip the acyclicfs-only fork and capture measurements")
	fs.BoolVar(&cfg.noLand, "no-land", false, "skip the acyclicfs-only land of a git commit into a moved parent (the Go tree committed to git)")
	fs.StringVar(&cfg.transport, "transport", "auto", "acyclicfs and floorfs mounts' --transport: auto (io_uring where the fuse module's enable_uring is on), io_uring or dev-fuse")
	fs.BoolVar(&cfg.noFSMon, "no-fsmonitor", false, "skip the acyclicfs-only git status measurements with and without the fsmonitor hook (the Go tree committed to git)")
	fs.BoolVar(&cfg.noSandbox, "no-sandbox", false, "skip the acyclicfs-only time to a ready agent sandbox: fork, mount and first git status of a create --from-git workspace of the Go tree")
	fs.BoolVar(&cfg.noMemory, "no-memory", false, "skip the acyclicfs-only daemon memory measurement: 4 mounts, 3 rounds of untar + git commit + land")
	fs.BoolVar(&cfg.noInPlace, "no-inplace", false, "skip the acyclicfs-only in-place workspace measurements (1,000/10,000/100,000 files; -quick: up to 10,000)")
	fs.BoolVar(&cfg.noCluster, "no-cluster", false, "skip the cluster group: a store on etcd (one member embedded in the harness) with two nodes sharing a blob directory, against a local store")
	fs.BoolVar(&cfg.onlyClust, "only-cluster", false, "run the cluster group alone and replace its section in the existing -out report (nothing else is measured or rewritten)")
	fs.IntVar(&cfg.clusterRuns, "cluster-runs", 9, "runs of the cluster group")
	fs.StringVar(&cfg.dir, "dir", "", "work directory (default: a fresh directory under $TMPDIR)")
	fs.StringVar(&cfg.freshFS, "fresh-fs", "", "make the work directory a fresh journaled ext4 of this size (truncate syntax, e.g. 24G) in a loop-mounted image under $TMPDIR, deleted afterwards; excludes -dir and -keep")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the work directory")
	fs.StringVar(&cfg.out, "out", "docs/benchmarks.md", "markdown report to write (empty: stdout only)")
	fs.StringVar(&cfg.png, "png", "docs/benchmarks.png", "PNG chart of ratios to write (empty: none)")
	fs.BoolVar(&cfg.profile, "profile", false, "after the timed runs, count FUSE requests per workload with --debug mounts")
	fs.StringVar(&profSys, "profile-systems", strings.Join(profiledSystems, ","), "comma-separated systems the -profile census covers (of "+strings.Join(profiledSystems, ", ")+")")
	fs.StringVar(&cfg.acyclicfs, "acyclicfs", "", "acyclicfs binary (default: build ./cmd/acyclicfs)")
	fs.StringVar(&cfg.loopback, "loopback", "", "go-fuse loopback binary (default: build github.com/hanwen/go-fuse/v2/example/loopback)")
	fs.StringVar(&cfg.floor, "floorfs", "", "floorfs binary, the floor server (default: build ./test/bench/floorfs)")
	fs.StringVar(&cfg.passHP, "passthrough-hp", "", "libfuse's passthrough_hp binary (default: bin/passthrough_hp, which `make bench-deps` builds with scripts/passthrough-hp.sh; the system is skipped without it)")
	fs.StringVar(&cfg.buildPkg, "build-pkg", "cmd/gofmt", "package built by the go-build workload (with GOROOT inside the mount)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.quick {
		if !set["runs"] {
			cfg.runs = 1
		}
		if !set["seq-mib"] {
			cfg.seqMiB = 128
		}
		if !set["fork-sizes"] {
			forkSizes = "1000,10000"
		}
	}
	if cfg.clusterRuns < 1 {
		return nil, fmt.Errorf("-cluster-runs must be at least 1")
	}
	if cfg.onlyClust && cfg.noCluster {
		return nil, fmt.Errorf("-only-cluster and -no-cluster exclude each other")
	}
	if cfg.runs < 1 {
		return nil, fmt.Errorf("-runs must be at least 1")
	}
	if cfg.seqMiB < 1 {
		return nil, fmt.Errorf("-seq-mib must be at least 1")
	}
	if cfg.peerRuns == 0 {
		cfg.peerRuns = cfg.runs
	}
	if cfg.peerRuns < 1 || cfg.peerRuns > cfg.runs {
		return nil, fmt.Errorf("-peer-runs must be between 1 and -runs (%d)", cfg.runs)
	}
	cfg.profSys = splitList(profSys)
	for _, s := range cfg.profSys {
		if !contains(profiledSystems, s) {
			return nil, fmt.Errorf("-profile-systems: cannot count requests of %q (have %s)", s, strings.Join(profiledSystems, ", "))
		}
	}
	cfg.systems = splitList(systems)
	for _, s := range cfg.systems {
		if !contains(knownSystems, s) {
			return nil, fmt.Errorf("unknown system %q (have %s)", s, strings.Join(knownSystems, ", "))
		}
	}
	if len(cfg.systems) == 0 || cfg.systems[0] != sysNative {
		// Ratios need the native baseline in every run.
		cfg.systems = append([]string{sysNative}, remove(cfg.systems, sysNative)...)
	}
	cfg.workloads = splitList(workloads)
	for _, w := range cfg.workloads {
		if findWorkload(w) == nil {
			return nil, fmt.Errorf("unknown workload %q (have %s)", w, strings.Join(allWorkloadNames(), ", "))
		}
	}
	for _, s := range splitList(forkSizes) {
		var n int
		if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n < 100 {
			return nil, fmt.Errorf("bad -fork-sizes entry %q (want integers >= 100)", s)
		}
		cfg.forkSizes = append(cfg.forkSizes, n)
	}
	cfg.commandStr = "go run ./test/bench"
	if len(args) > 0 {
		cfg.commandStr += " " + strings.Join(args, " ")
	}
	return cfg, nil
}

// run sets up the work directory and tools, runs every measurement and
// writes the report. All mounts and daemons it starts are torn down on
// return, including on error and on SIGINT/SIGTERM.
func run(ctx context.Context, cfg *config) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("must run as root (FUSE passthrough and fuse-overlayfs mounts)")
	}
	repo, err := findRepo()
	if err != nil {
		return err
	}
	cfg.repo = repo
	work := cfg.dir
	if cfg.freshFS != "" {
		if cfg.dir != "" || cfg.keep {
			return errors.New("-fresh-fs excludes -dir and -keep: the file system goes when the harness ends")
		}
		// Not :=, which would shadow the named err the deferred drop
		// reports its failure through.
		var mp string
		var drop func() error
		if mp, drop, err = freshFS(ctx, cfg.freshFS); err != nil {
			return err
		}
		defer func() {
			if derr := drop(); derr != nil && err == nil {
				err = fmt.Errorf("-fresh-fs: %w", derr)
			}
		}()
		work = filepath.Join(mp, "work")
	}
	if work == "" {
		work, err = os.MkdirTemp("", "acyclicfs-bench-")
		if err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	work, err = filepath.Abs(work)
	if err != nil {
		return err
	}
	cl := &cleaner{}
	defer func() {
		cl.run()
		if cfg.freshFS != "" {
			return // the whole file system goes
		}
		if !cfg.keep {
			if rerr := os.RemoveAll(work); rerr != nil && err == nil {
				err = fmt.Errorf("remove work dir: %w", rerr)
			}
		} else {
			logf("kept work directory %s", work)
		}
	}()
	if cfg.onlyClust {
		return runClusterOnly(ctx, cfg, work, cl)
	}
	// Tear down promptly on a signal even while a workload runs: the
	// workload's process is killed through ctx, then the deferred cleanup
	// unmounts everything.
	env, err := prepare(ctx, cfg, work, cl)
	if err != nil {
		return err
	}
	res := &results{cfg: cfg, env: env, started: time.Now()}
	res.machine = describeMachine()
	if err := runMatrix(ctx, env, res); err != nil {
		return err
	}
	if !cfg.noForks && contains(cfg.systems, sysAcyclicfs) {
		if err := runForks(ctx, env, res); err != nil {
			return err
		}
	}
	if !cfg.noLand && contains(cfg.systems, sysAcyclicfs) {
		if err := runLand(ctx, env, res); err != nil {
			return err
		}
	}
	if !cfg.noInPlace && contains(cfg.systems, sysAcyclicfs) {
		if err := runInPlace(ctx, env, res); err != nil {
			return err
		}
	}
	if !cfg.noFSMon && contains(cfg.systems, sysAcyclicfs) {
		if err := runFSMonitorGit(ctx, env, res); err != nil {
			return err
		}
	}
	if !cfg.noSandbox && contains(cfg.systems, sysAcyclicfs) {
		if err := runSandbox(ctx, env, res); err != nil {
			return err
		}
	}
	if !cfg.noMemory && contains(cfg.systems, sysAcyclicfs) {
		if err := runMemory(ctx, env, res); err != nil {
			return err
		}
	}
	if !cfg.noCluster && contains(cfg.systems, sysAcyclicfs) {
		if err := runCluster(ctx, env, res); err != nil {
			return err
		}
	}
	if cfg.profile {
		if err := runProfile(ctx, env, res); err != nil {
			return err
		}
	}
	res.finished = time.Now()
	if !cfg.profile && cfg.out != "" {
		p := cfg.out
		if !filepath.IsAbs(p) {
			p = filepath.Join(repo, p)
		}
		res.keptCensus = keptCensus(p)
	}
	if res.cluster == nil && cfg.out != "" {
		p := cfg.out
		if !filepath.IsAbs(p) {
			p = filepath.Join(repo, p)
		}
		res.keptCluster = keptSection(p, clusterHeading)
	}
	md := res.markdown()
	fmt.Print(md)
	if cfg.out != "" {
		p := cfg.out
		if !filepath.IsAbs(p) {
			p = filepath.Join(repo, p)
		}
		if err := os.WriteFile(p, []byte(md+keptAnalysis(p)), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		logf("wrote %s", p)
	}
	if cfg.png != "" {
		p := cfg.png
		if !filepath.IsAbs(p) {
			p = filepath.Join(repo, p)
		}
		if err := res.writePNG(p); err != nil {
			return fmt.Errorf("write chart: %w", err)
		}
		logf("wrote %s", p)
	}
	return nil
}

// runClusterOnly builds the binary, runs the cluster group and replaces
// its section of the report (-only-cluster).
func runClusterOnly(ctx context.Context, cfg *config, work string, cl *cleaner) error {
	e := &benchEnv{cfg: cfg, work: work, cl: cl, skipped: map[string]string{}}
	var err error
	if e.self, err = os.Executable(); err != nil {
		return fmt.Errorf("own executable: %w", err)
	}
	e.acy = cfg.acyclicfs
	if e.acy == "" {
		e.acy = filepath.Join(work, "bin", "acyclicfs")
		logf("building %s", e.acy)
		if _, err := runCmd(ctx, cfg.repo, []string{"CGO_ENABLED=0"}, "go", "build", "-o", e.acy, "./cmd/acyclicfs"); err != nil {
			return err
		}
	}
	res := &results{cfg: cfg, env: e, started: time.Now()}
	if err := runCluster(ctx, e, res); err != nil {
		return err
	}
	var b strings.Builder
	res.clusterMarkdown(&b)
	fmt.Print(b.String())
	if cfg.out == "" {
		return nil
	}
	p := cfg.out
	if !filepath.IsAbs(p) {
		p = filepath.Join(cfg.repo, p)
	}
	if err := spliceSection(p, clusterHeading, b.String()); err != nil {
		return err
	}
	logf("replaced the cluster section of %s", p)
	return nil
}

// analysisMarker starts the hand-written part of the report, which a
// rerun keeps (everything from the marker on) while regenerating the rest.
const analysisMarker = "<!-- analysis: hand-written, kept by the harness on rerun -->"

// keptAnalysis returns the hand-written tail of the existing report at
// path, or "" if it has none.
func keptAnalysis(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if i := strings.Index(string(b), analysisMarker); i >= 0 {
		return "\n" + string(b[i:])
	}
	return ""
}

// censusHeading starts the request census section of the report.
const censusHeading = "\n## FUSE requests per workload"

// censusKeptNote marks a census section a run without -profile carried
// over from the previous report.
const censusKeptNote = "*Carried over from an earlier report: this run did not count requests (`make bench-profile` does).*\n\n"

// keptCensus returns the request census section of the existing report at
// path (up to the next section), marked as carried over, or "" if it has
// none.
func keptCensus(path string) string {
	sec := keptSection(path, censusHeading)
	if sec != "" && !strings.Contains(sec, censusKeptNote) {
		if k := strings.Index(sec[1:], "\n\n"); k >= 0 {
			sec = sec[:k+3] + censusKeptNote + sec[k+3:]
		}
	}
	return sec
}

// findRepo returns the module root containing the working directory.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/acyclicfs/acyclicfs") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the acyclicfs module (go run ./test/bench)")
		}
		dir = parent
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func remove(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
