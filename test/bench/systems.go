package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The systems, in report column order.
const (
	sysNative   = "native"
	sysLoopback = "loopback"
	sysOverlay  = "fuse-overlayfs"
	sysPassHP   = "passthrough_hp"
	// sysFloor is floorfs (test/bench/floorfs): an in-memory FUSE server
	// with acyclicfs's kernel options and transports, the floor a FUSE
	// server reaches on this machine. Like acyclicfs, and unlike the
	// peers, it runs in every run: acyclicfs / floor pairs by run.
	sysFloor     = "floor"
	sysAcyclicfs = "acyclicfs"
)

var allSystems = []string{sysNative, sysLoopback, sysOverlay, sysPassHP, sysFloor, sysAcyclicfs}

// sysAcyNoAttr is acyclicfs mounted with --no-attribution: named in
// -systems (not measured by default) beside acyclicfs, it alternates with
// it in every run, and the report pairs the two (attribution on vs off).
const sysAcyNoAttr = "acyclicfs-noattr"

// knownSystems are the systems -systems may name.
var knownSystems = append(slices.Clone(allSystems), sysAcyNoAttr)

// usesAcyclicfs: systems measures an acyclicfs mount.
func usesAcyclicfs(systems []string) bool {
	return contains(systems, sysAcyclicfs) || contains(systems, sysAcyNoAttr)
}

// benchEnv is everything prepared once per harness run.
type benchEnv struct {
	cfg      *config
	work     string // work directory
	self     string // this binary, for the __time wrapper
	tarball  string // tar of $GOROOT/src (members under src/)
	lower    string // pristine tree: lower/goroot/{src,VERSION,go.env,pkg->real}
	acy      string // acyclicfs binary
	store    string // acyclicfs store
	loopback string // go-fuse loopback binary
	floor    string // floorfs binary
	passHP   string // libfuse's passthrough_hp binary
	goBin    string // the go command
	notes    []string
	// transports: what status --json reported for the mounts (io_uring,
	// dev-fuse), for the report.
	transports map[string]bool
	skipped    map[string]string // system -> why it was skipped
	cl         *cleaner
	importNs   time.Duration // acyclicfs create --from lower
	mountSeq   int
}

