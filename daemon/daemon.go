package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/internal/lockfile"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Daemon is the per-store server: it alone holds the store open, serves
// every mount of the store, and runs forwarded CLI commands.
type Daemon struct {
	m            *workspace.Manager
	dir          string
	exitWhenIdle bool
	logger       *log.Logger
	cfg          Config

	// gcMu: forwarded commands hold it shared; gc holds it exclusively so
	// that no capture or rebase writes objects while unreachable ones are
	// swept.
	gcMu sync.RWMutex

	mu     sync.Mutex        // protects mounts and stopping
	mounts map[string]*Mount // by workspace name
	// stopping is set once shutdown began; new mounts are refused.
	stopping bool
	// harnesses are pids declared harnesses of every mount (lease harness
	// without --mount), applied to later mounts too; guarded by mu.
	harnesses []declared
	// lost lists what recoveries run by this daemon could not keep
	// (fusefs.RecoverCaptureReport), for status; guarded by mu.
	lost []string

	quit     chan struct{} // closed to stop the daemon
	quitOnce sync.Once

	// claims are the node's claims on the workspaces it mounts, for a
	// store on etcd (nil for a local store); closed at exit, which
	// revokes their lease.
	claims *cluster.Claims

	// connMu guards conns, this daemon's mounts as MountsName lists them
	// (reap.go).
	connMu sync.Mutex
	conns  map[string]ConnRecord
}

// minDaemonProcs is the fewest Ps the daemon runs with. go-fuse keeps
// a reader blocked in read(2) on /dev/fuse per P (at least two), and a P
// whose thread is in a syscall is retaken by the runtime's monitor within
// 20 µs when no other P is idle; with as many Ps as CPUs on a small
// machine every request then wakes the monitor, which handed the P off,
// and the extra thread wakeups compete with the tool for the CPUs. With
// spare Ps the monitor leaves blocked readers alone. Measured on 2 CPUs,
// tar -x of the Go tree in a mount, three alternating pairs: 7.8, 11.3 and
// 11.0 s with 8 Ps against 11.5, 15.1 and 16.8 s with 2, daemon CPU down by
// a third.
const minDaemonProcs = 8

// daemonProcs is the GOMAXPROCS the daemon sets: 0 (leave it) when the
// user chose one in the environment or the machine has enough CPUs.
func daemonProcs(numCPU int, env string) int {
	if env != "" || numCPU >= minDaemonProcs {
		return 0
	}
	return minDaemonProcs
}

// daemonGCPercent is the daemon's GOGC. Serving requests allocates
// briskly (listings, nodes, replies) over a modest live heap, and at 100
// the collector ran often enough to matter: over six alternating pairs on 2
// CPUs, the metadata warm-up of the Go tree in place took 369-451 ms
// (median 388) against 396-515 (441), and a git status racing it 508-651
// against 584-709 ms; the resident size after warming a 100,000-file tree
// grew from 114 to 130 MB.
const daemonGCPercent = 400

// daemonGC returns the GC percent and soft memory limit the daemon sets:
// each 0 (leave it) when the user set it in the environment. The limit,
// a quarter of the machine's memory, makes the collector run more often
// before a large heap's growth at daemonGCPercent could crowd the
// machine.
func daemonGC(envGOGC, envLimit string, totalRAM uint64) (percent int, limit int64) {
	if envGOGC == "" {
		percent = daemonGCPercent
	}
	if envLimit == "" && totalRAM > 0 {
		limit = int64(totalRAM / 4)
	}
	return percent, limit
}

// totalRAM is the machine's memory in bytes (0 if unknown).
func totalRAM() uint64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// Kind is how the daemon treats a forwarded command.
type Kind int

// The kinds of forwarded commands.
const (
	// KindOther runs beside every other command but gc.
	KindOther Kind = iota
	// KindGC runs alone: no capture or rebase writes objects while gc
	// sweeps unreachable ones.
	KindGC
	// KindMountChange (mount, unmount, context): a daemon started on
	// demand exits after it once nothing is mounted.
	KindMountChange
	// KindShutdown: the daemon stops after answering.
	KindShutdown
)

// Config is what the CLI gives the daemon.
type Config struct {
	// ExitWhenIdle: exit after the last unmount (a daemon started on
	// demand).
	ExitWhenIdle bool
	// Exec runs a forwarded command line in the daemon against its open
	// store (Manager) and returns what it printed and its exit code.
	// ctx is canceled when the client goes (the user interrupted it).
	Exec func(ctx context.Context, d *Daemon, req RunRequest) RunResponse
	// Kind classifies a forwarded command line.
	Kind func(args []string) Kind
}

