package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// The cluster group: a store on etcd with two nodes sharing a blob
// directory, against a local store, on the same operations in the same
// run (issue #28). etcd is one member embedded in this process
// (go.etcd.io/etcd/server/v3/embed, the server module of the client's
// version): no binary to build, and it cannot outlive the harness, even one
// killed with SIGKILL. Its data is in the work directory with fsync on, as
// a deployment would have it.

// clusterFiles is the size of the tree the group imports.
const clusterFiles = 1000

// clusterOps are the operations timed on both stores, in report order.
var clusterOps = []struct{ key, label string }{
	{"create", "create (import of 1,000 files)"},
	{"fork", "fork"},
	{"land", "land of a fork with 10 changed files"},
	{"list", "list (a command's fixed cost)"},
	{"status", "status, the node's daemon serving a mount"},
	{"status-exit", "status right after the node's last unmount"},
	{"follow", "follow: land on one node returns → the child's mount shows it"},
	{"follow-start", "follow, from the land command's start"},
}

// clusterGoals are the goals: a ratio to the local store, or (for
// follow) an absolute bound.
var clusterGoals = map[string]float64{"fork": 2, "land": 3}

const followGoal = 100 * time.Millisecond

// clusterResult is the group's measurements.
type clusterResult struct {
	local, cluster map[string][]time.Duration // op -> per run
	// rpcs: etcd requests the cluster's op caused, per run (method ->
	// count), from the server's gRPC metrics.
	rpcs       map[string][]map[string]int
	load0      string // /proc/loadavg when the group started
	load1      string // and when it ended
	etcd       string
	err        string
	runs       int
	started    time.Time
	finishedAt time.Time
}

// node is one store directory the group drives.
type node struct {
	e     *benchEnv
	store string
}

func (n node) cmd(ctx context.Context, args ...string) (cmdResult, error) {
	if len(args) > 0 && args[0] == "mount" {
		args = append(args[:len(args):len(args)], "--transport", n.e.cfg.transport)
	}
	return runCmd(ctx, "/", nil, append([]string{n.e.acy, "--store", n.store}, args...)...)
}