// prepare builds the tools, the tarball and the lower tree, and the
// acyclicfs store with the base workspace imported from the lower tree.
func prepare(ctx context.Context, cfg *config, work string, cl *cleaner) (*benchEnv, error) {
	e := &benchEnv{cfg: cfg, work: work, cl: cl, skipped: map[string]string{}}
	var err error
	if e.self, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("own executable: %w", err)
	}
	if e.goBin, err = exec.LookPath("go"); err != nil {
		return nil, fmt.Errorf("go command: %w", err)
	}
	out, err := runCmd(ctx, cfg.repo, nil, e.goBin, "env", "GOROOT")
	if err != nil {
		return nil, err
	}
	goroot := strings.TrimSpace(out.stdout)

	e.acy = cfg.acyclicfs
	if e.acy == "" && usesAcyclicfs(cfg.systems) {
		e.acy = filepath.Join(work, "bin", "acyclicfs")
		logf("building %s", e.acy)
		// Static, as `make build` makes it (every exec and fork pays the start).
		if _, err := runCmd(ctx, cfg.repo, []string{"CGO_ENABLED=0"}, e.goBin, "build", "-o", e.acy, "./cmd/acyclicfs"); err != nil {
			return nil, err
		}
		// The small fsmonitor hook beside it, as `make build` installs it.
		if _, err := runCmd(ctx, cfg.repo, []string{"CGO_ENABLED=0"}, e.goBin, "build", "-o", filepath.Join(work, "bin", "acyclicfs-fsmonitor"), "./cmd/acyclicfs-fsmonitor"); err != nil {
			return nil, err
		}
	}
	e.loopback = cfg.loopback
	if e.loopback == "" && contains(cfg.systems, sysLoopback) {
		e.loopback = filepath.Join(work, "bin", "loopback")
		logf("building %s", e.loopback)
		if _, err := runCmd(ctx, cfg.repo, nil, e.goBin, "build", "-o", e.loopback, "github.com/hanwen/go-fuse/v2/example/loopback"); err != nil {
			return nil, err
		}
	}
	e.floor = cfg.floor
	if e.floor == "" && contains(cfg.systems, sysFloor) {
		e.floor = filepath.Join(work, "bin", "floorfs")
		logf("building %s", e.floor)
		if _, err := runCmd(ctx, cfg.repo, []string{"CGO_ENABLED=0"}, e.goBin, "build", "-o", e.floor, "./test/bench/floorfs"); err != nil {
			return nil, err
		}
	}
	if contains(cfg.systems, sysPassHP) {
		e.passHP = cfg.passHP
		if e.passHP == "" {
			e.passHP = filepath.Join(cfg.repo, "bin", "passthrough_hp")
		}
		if _, err := exec.LookPath(e.passHP); err != nil {
			e.skipped[sysPassHP] = fmt.Sprintf("no %s (make bench-deps builds it: scripts/passthrough-hp.sh)", e.passHP)
			e.passHP = ""
			cfg.systems = remove(cfg.systems, sysPassHP)
			logf("skipping %s: %s", sysPassHP, e.skipped[sysPassHP])
		}
	}
	if contains(cfg.systems, sysOverlay) {
		if _, err := exec.LookPath("fuse-overlayfs"); err != nil {
			e.skipped[sysOverlay] = "fuse-overlayfs not installed (apt-get install -y fuse-overlayfs)"
			cfg.systems = remove(cfg.systems, sysOverlay)
			logf("skipping %s: %s", sysOverlay, e.skipped[sysOverlay])
		}
	}

	e.tarball = filepath.Join(work, "gosrc.tar")
	e.lower = filepath.Join(work, "lower")
	logf("making %s from %s/src and the lower tree", e.tarball, goroot)
	gr := filepath.Join(e.lower, "goroot")
	script := fmt.Sprintf(`set -e
tar -C %[1]s -cf %[2]s src
mkdir -p %[3]s
tar -C %[3]s -xf %[2]s
cp %[1]s/VERSION %[1]s/go.env %[3]s/
ln -s %[1]s/pkg %[3]s/pkg`, shq(goroot), shq(e.tarball), shq(gr))
	if err := mustSh(ctx, script); err != nil {
		return nil, fmt.Errorf("lower tree: %w", err)
	}

	if usesAcyclicfs(cfg.systems) {
		e.store = filepath.Join(work, "store")
		cl.add(func() { e.shutdownAcyclicfs() })
		if _, err := e.acyCmd(ctx, "init"); err != nil {
			return nil, err
		}
		res, err := e.acyCmd(ctx, "create", "base", "--from", e.lower)
		if err != nil {
			return nil, err
		}
		e.importNs = res.wall
		logf("acyclicfs: imported the lower tree in %v", res.wall.Round(time.Millisecond))
	}
	return e, nil
}

// acyCmd runs the acyclicfs CLI against the bench store.
func (e *benchEnv) acyCmd(ctx context.Context, args ...string) (cmdResult, error) {
	if len(args) > 0 && args[0] == "mount" {
		args = append(args[:len(args):len(args)], "--transport", e.cfg.transport)
	}
	return runCmd(ctx, "/", nil, append([]string{e.acy, "--store", e.store}, args...)...)
}

// shutdownAcyclicfs unmounts every acyclicfs mount and stops the daemon,
// bounded in time so a wedged daemon cannot hang the harness; leftovers are
// detached lazily.
func (e *benchEnv) shutdownAcyclicfs() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := e.acyCmd(ctx, "shutdown"); err != nil {
		logf("acyclicfs shutdown: %v", err)
	}
	mnts, _ := filepath.Glob(filepath.Join(e.work, "mnt", "*"))
	for _, mp := range mnts {
		forceUnmount(mp)
	}
}

// instance is one system prepared for one run: a directory holding
// goroot/ (the lower tree) where workloads run.
type instance interface {
	// root is the directory the workloads see.
	root() string
	// run runs the timing wrapper with the two scripts; work is the timed
	// script's duration, overhead the rest of the invocation's wall time
	// beyond the wrapper (for acyclicfs: lease bind and lease end, i.e.
	// capture, publish and reconcile).
	run(ctx context.Context, warm, timed string) (work, overhead time.Duration, err error)
	// close unmounts and reports how long the unmount took.
	close(ctx context.Context) (time.Duration, error)
	// debugLog is the FUSE request log when mounted for profiling.
	debugLog() string
}