// Run serves until shutdown, SIGTERM or (with cfg.ExitWhenIdle) the last
// unmount. A second SIGTERM (or SIGINT, SIGHUP) during the shutdown
// detaches every mount and exits without waiting for reconciliation. ready, if not nil, receives "ready\n" once the socket
// listens (or the error that stopped the daemon), after any ReadyNote
// lines, and is closed.
func Run(storeDir string, ready io.WriteCloser, cfg Config) error {
	logger := log.New(os.Stderr, "acyclicfs-daemon: ", log.LstdFlags|log.Lmicroseconds)
	if n := daemonProcs(runtime.NumCPU(), os.Getenv("GOMAXPROCS")); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	percent, limit := daemonGC(os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"), totalRAM())
	gcLog := "GOGC=" + os.Getenv("GOGC") // the user's, as set
	if percent > 0 {
		debug.SetGCPercent(percent)
		gcLog = "GC percent " + strconv.Itoa(percent) + ", lowered to keep the heap within " +
			strconv.Itoa(daemonGCSlack>>20) + " MiB of its live size (at least " + strconv.Itoa(daemonGCMinPercent) + ")"
		tuneGC()
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	fail := func(err error) error {
		if ready != nil {
			fmt.Fprintf(ready, "%v\n", err)
			ready.Close()
		}
		return err
	}
	// One daemon per store: the lock is held for the daemon's lifetime and
	// released by the kernel if it dies, so a crashed daemon never blocks
	// the next one (a stale socket file alone would not tell). A daemon
	// that is exiting (its socket already gone) still holds it for a
	// moment: wait for it, bounded.
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return fail(err)
	}
	lock := lockfile.New(filepath.Join(storeDir, LockName), os.O_RDONLY|os.O_CREATE)
	if ok, _ := lock.TryLock(lockfile.Exclusive); !ok {
		// Held: by a live daemon, one exiting, or one killed that cannot
		// exit because a thread of it waits on its own mount (reap.go),
		// which only aborting its connections frees.
		notes, err := ReapDead(storeDir)
		for _, n := range notes {
			logger.Print(n)
			if ready != nil {
				fmt.Fprintf(ready, "%s%s\n", ReadyNote, n)
			}
		}
		if err != nil {
			return fail(fmt.Errorf("another daemon already serves %s: %w", storeDir, err))
		}
	}
	if err := lock.Wait(context.Background(), lockfile.Exclusive, daemonLockWait, 20*time.Millisecond); err != nil {
		return fail(fmt.Errorf("another daemon already serves %s", storeDir))
	}
	defer lock.Unlock()
	// The previous daemon's list of its mounts is stale: it is gone.
	mountsPath := filepath.Join(storeDir, MountsName)
	if err := os.Remove(mountsPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(fmt.Errorf("remove %s: %w", mountsPath, err))
	}
	defer os.Remove(mountsPath)
	m, err := openManagerPatiently(storeDir, logger)
	if err != nil {
		return fail(err)
	}
	d := &Daemon{m: m, dir: m.Dir(), exitWhenIdle: cfg.ExitWhenIdle, logger: logger, cfg: cfg,
		mounts: map[string]*Mount{}, quit: make(chan struct{})}
	m.SetHooks(workspace.Hooks{ParentAdvanced: d.parentAdvanced})
	if n := m.Node(); n != nil {
		d.claims = n.Claims(os.Getpid(), d.mountpoints, d.claimLostElsewhere, logger.Printf)
	}

	sock := filepath.Join(d.dir, SocketName)
	_ = os.Remove(sock)
	old := unix.Umask(0o077)
	ln, err := net.Listen("unix", sock)
	unix.Umask(old)
	if err != nil {
		m.Close()
		return fail(fmt.Errorf("listen on %s: %w", sock, err))
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		m.Close()
		return fail(err)
	}
	pidPath := filepath.Join(d.dir, PIDName)
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		ln.Close()
		m.Close()
		return fail(fmt.Errorf("write %s: %w", pidPath, err))
	}
	srv := &http.Server{Handler: d.routes(), ConnContext: peerContext}
	acc := &acceptClock{Listener: ln}
	go func() {
		if err := srv.Serve(acc); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("serve: %v", err)
			d.stop()
		}
	}()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	logger.Printf("serving %s (pid %d, GOMAXPROCS %d, %s, memory limit %d MiB)", d.dir, os.Getpid(), runtime.GOMAXPROCS(0),
		gcLog, debug.SetMemoryLimit(-1)>>20)
	if ready != nil {
		io.WriteString(ready, "ready\n")
		ready.Close()
	}
	select {
	case s := <-sigs:
		logger.Printf("%v: reconciling and unmounting everything (a second signal detaches every mount at once)", s)
	case <-d.quit:
	}
	// The shutdown reconciles every mount, which can wait a long time on
	// what it publishes to (an etcd without quorum, a remote that is
	// down). A second signal is the operator saying "now": detach every
	// mount and exit, as a crash would but without leaving a mountpoint
	// whose server is gone; overlays and mount records stay, and the
	// next mount or `unmount` recovers them.
	go func() {
		s := <-sigs
		logger.Printf("second %v: detaching every mount now; their unpublished changes stay for recovery at the next mount", s)
		for _, m := range d.All() {
			abortFuse(m.mp)
			_ = unix.Unmount(m.mp, unix.MNT_DETACH)
		}
		os.Exit(1)
	}()
	d.mu.Lock()
	d.stopping = true // mounts are refused from here on
	d.mu.Unlock()
	// Stop taking commands: unlink the socket so that new clients find no
	// daemon (and run their command themselves once we release the store),
	// then keep serving until the accept loop has been idle briefly, so
	// that connections already queued in the listen backlog are answered
	// (503: run it yourself) instead of reset by closing the listener. A
	// client whose connection is reset anyway retries the same way.
	_ = os.Remove(sock)
	acc.drain(time.Now(), drainQuiet, drainWindow)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	srv.Shutdown(ctx)
	cancel()
	outs, _ := d.UnmountAll()
	for _, o := range outs {
		logger.Printf("%s", o)
	}
	// Whatever could not be unmounted cleanly is detached: a mountpoint
	// left without its server would hang every tool that touches it.
	for _, s := range d.All() {
		s.stopGitResolve() // before the store closes
		if s.mnt != nil {
			abortFuse(s.mp)
			_ = unix.Unmount(s.mp, unix.MNT_DETACH)
		}
	}
	if b, err := os.ReadFile(pidPath); err == nil && string(bytes.TrimSpace(b)) == strconv.Itoa(os.Getpid()) {
		_ = os.Remove(pidPath)
	}
	if d.claims != nil {
		// Revokes the claims' lease: every claim left goes now, not at
		// its TTL.
		if err := d.claims.Close(); err != nil {
			logger.Printf("release claims: %v", err)
		}
	}
	return m.Close()
}

