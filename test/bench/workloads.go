package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// params are the per-instance values a workload's scripts use.
type params struct {
	root    string // the instance's root (goroot/ lives here)
	tarball string
	seqMiB  int
	gocache string // a fresh, empty, native GOCACHE for this instance
	scratch string // a native directory for untimed scratch files
	buildPk string
	goBin   string
}

func (p params) goroot() string { return filepath.Join(p.root, "goroot") }

// workload is one measured operation. warm runs untimed in the same
// invocation (and, on acyclicfs, the same lease) right before timed; after
// runs untimed in its own invocation once every system has been measured.
type workload struct {
	name  string
	title string
	goal  float64 // acyclicfs/native ratio to meet; 0 = no goal
	// floorGoal is the acyclicfs/floor ratio to meet; 0 = no goal.
	floorGoal float64
	warm      func(p params) string
	timed     func(p params) string
	after     func(p params) string
	note      string
}

var workloads = []*workload{
	{
		name: "seq-write", title: "sequential write", goal: 1.1,
		// A VM that backs guest memory lazily (this one) makes a write into
		// memory no process touched lately several times slower than one
		// into memory just freed, so run order decided the ratio. Every
		// system's write follows the same untimed native write and
		// deletion of a file of the same size.
		warm: func(p params) string {
			f := shq(p.scratch + "/seq-write-prime.bin")
			return fmt.Sprintf("mkdir -p %s && dd if=/dev/zero of=%s bs=1M count=%d status=none && rm -f %s", shq(p.scratch), f, p.seqMiB, f)
		},
		timed: func(p params) string {
			return fmt.Sprintf("dd if=/dev/zero of=%s bs=1M count=%d status=none", shq(p.root+"/big.bin"), p.seqMiB)
		},
		note: "dd bs=1M from /dev/zero, no fsync (page-cache speed on native); each after an untimed native write and deletion of as much (equal memory state on this VM)",
	},
	{
		name: "seq-read", title: "sequential read (warm)", goal: 1.1,
		warm: func(p params) string {
			f := shq(p.root + "/big.bin")
			return fmt.Sprintf("[ -f %[1]s ] || dd if=/dev/zero of=%[1]s bs=1M count=%[2]d status=none", f, p.seqMiB)
		},
		timed: func(p params) string {
			return fmt.Sprintf("dd if=%s of=/dev/null bs=1M status=none", shq(p.root+"/big.bin"))
		},
		after: func(p params) string { return "rm -f " + shq(p.root+"/big.bin") },
		note:  "reads the file the write left, warm (caches cannot be dropped for FUSE consistently)",
	},
	{
		name: "untar", title: "untar Go src (~11.5k files)", goal: 1.5, floorGoal: 1.25,
		timed: func(p params) string {
			d := shq(p.root + "/untar")
			return fmt.Sprintf("mkdir -p %s && tar -xf %s -C %s", d, shq(p.tarball), d)
		},
		after: func(p params) string { return "rm -rf " + shq(p.root+"/untar") },
	},
	{
		name: "find-stat", title: "find + stat every file (warm)", goal: 2.0,
		warm:  func(p params) string { return findScript(p) },
		timed: func(p params) string { return findScript(p) },
		note:  "find -printf '%i %s %T@ %m' (lstat of every entry), after one untimed pass",
	},
	{
		name: "grep", title: "grep -r fixed string (warm)", goal: 2.0,
		warm:  func(p params) string { return grepScript(p) },
		timed: func(p params) string { return grepScript(p) },
		note:  "grep -rFc 'The Go Authors' over src/, after one untimed pass",
	},
	{
		name: "git-commit", title: "git add -A && git commit", goal: 1.5, floorGoal: 1.25,
		warm: func(p params) string {
			return fmt.Sprintf("cd %s && rm -rf .git && git init -q && git config user.name bench && git config user.email bench@example.com && git config gc.auto 0", shq(p.goroot()))
		},
		timed: func(p params) string {
			return fmt.Sprintf("cd %s && git add -A && git commit -qm bench", shq(p.goroot()))
		},
	},
	{
		name: "git-status", title: "git status (clean, warm)", goal: 1.5,
		warm: func(p params) string {
			// The repository git-commit left, or a new one where there is
			// none with a commit (git-commit not selected, or failed).
			return fmt.Sprintf(`cd %s && { git rev-parse -q --verify HEAD >/dev/null 2>&1 || { rm -rf .git && git init -q && git config gc.auto 0 && git add -A && git -c user.name=b -c user.email=b@example.com commit -qm bench; }; } && git status --porcelain >/dev/null`, shq(p.goroot()))
		},
		timed: func(p params) string {
			return fmt.Sprintf("cd %s && git status --porcelain >/dev/null", shq(p.goroot()))
		},
	},
	{
		name: "go-build", title: "go build (GOROOT in the tree, fresh GOCACHE)", goal: 1.2,
		warm:  func(p params) string { return freshGocache(p) },
		timed: func(p params) string { return goBuildScript(p, 2) },
		after: func(p params) string { return "rm -rf " + shq(p.gocache) },
		note:  "builds the package and all its std dependencies from the sources in the tree with 2 workers (-p 2); GOCACHE on the native disk",
	},
	{
		name: "go-build-p1", title: "go build -p 1 (as go build, 1 worker)",
		warm:  func(p params) string { return freshGocache(p) },
		timed: func(p params) string { return goBuildScript(p, 1) },
		after: func(p params) string { return "rm -rf " + shq(p.gocache) },
		note:  "the go build workload with one worker (-p 1): its time over go build's is the scaling from 1 worker to 2",
	},
	{
		name: "make-j1", title: "make -j1 (200 C compiles, " + fmt.Sprint(makeCopies) + " copies)",
		warm:  func(p params) string { return makeTreeScript(p) },
		timed: func(p params) string { return makeScript(p, 1) },
		after: func(p params) string { return "rm -rf " + shq(p.root+"/mk") },
		note:  "a generated Makefile in the tree: 200 one-function C files compiled with cc -c and the Go sources under src/go/ copied, one worker; made afresh (untimed) before each run",
	},
	{
		name: "make-j2", title: "make -j2 (as make -j1, 2 workers)",
		warm:  func(p params) string { return makeTreeScript(p) },
		timed: func(p params) string { return makeScript(p, 2) },
		after: func(p params) string { return "rm -rf " + shq(p.root+"/mk") },
		note:  "the make -j1 workload with two workers",
	},
	{
		name: "create-unlink", title: "create + unlink 10,000 empty files", goal: 3.0, floorGoal: 1.25,
		timed: func(p params) string {
			d := shq(p.root + "/cu")
			return fmt.Sprintf("mkdir %[1]s && cd %[1]s && seq -f f%%g 10000 | xargs touch && seq -f f%%g 10000 | xargs rm && cd / && rmdir %[1]s", d)
		},
		note: "seq | xargs touch, then seq | xargs rm",
	},
}