// open prepares system sys for run number n.
func (e *benchEnv) open(ctx context.Context, sys string, n int, debug bool) (instance, error) {
	e.mountSeq++
	tag := fmt.Sprintf("%s-%d-%d", sys, n, e.mountSeq)
	switch sys {
	case sysNative:
		dir := filepath.Join(e.work, "native", tag)
		if err := copyTree(ctx, e.lower, dir); err != nil {
			return nil, err
		}
		return &directInst{e: e, dir: dir}, nil
	case sysLoopback:
		return e.openLoopback(ctx, tag, debug)
	case sysOverlay:
		return e.openOverlay(ctx, tag)
	case sysPassHP:
		return e.openPassHP(ctx, tag)
	case sysFloor:
		return e.openFloor(ctx, tag, debug)
	case sysAcyclicfs:
		return e.openAcyclicfs(ctx, tag, debug, e.pairFlags()...)
	case sysAcyNoAttr:
		return e.openAcyclicfs(ctx, tag, debug, append(e.pairFlags(), "--no-attribution")...)
	}
	return nil, fmt.Errorf("unknown system %q", sys)
}

func copyTree(ctx context.Context, src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return mustSh(ctx, fmt.Sprintf("cp -a %s %s", shq(src), shq(dst)))
}

// timeWrapper runs the __time wrapper (optionally under a prefix command)
// and returns the workload's own duration and the invocation's wall time
// less the untimed warm-up.
func (e *benchEnv) timeWrapper(ctx context.Context, prefix []string, warm, timed string) (work, wall time.Duration, err error) {
	f, err := os.CreateTemp(e.work, "time-*")
	if err != nil {
		return 0, 0, err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	argv := append(append([]string{}, prefix...), e.self, timeSubcommand, name, warm, timed)
	res, err := runCmd(ctx, "/", nil, argv...)
	if err != nil {
		return 0, res.wall, err
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, res.wall, fmt.Errorf("read timing: %w", err)
	}
	var warmNs, ns int64
	if _, err := fmt.Sscanf(string(b), "%d %d", &warmNs, &ns); err != nil {
		return 0, res.wall, fmt.Errorf("parse timing %q: %w", b, err)
	}
	return time.Duration(ns), res.wall - time.Duration(warmNs), nil
}

// directInst is a directory used by plain processes (native, or a mount
// whose daemon needs no leases).
type directInst struct {
	e       *benchEnv
	dir     string
	mp      string    // non-empty for mounts
	proc    *exec.Cmd // foreground FUSE daemon, if any
	logPath string
}

func (d *directInst) root() string {
	if d.mp != "" {
		return d.mp
	}
	return d.dir
}

func (d *directInst) debugLog() string { return d.logPath }

func (d *directInst) run(ctx context.Context, warm, timed string) (time.Duration, time.Duration, error) {
	work, _, err := d.e.timeWrapper(ctx, nil, warm, timed)
	return work, 0, err
}

func (d *directInst) close(ctx context.Context) (time.Duration, error) {
	if d.mp == "" {
		return 0, nil
	}
	start := time.Now()
	_, err := runCmd(ctx, "/", nil, "fusermount3", "-u", d.mp)
	took := time.Since(start)
	if err != nil {
		forceUnmount(d.mp)
	}
	if d.proc != nil {
		done := make(chan error, 1)
		go func() { done <- d.proc.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-d.proc.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	return took, err
}

func (e *benchEnv) mountpoint(tag string) (string, error) {
	mp := filepath.Join(e.work, "mnt", tag)
	return mp, os.MkdirAll(mp, 0o755)
}

func (e *benchEnv) openLoopback(ctx context.Context, tag string, debug bool) (instance, error) {
	args := []string{"-q"}
	if debug {
		args = []string{"-debug"}
	}
	inst, err := e.openServer(ctx, tag, "loopback", debug, func(src, mp string) []string {
		return append(append([]string{e.loopback}, args...), mp, src)
	})
	if err != nil {
		return nil, err // not a nil *directInst in a non-nil instance
	}
	return inst, nil
}

// openFloor mounts floorfs, which copies the pristine lower tree into its
// memory at start (no copy on disk: it never writes to it), over the
// transport acyclicfs's mounts are asked for.
func (e *benchEnv) openFloor(ctx context.Context, tag string, debug bool) (instance, error) {
	inst, err := e.serve(ctx, tag, "floorfs", e.lower, debug, func(src, mp string) []string {
		a := []string{e.floor, "-from", src, "-transport", e.cfg.transport}
		if debug {
			a = append(a, "-debug")
		}
		return append(a, mp)
	})
	if err != nil {
		return nil, err // not a nil *directInst in a non-nil instance
	}
	return inst, nil
}

// openPassHP mounts libfuse's passthrough_hp, as the example ships (kernel
// caching on, its default threads), over a fresh copy of the lower tree.
// It keeps an open descriptor per inode the kernel knows, and this machine
// caps a process's descriptors at 20,000 (no CAP_SYS_RESOURCE to raise the
// hard limit), fewer than a run's workloads make together (the tree, the
// untar, git's objects): so it is mounted afresh before each workload
// (remountInst), which the report says.
func (e *benchEnv) openPassHP(ctx context.Context, tag string) (instance, error) {
	d, err := e.openServer(ctx, tag, "passthrough_hp", false, e.passHPArgv)
	if err != nil {
		return nil, err
	}
	return &remountInst{directInst: d, remount: func(ctx context.Context) (*directInst, error) {
		return e.serve(ctx, tag, "passthrough_hp", d.dir, false, e.passHPArgv)
	}}, nil
}

// refresher is an instance that wants a fresh mount before each workload.
type refresher interface {
	refresh(ctx context.Context) error
}

// remountInst is a foreground server's instance that is unmounted and
// mounted again (same directory, same mountpoint) before every workload
// but the first.
type remountInst struct {
	*directInst
	remount func(ctx context.Context) (*directInst, error)
	used    bool
}

func (r *remountInst) refresh(ctx context.Context) error {
	if !r.used {
		r.used = true
		return nil
	}
	if _, err := r.directInst.close(ctx); err != nil {
		return err
	}
	d, err := r.remount(ctx)
	if err != nil {
		return err
	}
	r.directInst = d
	return nil
}

// passHPArgv is passthrough_hp's command line serving src at mp.
func (e *benchEnv) passHPArgv(src, mp string) []string {
	return []string{e.passHP, "--foreground", src, mp}
}

// openServer copies the lower tree to a fresh directory and mounts it
// with a FUSE server that runs in the foreground: argv(src, mp) is its
// command line. The server's output goes to a log file (kept as the
// instance's debug log when debug is set).
func (e *benchEnv) openServer(ctx context.Context, tag, what string, debug bool, argv func(src, mp string) []string) (*directInst, error) {
	src := filepath.Join(e.work, "peers", tag)
	if err := copyTree(ctx, e.lower, src); err != nil {
		return nil, err
	}
	return e.serve(ctx, tag, what, src, debug, argv)
}

// serve mounts src at a fresh mountpoint with a foreground FUSE server
// (argv(src, mp)) and returns once the mount is there.
func (e *benchEnv) serve(ctx context.Context, tag, what, src string, debug bool, argv func(src, mp string) []string) (*directInst, error) {
	mp, err := e.mountpoint(tag)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(e.work, tag+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	a := argv(src, mp)
	c := exec.Command(a[0], a[1:]...)
	c.Stdout, c.Stderr = lf, lf
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", what, err)
	}
	inst := &directInst{e: e, dir: src, mp: mp, proc: c}
	if debug {
		inst.logPath = logPath
	}
	e.cl.add(func() {
		forceUnmount(mp)
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	})
	if err := waitMounted(ctx, mp, 30*time.Second); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return inst, nil
}

func (e *benchEnv) openOverlay(ctx context.Context, tag string) (instance, error) {
	base := filepath.Join(e.work, "overlay", tag)
	upper, wd := filepath.Join(base, "upper"), filepath.Join(base, "work")
	for _, d := range []string{upper, wd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	mp, err := e.mountpoint(tag)
	if err != nil {
		return nil, err
	}
	e.cl.add(func() { forceUnmount(mp) })
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", e.lower, upper, wd)
	if _, err := runCmd(ctx, "/", nil, "fuse-overlayfs", "-o", opts, mp); err != nil {
		return nil, err
	}
	if err := waitMounted(ctx, mp, 30*time.Second); err != nil {
		return nil, fmt.Errorf("fuse-overlayfs: %w", err)
	}
	return &directInst{e: e, dir: upper, mp: mp}, nil
}

// acyInst is a forked acyclicfs workspace mounted at mp.
type acyInst struct {
	e     *benchEnv
	name  string
	mp    string
	debug bool
}

// pairFlags are mount flags of both acyclicfs systems when attribution
// on and off are compared: --wait-warm, so that neither runs its first
// workload beside the two mounts' metadata warm-ups (the first of the
// pair to run would pay for both).
func (e *benchEnv) pairFlags() []string {
	if contains(e.cfg.systems, sysAcyNoAttr) && contains(e.cfg.systems, sysAcyclicfs) {
		return []string{"--wait-warm"}
	}
	return nil
}

// openAcyclicfs forks base and mounts the fork with mount's extra flags.
func (e *benchEnv) openAcyclicfs(ctx context.Context, tag string, debug bool, extra ...string) (instance, error) {
	name := strings.ReplaceAll(tag, "acyclicfs-", "w")
	if _, err := e.acyCmd(ctx, "fork", "base", name); err != nil {
		return nil, err
	}
	mp, err := e.mountpoint(tag)
	if err != nil {
		return nil, err
	}
	args := append([]string{"mount", name, mp}, extra...)
	if debug {
		args = append(args, "--debug")
	}
	if _, err := e.acyCmd(ctx, args...); err != nil {
		forceUnmount(mp)
		return nil, err
	}
	var st struct {
		Workspaces []struct {
			Transport string `json:"transport"`
		} `json:"workspaces"`
	}
	if err := e.statusJSON(ctx, &st, name); err == nil && len(st.Workspaces) == 1 {
		if e.transports == nil {
			e.transports = map[string]bool{}
		}
		e.transports[st.Workspaces[0].Transport] = true
	}
	return &acyInst{e: e, name: name, mp: mp, debug: debug}, nil
}

func (a *acyInst) root() string { return a.mp }

// waitWarmed waits until the mount of workspace ws reports its metadata
// warm-up done and returns the time since since. status --json is polled:
// the daemon reports no event for it.
func (e *benchEnv) waitWarmed(ctx context.Context, ws string, since time.Time) (time.Duration, error) {
	for {
		var st struct {
			Workspaces []struct {
				Warming bool `json:"warming"`
			} `json:"workspaces"`
		}
		if err := e.statusJSON(ctx, &st, ws); err != nil {
			return 0, err
		}
		if len(st.Workspaces) == 0 || !st.Workspaces[0].Warming {
			return time.Since(since), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (a *acyInst) debugLog() string {
	if !a.debug {
		return ""
	}
	return filepath.Join(a.e.store, "daemon.log")
}

func (a *acyInst) run(ctx context.Context, warm, timed string) (time.Duration, time.Duration, error) {
	prefix := []string{a.e.acy, "--store", a.e.store, "exec", a.mp, "--"}
	work, wall, err := a.e.timeWrapper(ctx, prefix, warm, timed)
	if err != nil {
		return 0, 0, err
	}
	return work, wall - work, nil
}

func (a *acyInst) close(ctx context.Context) (time.Duration, error) {
	res, err := a.e.acyCmd(ctx, "unmount", a.mp)
	if err != nil {
		forceUnmount(a.mp)
		return res.wall, err
	}
	// The workspace's generations stay in the store; removing the
	// workspace keeps `list` short but frees nothing until gc.
	if _, err := a.e.acyCmd(ctx, "rm", a.name); err != nil {
		logf("acyclicfs rm %s: %v", a.name, err)
	}
	return res.wall, nil
}