// daemonLockWait bounds how long a starting daemon waits for an exiting
// one to release the store's daemon lock.
const daemonLockWait = 10 * time.Second

// An exiting daemon keeps answering connections that were queued before
// its socket was unlinked until none was accepted for drainQuiet, at most
// drainWindow. No connection can join the backlog once the socket is
// gone, and the accept loop empties it in microseconds, so the quiet
// period is the usual wait: the next command, which needs the store lock
// the exiting daemon holds, waited the whole 200 ms before (a fork right
// after an unmount took 210 ms instead of 12).
const (
	drainQuiet  = 10 * time.Millisecond
	drainWindow = 200 * time.Millisecond
)

// acceptClock is the daemon's listener; it records its latest accept.
type acceptClock struct {
	net.Listener
	last atomic.Int64 // UnixNano of the latest accepted connection
}

func (l *acceptClock) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.last.Store(time.Now().UnixNano())
	}
	return c, err
}

// drain returns once quiet has passed with no accept since from, or at
// from+limit.
func (l *acceptClock) drain(from time.Time, quiet, limit time.Duration) {
	l.drainWith(from, quiet, limit, time.Now, time.Sleep) // a clock deadline: absence of accepts has no event
}

// drainWith is drain on the clock now and sleep.
func (l *acceptClock) drainWith(from time.Time, quiet, limit time.Duration, now func() time.Time, sleep func(time.Duration)) {
	deadline := from.Add(limit)
	for {
		last := time.Unix(0, l.last.Load())
		if last.Before(from) {
			last = from
		}
		t := now()
		wake := last.Add(quiet)
		if !wake.After(t) || !t.Before(deadline) {
			return
		}
		sleep(min(wake.Sub(t), deadline.Sub(t)))
	}
}

// openManagerPatiently opens the store, waiting for a CLI command that
// holds it to finish.
func openManagerPatiently(dir string, logger *log.Logger) (*workspace.Manager, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := workspace.Open(dir, workspace.Options{Warn: func(s string) { logger.Print(s) }})
		if err == nil || !errors.Is(err, store.ErrLocked) || time.Now().After(deadline) {
			return m, err
		}
	}
}