// shutdown unmounts what the node mounts and stops its daemon, bounded.
func (n node) shutdown(mnts string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := n.cmd(ctx, "shutdown"); err != nil {
		logf("cluster: shutdown %s: %v", n.store, err)
	}
	ms, _ := filepath.Glob(filepath.Join(mnts, "*"))
	for _, mp := range ms {
		forceUnmount(mp)
	}
	// A daemon the shutdown did not reach (a mount interrupted while its
	// daemon started: no socket yet) is ended by its id: SIGTERM; if it
	// is still there after 5 s (its shutdown waits on an etcd that is
	// gone), a second SIGTERM detaches its mounts and ends it; SIGKILL
	// only if that fails too.
	gone := func(pid int) bool {
		deadline := time.Now().Add(5 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		return syscall.Kill(pid, 0) != nil
	}
	for _, pid := range n.daemonPIDs() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if gone(pid) {
			continue
		}
		logf("cluster: daemon %d of %s still shutting down after 5s: second SIGTERM", pid, n.store)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if !gone(pid) {
			logf("cluster: daemon %d of %s ignored a second SIGTERM for 5s: killed", pid, n.store)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// daemonPIDs returns the processes running this node's daemon (this
// binary with --store n.store daemon).
func (n node) daemonPIDs() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) >= 4 && args[0] == n.e.acy && args[1] == "--store" && args[2] == n.store && args[3] == "daemon" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startEtcd starts a single-member etcd inside this process on free
// loopback ports, its data under dir; the returned stop closes it.
func startEtcd(dir string) (endpoint string, stop func(), err error) {
	free := func() (url.URL, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return url.URL{}, err
		}
		defer l.Close()
		return url.URL{Scheme: "http", Host: l.Addr().String()}, nil
	}
	peer, err := free()
	if err != nil {
		return "", nil, fmt.Errorf("etcd port: %w", err)
	}
	client, err := free()
	if err != nil {
		return "", nil, fmt.Errorf("etcd port: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "m0"
	cfg.Dir = dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = "m0=" + peer.String()
	cfg.InitialClusterToken = "acyclicfs-bench"
	cfg.LogLevel = "error"
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		srv.Close()
		return "", nil, fmt.Errorf("etcd: %w", err)
	case <-time.After(30 * time.Second):
		srv.Close()
		return "", nil, errors.New("etcd not ready after 30s")
	}
	return client.Host, srv.Close, nil
}

// walFsyncKey and walFsyncUsKey carry etcd's WAL fsyncs (count, and their
// time in µs) in etcdRequests' map.
const (
	walFsyncKey   = "#wal-fsyncs"
	walFsyncUsKey = "#wal-fsync-µs"
)

// etcdRequests reads the server's gRPC counters from its metrics endpoint:
// unary calls handled and messages received on streams, by method; and
// its WAL fsyncs (walFsyncKey, walFsyncUsKey).
func etcdRequests(ctx context.Context, host string) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("etcd metrics: %w", err)
	}
	defer resp.Body.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "etcd_disk_wal_fsync_duration_seconds_count "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			out[walFsyncKey] = int(f)
			continue
		}
		if v, ok := strings.CutPrefix(line, "etcd_disk_wal_fsync_duration_seconds_sum "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			out[walFsyncUsKey] = int(f * 1e6)
			continue
		}
		unary := strings.HasPrefix(line, "grpc_server_handled_total{") && strings.Contains(line, `grpc_type="unary"`)
		stream := strings.HasPrefix(line, "grpc_server_msg_received_total{") && strings.Contains(line, `grpc_type="bidi_stream"`)
		if !unary && !stream {
			continue
		}
		i := strings.Index(line, `grpc_method="`)
		sp := strings.LastIndexByte(line, ' ')
		if i < 0 || sp < 0 {
			continue
		}
		m := line[i+len(`grpc_method="`):]
		m = m[:strings.IndexByte(m, '"')]
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		if stream {
			m += " (stream msg)"
		}
		out[m] += int(v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("etcd metrics: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return out, nil
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// runCluster measures the group: per run, on the local store and on the
// cluster (in an order alternated per run), create, fork, land, status and
// follow.
func runCluster(ctx context.Context, e *benchEnv, res *results) (err error) {
	cr := &clusterResult{
		local: map[string][]time.Duration{}, cluster: map[string][]time.Duration{},
		rpcs: map[string][]map[string]int{}, load0: loadavg(), started: time.Now(),
		etcd: "one member embedded in the harness process (go.etcd.io/etcd/server/v3 v3.7, `embed`), data on the work directory's file system, fsync on",
	}
	res.cluster = cr
	defer func() {
		cr.load1, cr.finishedAt = loadavg(), time.Now()
		if err != nil {
			cr.err = err.Error()
			logf("cluster: failed (recorded, continuing): %v", err)
			err = nil
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
	}()
	dir := filepath.Join(e.work, "cluster")
	mnts := filepath.Join(dir, "mnt")
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(mnts, 0o755); err != nil {
		return err
	}
	host, stop, err := startEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		return err
	}
	// The cleaner runs newest first: the daemons stop while etcd still
	// serves them, then etcd.
	e.cl.add(stop)
	local := node{e, filepath.Join(dir, "local")}
	a := node{e, filepath.Join(dir, "a")}
	b := node{e, filepath.Join(dir, "b")}
	for _, n := range []node{local, a, b} {
		n := n
		e.cl.add(func() { n.shutdown(mnts) })
	}
	meta := "etcd://" + host + "/acyclicfs/bench"
	blobs := filepath.Join(dir, "blobs")
	if _, err := local.cmd(ctx, "init"); err != nil {
		return err
	}
	if _, err := a.cmd(ctx, "init", "--meta", meta, "--blobs", blobs, "--node", "a"); err != nil {
		return err
	}
	if _, err := b.cmd(ctx, "init", "--meta", meta, "--blobs", blobs, "--node", "b"); err != nil {
		return err
	}
	runs := e.cfg.clusterRuns
	for i := 0; i < runs; i++ {
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, onCluster := range order {
			if err := clusterRun(ctx, cr, host, mnts, tree, i, onCluster, local, a, b); err != nil {
				return err
			}
		}
		cr.runs++
		logf("cluster: run %d/%d done", i+1, runs)
	}
	return nil
}

// clusterRun is one run on one system: the local store (A = B = local) or
// the two nodes.
func clusterRun(ctx context.Context, cr *clusterResult, host, mnts, tree string, i int, onCluster bool, local, a, b node) error {
	sys, out := "local", cr.local
	if onCluster {
		sys, out = "cluster", cr.cluster
	} else {
		a, b = local, local
	}
	timed := func(op string, n node, args ...string) (cmdResult, error) {
		var before map[string]int
		if onCluster {
			var err error
			if before, err = etcdRequests(ctx, host); err != nil {
				return cmdResult{}, err
			}
		}
		syscall.Sync()
		r, err := n.cmd(ctx, args...)
		if err != nil {
			return r, fmt.Errorf("%s %s: %w", sys, op, err)
		}
		out[op] = append(out[op], r.wall)
		if onCluster {
			after, err := etcdRequests(ctx, host)
			if err != nil {
				return r, err
			}
			d := map[string]int{}
			for m, v := range after {
				if v-before[m] > 0 {
					d[m] = v - before[m]
				}
			}
			cr.rpcs[op] = append(cr.rpcs[op], d)
		}
		return r, nil
	}
	mount := func(n node, ws string) (string, func(), error) {
		mp := filepath.Join(mnts, fmt.Sprintf("%s-%s", sys, ws))
		if err := os.MkdirAll(mp, 0o755); err != nil {
			return "", nil, err
		}
		if _, err := n.cmd(ctx, "mount", ws, mp); err != nil {
			forceUnmount(mp)
			return "", nil, err
		}
		return mp, func() {
			_, _ = n.cmd(ctx, "unmount", mp)
			forceUnmount(mp)
		}, nil
	}
	// A tree of its own per run and system: the import stores 1,000 new
	// blobs every time (a repeated tree would find them stored).
	tree = filepath.Join(tree, fmt.Sprintf("%s-%d", sys, i))
	if err := genTreeTagged(tree, clusterFiles, fmt.Sprintf("%s run %d", sys, i)); err != nil {
		return err
	}
	base := fmt.Sprintf("t%d", i)
	if _, err := timed("create", a, "create", base, "--from", tree); err != nil {
		return err
	}
	fork := fmt.Sprintf("f%d", i)
	if _, err := timed("fork", a, "fork", base, fork); err != nil {
		return err
	}
	// The fork's 10 changes are made through a mount on A and captured by
	// its unmount; the land (timed) is then B's.
	mp, unmount, err := mount(a, fork)
	if err != nil {
		return err
	}
	if _, err := a.cmd(ctx, "exec", mp, "--", "sh", "-c", tenChanges(mp)); err != nil {
		unmount()
		return err
	}
	unmount()
	if _, err := timed("land", b, "land", fork); err != nil {
		return err
	}
	// A's daemon exits after the fork's unmount, its last: a command now
	// may meet it exiting.
	if _, err := timed("status-exit", a, "status"); err != nil {
		return err
	}
	if _, err := timed("list", a, "list"); err != nil {
		return err
	}
	d, whole, err := followOnce(ctx, sys, mount, timed, a, b, base, i)
	if err != nil {
		return err
	}
	out["follow"] = append(out["follow"], d)
	out["follow-start"] = append(out["follow-start"], whole)
	// Every run starts from the same set of workspaces (none), so that
	// status and list, which read each one, stay comparable across runs.
	if _, err := a.cmd(ctx, "rm", "--recursive", base); err != nil {
		return err
	}
	var sb strings.Builder
	for _, op := range clusterOps {
		if ds := out[op.key]; len(ds) > i {
			fmt.Fprintf(&sb, " %s %v", op.key, ds[i].Round(time.Microsecond))
		}
	}
	logf("cluster: %s run %d:%s", sys, i+1, sb.String())
	return nil
}

// genTreeTagged writes n small files under dir as genTree does, their
// contents tagged so that no other tree has them, then syncs.
func genTreeTagged(dir string, n int, tag string) error {
	return genTreeOf(dir, n, func(i int) string { return fmt.Sprintf("file %d of %s\n", i, tag) })
}

// followFile is the file the sibling changes in the follow measurement.
var followFile = treeFile(3)

// followOnce forks base twice: a child mounted on A, idle, and a sibling on
// B that appends a line to one file and is unmounted (captured). A poller
// in its own session stats that file in the child's mount every
// millisecond; B lands the sibling; the time is from B's land returning to
// the poller's first stat showing the new size. The poller's stats are
// answered from the kernel's attribute cache (the file was looked up once
// by an exec whose lease ended), so they open no lease that would make
// the child active and defer its rebase to a final close; the view switch
// invalidates the entry and the next stat sees the new file.
func followOnce(ctx context.Context, sys string, mount func(node, string) (string, func(), error), timed func(string, node, ...string) (cmdResult, error), a, b node, base string, i int) (fromReturn, fromStart time.Duration, err error) {
	child, sib := fmt.Sprintf("c%d", i), fmt.Sprintf("s%d", i)
	for _, ws := range []string{child, sib} {
		if _, err := a.cmd(ctx, "fork", base, ws); err != nil {
			return 0, 0, err
		}
	}
	cmp, cunmount, err := mount(a, child)
	if err != nil {
		return 0, 0, err
	}
	defer cunmount()
	if _, err := timed("status", a, "status"); err != nil {
		return 0, 0, err
	}
	target := filepath.Join(cmp, followFile)
	if _, err := a.cmd(ctx, "exec", cmp, "--", "stat", "-c", "%s", target); err != nil {
		return 0, 0, err
	}
	smp, sunmount, err := mount(b, sib)
	if err != nil {
		return 0, 0, err
	}
	if _, err := b.cmd(ctx, "exec", smp, "--", "sh", "-c", "echo landed by the sibling >> "+shq(filepath.Join(smp, followFile))); err != nil {
		sunmount()
		return 0, 0, err
	}
	sunmount()

	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c := exec.CommandContext(pctx, e0(a), followSubcommand, target, "10s")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdout, err := c.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		return 0, 0, fmt.Errorf("follow poller: %w", err)
	}
	defer func() { _ = c.Wait() }()
	rd := bufio.NewReader(stdout)
	if line, err := rd.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		return 0, 0, fmt.Errorf("follow poller: %q %v", line, err)
	}
	syscall.Sync()
	landStart := time.Now()
	if _, err := b.cmd(ctx, "land", sib); err != nil {
		return 0, 0, fmt.Errorf("%s follow: land %s: %w", sys, sib, err)
	}
	landed := time.Now()
	line, err := rd.ReadString('\n')
	if err != nil {
		return 0, 0, fmt.Errorf("%s follow: the child's mount did not show the landing: %v", sys, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%s follow: poller said %q", sys, line)
	}
	seen := time.Unix(0, ns)
	return seen.Sub(landed), seen.Sub(landStart), nil
}

// e0 is the harness binary (the poller runs as its __follow subcommand).
func e0(n node) string { return n.e.self }

// followSubcommand re-executes this binary as the poller:
//
//	bench __follow PATH TIMEOUT
//
// It stats PATH, prints "ready", then stats it every millisecond until its
// size or change time differ and prints the wall clock of that stat in
// nanoseconds since the epoch; it exits 1 after TIMEOUT.
const followSubcommand = "__follow"

func followChild(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "bench __follow: want PATH TIMEOUT")
		return 2
	}
	limit, err := time.ParseDuration(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench __follow:", err)
		return 2
	}
	var st0 syscall.Stat_t
	if err := syscall.Stat(args[0], &st0); err != nil {
		fmt.Fprintln(os.Stderr, "bench __follow:", err)
		return 1
	}
	fmt.Println("ready")
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var st syscall.Stat_t
		err := syscall.Stat(args[0], &st)
		now := time.Now()
		if err == nil && (st.Size != st0.Size || st.Ctim != st0.Ctim || st.Ino != st0.Ino) {
			fmt.Println(now.UnixNano())
			return 0
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "bench __follow: %s unchanged after %v\n", args[0], limit)
	return 1
}