// scalingPairs are workloads that differ only in their number of workers
// (1, then 2): the report's scaling table divides their times.
var scalingPairs = [][2]string{{"go-build-p1", "go-build"}, {"make-j1", "make-j2"}}

func freshGocache(p params) string {
	return fmt.Sprintf("rm -rf %[1]s && mkdir -p %[1]s", shq(p.gocache))
}

// goBuildScript builds the build package with workers parallel jobs.
func goBuildScript(p params, workers int) string {
	return fmt.Sprintf("cd %s && GOROOT=%s GOCACHE=%s GOTOOLCHAIN=local GOFLAGS= GOWORK=off GOPROXY=off %s build -p %d -o %s %s",
		shq(p.goroot()+"/src"), shq(p.goroot()), shq(p.gocache), shq(p.goBin), workers, shq(p.root+"/build.out"), shq(p.buildPk))
}

// makeCopies is roughly how many files the make workloads copy: the Go
// sources directly under $GOROOT/src/go/*/ (Go 1.26: 192).
const makeCopies = "~190"

// makeTreeScript writes the make workloads' tree under ROOT/mk: 200 small
// C files and a Makefile that compiles each and copies the Go sources of
// src/go/*/ (paths relative to mk, so the rules read the tree in place).
func makeTreeScript(p params) string {
	mk := shq(p.root + "/mk")
	return fmt.Sprintf(`rm -rf %[1]s && mkdir -p %[1]s/src && cd %[1]s && for i in $(seq 200); do printf 'int f%%d(int x) { return x * %%d + 1; }\n' $i $i > src/f$i.c; done && cat > Makefile <<'MK'
SRCS := $(wildcard src/*.c)
OBJS := $(SRCS:src/%%.c=obj/%%.o)
GOSRC := $(wildcard ../goroot/src/go/*/*.go)
COPIES := $(GOSRC:../goroot/src/%%=cp/%%)
all: $(OBJS) $(COPIES)
obj/%%.o: src/%%.c
	@mkdir -p obj && cc -c -o $@ $<
cp/%%: ../goroot/src/%%
	@mkdir -p $(dir $@) && cp $< $@
MK`, mk)
}