// mountpoints maps every workspace this daemon serves to its mountpoint.
func (d *Daemon) mountpoints() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]string, len(d.mounts))
	for ws, s := range d.mounts {
		if s != nil {
			out[ws] = s.mp
		}
	}
	return out
}

func (d *Daemon) stop() { d.quitOnce.Do(func() { close(d.quit) }) }

type peerKey struct{}

// peerContext records the connecting process's credentials.
func peerContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, *cred)
}

func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("POST /run", d.handleRun)
	mux.HandleFunc("POST /fsmonitor", d.handleFSMonitor)
	d.debugRoutes(mux)
	return d.checkPeer(mux)
}

// checkPeer admits only the daemon's own user (and root).
func (d *Daemon) checkPeer(next http.Handler) http.Handler {
	uid := uint32(os.Getuid())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, ok := r.Context().Value(peerKey{}).(unix.Ucred)
		if !ok || (cred.Uid != uid && cred.Uid != 0) {
			http.Error(w, "permission denied", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (d *Daemon) handleRun(w http.ResponseWriter, r *http.Request) {
	var req RunRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	stopping := d.stopping
	d.mu.Unlock()
	if stopping {
		// Exiting: the client runs the command itself (or starts the next
		// daemon) once this one has released the store.
		http.Error(w, "daemon is exiting", http.StatusServiceUnavailable)
		return
	}
	kind := d.cfg.Kind(req.Args)
	if kind == KindGC {
		d.gcMu.Lock()
	} else {
		d.gcMu.RLock()
	}
	resp := d.cfg.Exec(r.Context(), d, req)
	if kind == KindGC {
		d.gcMu.Unlock()
	} else {
		d.gcMu.RUnlock()
	}
	// A daemon started on demand leaves once nothing is mounted: after the
	// last unmount, or after the mount that started it failed. It decides
	// before answering, and stops taking commands (its socket unlinked,
	// later requests refused) at once: a mount the client sends right
	// after this answer must reach the next daemon, not this exiting one
	// — which would unmount it again on its way out.
	exiting := false
	if kind == KindMountChange && d.exitWhenIdle {
		d.mu.Lock()
		if len(d.mounts) == 0 && !d.stopping {
			d.stopping, exiting = true, true
		}
		d.mu.Unlock()
		if exiting {
			_ = os.Remove(filepath.Join(d.dir, SocketName))
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
	if kind == KindShutdown || exiting {
		d.stop()
	}
}

// mount registry helpers used by commands.

func (d *Daemon) Get(ws string) *Mount {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mounts[ws]
}

func (d *Daemon) ByMountpoint(mp string) *Mount {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.mounts {
		if s.mp == mp {
			return s
		}
	}
	return nil
}

func (d *Daemon) All() []*Mount {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*Mount, 0, len(d.mounts))
	for _, s := range d.mounts {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ws < out[j].ws })
	return out
}

// Serving reports whether ws is mounted by this daemon.
func (d *Daemon) Serving(ws string) bool { return d.Get(ws) != nil }

// Active reports whether ws has leases open.
func (d *Daemon) Active(ws string) bool {
	s := d.Get(ws)
	return s != nil && s.activeLeases() > 0
}

// HeadMoved refreshes an idle mount of ws whose head was moved by a
// command (rebase, land into it).
func (d *Daemon) HeadMoved(ws string) {
	if s := d.Get(ws); s != nil {
		s.refresh()
	}
}

// parentAdvanced is the manager's hook: a mounted child learns that its
// parent moved. Returns true when the mount handled it.
func (d *Daemon) parentAdvanced(ws string, parentHead store.ID) bool {
	s := d.Get(ws)
	if s == nil {
		return false
	}
	s.parentAdvanced(parentHead)
	return true
}

// UnmountAll reconciles and unmounts every mount (shutdown, SIGTERM).
// It returns one line per mount and how many failed; a failed mount is
// detached anyway when the daemon exits, and its overlay and mount record
// stay for the next mount to recover.
func (d *Daemon) UnmountAll() ([]string, int) {
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	var outs []string
	failed := 0
	for _, s := range d.All() {
		res, err := s.Unmount(true) // the daemon stops: a busy mount is detached
		if err != nil {
			failed++
			outs = append(outs, fmt.Sprintf("%s: %v", s.mp, err))
			continue
		}
		outs = append(outs, fmt.Sprintf("%s: %s", s.mp, res.Outcome))
	}
	return outs, failed
}