// clusterHeading starts the group's section of the report.
const clusterHeading = "\n## acyclicfs on etcd: two nodes against a local store"

func (r *results) clusterMarkdown(b *strings.Builder) {
	cr := r.cluster
	b.WriteString(clusterHeading + "\n\n")
	if r.cfg.onlyClust {
		fmt.Fprintf(b, "From `%s` (this section alone; the rest of the page is from the run named at the top). ", r.cfg.commandStr)
	}
	fmt.Fprintf(b, "%d run(s), %s → %s UTC; load average %s at the start, %s at the end (2 cores). ",
		cr.runs, cr.started.UTC().Format("2006-01-02 15:04"), cr.finishedAt.UTC().Format("15:04"), cr.load0, cr.load1)
	fmt.Fprintf(b, "etcd: %s. Two nodes (`init --meta etcd://…/acyclicfs/bench --blobs DIR --node a|b`, one blob directory shared) against a local store (`init`), all on the same file system, each with its own daemon; per run both systems do the same steps, in an order alternated per run, and ratios are taken pair by pair within a run. Every command is the CLI end to end (process start and, on the cluster, its etcd connection included).\n\n", cr.etcd)
	b.WriteString("- *create*: `create tN --from TREE`, a tree of 1,000 small files in 10 directories, on node A; each run and system imports a tree of its own (contents no other tree has), so every import stores 1,000 new blobs.\n")
	b.WriteString("- *fork*: `fork tN fN` on node A.\n")
	b.WriteString("- *land*: fN was mounted on node A, 10 files changed through `exec`, unmounted (captured); then `land fN` on node B (locally: the same store).\n")
	b.WriteString("- *status right after the node's last unmount*: `status` on node A right after that unmount (its daemon exits after its last unmount, and the command meets it exiting); *list*: `list` on node A right after that: the fixed cost of a command.\n")
	b.WriteString("- *status, the node's daemon serving a mount*: `status` on node A while it serves the follow measurement's child (the command is forwarded to the daemon; on the cluster it lists every workspace and the claims of both nodes).\n")
	fmt.Fprintf(b, "- *follow*: two more forks of tN: a child mounted on node A, idle, and a sibling mounted on node B where one line is appended to `%s`, then unmounted. A poller (this harness, in its own session) stats that file in the child's mount every 1 ms; its stats are answered from the kernel's attribute cache (the file was looked up by an `exec` whose lease ended), so they open no lease, which would make the child active and its rebase wait for a final close. Then `land` of the sibling on node B; timed from that command's return to the first stat that shows the new size (the view switch invalidates the entry); below 0 where the child showed it before the land command had exited (the land's process still closing its etcd session, say), so the time from the land's start is given too. The daemon logs no event for a view switch, so the stat loop is the measure. Locally the sibling's land is made through the same daemon that serves the child, whose hook rebases it.\n\n", followFile)
	hdr := []string{"operation", "local", "cluster (etcd)", "cluster / local", "goal", "met", "etcd requests per operation (median; by method)"}
	writeRow(b, hdr)
	writeSep(b, len(hdr))
	var misses []string
	for _, op := range clusterOps {
		l, c := cr.local[op.key], cr.cluster[op.key]
		goal, met := "—", "—"
		rs := summarize(ratiosSigned(c, l))
		ratio := fmtRatio(rs)
		if op.key == "follow-start" {
			ratio = "—"
		}
		if op.key == "follow" {
			ratio = "—"
			goal = "≤ " + fmtSec(followGoal.Seconds())
			if len(c) > 0 {
				ok := durStat(c).med <= followGoal.Seconds()
				met = metStr(ok)
				if !ok {
					misses = append(misses, op.label)
				}
			}
		} else if g, ok := clusterGoals[op.key]; ok {
			goal = fmt.Sprintf("≤ %.0f×", g)
			if rs.n > 0 {
				met = metStr(rs.med <= g)
				if rs.med > g {
					misses = append(misses, op.label)
				}
			}
		}
		writeRow(b, []string{op.label, fmtStatSigned(durStat(l)), fmtStatSigned(durStat(c)), ratio, goal, met, rpcSummary(cr.rpcs[op.key])})
	}
	if cr.err != "" {
		fmt.Fprintf(b, "\n- failed: `%s`\n", oneLine(cr.err))
	}
	b.WriteString("\n*etcd requests* are counted by the server (`grpc_server_handled_total` of unary calls and `grpc_server_msg_received_total` of stream messages on its `/metrics` endpoint, read before and after each command): everything etcd served meanwhile, so the daemons' lease keep-alives and watch traffic of that interval are included. *WAL fsyncs*: `etcd_disk_wal_fsync_duration_seconds` (count, and their time) over the same interval: each Txn that writes is one raft entry, one fsync.\n")
	if len(misses) > 0 {
		fmt.Fprintf(b, "\nNot met: %s.\n", strings.Join(misses, "; "))
	}
}