func makeScript(p params, workers int) string {
	return fmt.Sprintf("cd %s && make -s -j%d", shq(p.root+"/mk"), workers)
}

func findScript(p params) string {
	return fmt.Sprintf("find %s -printf '%%i %%s %%T@ %%m\\n' >/dev/null", shq(p.goroot()))
}

func grepScript(p params) string {
	return fmt.Sprintf("grep -rFc 'The Go Authors' %s >/dev/null", shq(p.goroot()+"/src"))
}

func workloadNames() []string {
	var out []string
	for _, w := range workloads {
		out = append(out, w.name)
	}
	return out
}

func findWorkload(name string) *workload {
	for _, w := range workloads {
		if w.name == name {
			return w
		}
	}
	return nil
}

// sample is one measurement of one workload on one system in one run.
type sample struct {
	work     time.Duration
	overhead time.Duration // acyclicfs: exec's time beyond the workload
	cpu      time.Duration // serving daemon's CPU during the invocation (FUSE systems we start)
	load     float64       // the machine's 1-minute load average when the workload started
}

// runMatrix runs every selected workload on every selected system, runs
// times. Within a run all systems are mounted at once and each workload is
// run on every system back to back, in an order rotated per run, so each
// pair compared in a ratio ran close together in time.
func runMatrix(ctx context.Context, e *benchEnv, res *results) error {
	res.samples = map[string]map[string][]sample{}
	res.unmount = map[string][]time.Duration{}
	res.failed = map[string]map[string]string{}
	for _, w := range e.cfg.workloads {
		res.samples[w] = map[string][]sample{}
		res.failed[w] = map[string]string{}
	}
	for r := 0; r < e.cfg.runs; r++ {
		order := pairOrder(rotate(e.cfg.runSystems(r), r), r)
		logf("run %d/%d: systems in order %v", r+1, e.cfg.runs, order)
		insts := map[string]instance{}
		for _, s := range order {
			in, err := e.open(ctx, s, r, false)
			if err != nil {
				return fmt.Errorf("run %d: open %s: %w", r+1, s, err)
			}
			insts[s] = in
		}
		for _, wn := range e.cfg.workloads {
			w := findWorkload(wn)
			for _, s := range order {
				if res.failed[w.name][s] != "" {
					continue
				}
				if f, ok := insts[s].(refresher); ok {
					if err := f.refresh(ctx); err != nil {
						return fmt.Errorf("run %d: remount %s before %s: %w", r+1, s, w.name, err)
					}
				}
				p := e.params(insts[s], s, r)
				pid := daemonPID(e, insts[s])
				cpu0, load := procCPU(pid), loadAvg()
				work, over, err := insts[s].run(ctx, script(w.warm, p), w.timed(p))
				if err != nil && isPeer(s) {
					// A peer's failure is its result; acyclicfs's and
					// native's end the harness.
					res.failed[w.name][s] = tailLine(err.Error())
					logf("  %-14s %-15s failed (not run on it again): %v", w.name, s, err)
					continue
				}
				if err != nil {
					return fmt.Errorf("run %d: %s on %s: %w", r+1, w.name, s, err)
				}
				cpu := procCPU(pid) - cpu0
				logf("  %-14s %-15s %10v  (+%v, daemon CPU %v)", w.name, s, work.Round(time.Millisecond), over.Round(time.Millisecond), cpu)
				res.samples[w.name][s] = append(res.samples[w.name][s], sample{work: work, overhead: over, cpu: cpu, load: load})
			}
			if w.after != nil {
				for _, s := range order {
					_, _, err := insts[s].run(ctx, "", w.after(e.params(insts[s], s, r)))
					if err != nil && isPeer(s) {
						// The next workload finds what is left; a peer's
						// failure there is recorded like any other.
						logf("  after %s on %s failed: %v", w.name, s, err)
					} else if err != nil {
						return fmt.Errorf("run %d: after %s on %s: %w", r+1, w.name, s, err)
					}
				}
			}
		}
		for _, s := range order {
			took, err := insts[s].close(ctx)
			if err != nil {
				return fmt.Errorf("run %d: close %s: %w", r+1, s, err)
			}
			res.unmount[s] = append(res.unmount[s], took)
		}
		// Free the disk for the next run: native and the peers' copies,
		// overlay upper directories.
		for _, d := range []string{"native", "peers", "overlay"} {
			if err := os.RemoveAll(filepath.Join(e.work, d)); err != nil {
				return fmt.Errorf("clean %s: %w", d, err)
			}
		}
	}
	return nil
}