// ratiosSigned is a/b per run.
func ratiosSigned(a, b []time.Duration) []float64 {
	var xs []float64
	for i := 0; i < len(a) && i < len(b); i++ {
		if b[i] > 0 {
			xs = append(xs, float64(a[i])/float64(b[i]))
		}
	}
	return xs
}

// fmtStatSigned is fmtStat for values that may be below 0 (follow).
func fmtStatSigned(st stat) string {
	f := func(s float64) string {
		if s < 0 {
			return "−" + fmtSec(-s)
		}
		return fmtSec(s)
	}
	switch st.n {
	case 0:
		return "—"
	case 1:
		return f(st.med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(st.med), f(st.min), f(st.max))
}

// rpcSummary is the median total and the median per method.
func rpcSummary(runs []map[string]int) string {
	if len(runs) == 0 {
		return "—"
	}
	med := func(xs []int) int {
		sort.Ints(xs)
		return xs[len(xs)/2]
	}
	var totals []int
	per := map[string][]int{}
	for _, m := range runs {
		t := 0
		for k, v := range m {
			if strings.HasPrefix(k, "#") {
				continue
			}
			t += v
			per[k] = append(per[k], v)
		}
		totals = append(totals, t)
	}
	var names []string
	for k, v := range per {
		for len(v) < len(runs) {
			v = append(v, 0)
		}
		per[k] = v
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		mi, mj := med(append([]int(nil), per[names[i]]...)), med(append([]int(nil), per[names[j]]...))
		if mi != mj {
			return mi > mj
		}
		return names[i] < names[j]
	})
	var parts []string
	for _, k := range names {
		if v := med(append([]int(nil), per[k]...)); v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
	}
	var fs, fus []int
	for _, m := range runs {
		fs, fus = append(fs, m[walFsyncKey]), append(fus, m[walFsyncUsKey])
	}
	return fmt.Sprintf("%d: %s; WAL fsyncs %d (%s)", med(totals), strings.Join(parts, ", "), med(fs), fmtSec(float64(med(fus))/1e6))
}