// isPeer reports whether s is one of the systems acyclicfs is compared
// with besides native.
func isPeer(s string) bool { return s == sysLoopback || s == sysOverlay || s == sysPassHP }

// runSystems is the systems measured in run r (0-based): the peers only in
// the first peerRuns runs. Ratios pair samples by run index, so a peer's
// samples stay aligned with native's.
func (c *config) runSystems(r int) []string {
	if r < c.peerRuns {
		return c.systems
	}
	var out []string
	for _, s := range c.systems {
		if !isPeer(s) {
			out = append(out, s)
		}
	}
	return out
}

func (e *benchEnv) params(in instance, sys string, run int) params {
	return params{
		root:    in.root(),
		tarball: e.tarball,
		seqMiB:  e.cfg.seqMiB,
		gocache: filepath.Join(e.work, "gocache", fmt.Sprintf("%s-%d", sys, run)),
		scratch: filepath.Join(e.work, "scratch"),
		buildPk: e.cfg.buildPkg,
		goBin:   e.goBin,
	}
}

func script(f func(params) string, p params) string {
	if f == nil {
		return ""
	}
	return f(p)
}

func rotate(list []string, n int) []string {
	out := make([]string, 0, len(list))
	for i := range list {
		out = append(out, list[(i+n)%len(list)])
	}
	return out
}

// loadAvg is the 1-minute load average (/proc/loadavg); 0 if unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	if _, err := fmt.Sscanf(string(b), "%f", &l); err != nil {
		return 0
	}
	return l
}

// pairOrder puts acyclicfs before acyclicfs-noattr in even runs and after
// it in odd ones (the rotation alone would not alternate them), so that
// neither pays more often for going first.
func pairOrder(order []string, run int) []string {
	i, j := slices.Index(order, sysAcyclicfs), slices.Index(order, sysAcyNoAttr)
	if i < 0 || j < 0 {
		return order
	}
	first, second := sysAcyclicfs, sysAcyNoAttr
	if run%2 == 1 {
		first, second = second, first
	}
	order[min(i, j)], order[max(i, j)] = first, second
	return order
}