// spliceSection replaces the section starting with heading in the report
// at path (up to the next section or the hand-written analysis) by sec,
// or inserts sec before the request census, the charts or the analysis.
func spliceSection(path, heading, sec string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return os.WriteFile(path, []byte(strings.TrimLeft(sec, "\n")), 0o644)
	}
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	s := string(b)
	if i := strings.Index(s, heading); i >= 0 {
		rest := s[i+len(heading):]
		end := len(rest)
		if j := strings.Index(rest, "\n## "); j >= 0 {
			end = j
		}
		if j := strings.Index(rest, "\n"+analysisMarker); j >= 0 && j < end {
			end = j
		}
		s = s[:i] + strings.TrimRight(sec, "\n") + "\n" + rest[end:]
	} else {
		at := len(s)
		for _, h := range []string{censusHeading, "\n## Charts", "\n" + analysisMarker} {
			if j := strings.Index(s, h); j >= 0 && j < at {
				at = j
			}
		}
		s = s[:at] + strings.TrimRight(sec, "\n") + "\n" + s[at:]
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// keptSection returns the section starting with heading in the existing
// report at path (up to the next section or the analysis), or "".
func keptSection(path, heading string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.Index(s, analysisMarker); i >= 0 {
		s = s[:i]
	}
	i := strings.Index(s, heading)
	if i < 0 {
		return ""
	}
	sec := s[i:]
	if j := strings.Index(sec[len(heading):], "\n## "); j >= 0 {
		sec = sec[:len(heading)+j]
	}
	return strings.TrimRight(sec, "\n") + "\n"
}
