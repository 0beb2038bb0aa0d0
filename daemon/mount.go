package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/fusefs"
	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/internal/fusectl"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Mount is one mounted workspace: the FUSE mount, its session tracker,
// and the leases it holds in the workspace's operation window.
//
// Lock order: served.lock, then daemon.mu. The lock is a channel so that
// waits for it are bounded (new sessions wait for a reconcile to finish,
// up to admitWait, instead of failing at once).
type Mount struct {
	d        *Daemon
	ws       string
	mp       string
	stateDir string
	ttl      time.Duration
	by       sessions.By
	// noAttr: attribution is off (MountOptions.NoAttribution).
	noAttr bool
	mnt    *fusefs.Mount
	// view is mnt as the final close uses it (a fake in unit tests).
	view view
	// dev is the mount's device ("major:minor", as mountinfo shows it),
	// by which the fsmonitor hook names the mount it runs in.
	dev     string
	tracker *sessions.Tracker
	// inPlace: the workspace is in place; reconciliation materializes it
	// into its directory. baseDir, when the mount covers that directory,
	// is the fd to the directory underneath (docs/inplace.md).
	inPlace bool
	baseDir *dirfd.Dir
	detach  func()

	lock chan struct{} // held (full) while leases change or the mount reconciles

	// readOnly: a root of a frozen or discarded context (context_mount.go).
	// unmountIdle: unmount once the window closes (a discarded context).
	readOnly, unmountIdle atomic.Bool
	// fenced: another node claimed the workspace while this node had
	// lost its claim (fenced.go); set once, never cleared.
	fenced atomic.Pointer[FencedStatus]

	// Fields below are protected by lock.
	leases  map[sessions.Owner]*heldLease
	pinned  store.ID // generation the view shows (overlay base)
	last    workspace.Result
	timing  *ReconcileTiming // the last final close's (nil: none yet)
	closing bool
	// pull is a `git pull` queued while leases were open: it runs at the
	// window's final close (gitcmds.go queuePull).
	pull *queuedPull
	// failed is the capture that could not be stored (capturefail.go);
	// retrying: its background retry runs.
	failed   *captureFailure
	retrying bool
	// attr is the window's attribution bookkeeping (attribution.go).
	attr attrState
	// leaseInfo describes the leases of the window for the overlay log's
	// writer records (attribution.go describeWriter); its own lock, as
	// the overlay asks while it serves requests.
	leaseMu   sync.Mutex
	leaseInfo map[sessions.Owner]leaseDesc

	// captureState is status's view of failed (nil: nothing to show);
	// activity what the mount is busy with (nil: nothing). Read without
	// the lock by status.
	captureState atomic.Pointer[CaptureStatus]
	activity     atomic.Pointer[Activity]
	// gone is closed (once, by goneOnce) when the mount is unmounted.
	gone     chan struct{}
	goneOnce sync.Once
	// resolve is the background resolution of git object references
	// (gitresolve.go).
	resolve gitResolver

	// parentSeen is the last parent head parentAdvanced took on, and
	// followDone is closed when its handling is over (follow.go); both
	// under followMu.
	followMu   sync.Mutex
	parentSeen store.ID
	followDone chan struct{}
}

// view is what the final close, a refresh and a capture retry need of
// the mount's FUSE side: capture its overlay, switch it to a new head,
// hold off the warm-up. *fusefs.Mount is the one implementation outside
// tests.
type view interface {
	HoldWarm() (release func())
	CaptureDeferredLinks() (root store.ID, links [][]string, changed bool, trees []*store.Tree, done func(), err error)
	FreeScratch() (int64, error)
	PendingBytes() int64
	SwitchViewQueuedLinks(root store.ID, links [][]string) (<-chan struct{}, error)
	TakeWriters() []fusefs.PathWriters
	WritersRecorded()
}

var _ view = (*fusefs.Mount)(nil)

// ReconcileTiming is where the last final close spent its time: status
// --json's last_reconcile, in milliseconds. Capture covers capturing the
// mount's changes and publishing them; detect and materialize are an
// in-place workspace's comparison of its directory with what it should
// hold and the journaled write of the head into it (workspace.SyncTiming).
type ReconcileTiming struct {
	TotalMS       float64 `json:"total_ms"`
	CaptureMS     float64 `json:"capture_ms"`
	DetectMS      float64 `json:"detect_ms,omitempty"`
	MaterializeMS float64 `json:"materialize_ms,omitempty"`
	Edits         int     `json:"materialized_edits,omitempty"`
}

// millis is d in milliseconds, to a tenth.
func millis(d time.Duration) float64 { return math.Round(d.Seconds()*1e4) / 10 }

type heldLease struct {
	owner    sessions.Owner
	holder   *window.Holder
	explicit bool
	label    string
	since    time.Time
	id       window.LeaseID
	leader   []string // the session leader's command line at begin
}

const admitWait = 60 * time.Second

func (s *Mount) acquire(wait time.Duration) bool {
	if wait <= 0 {
		s.lock <- struct{}{}
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.lock <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (s *Mount) release() { <-s.lock }

func (s *Mount) activeLeases() int {
	if !s.acquire(50 * time.Millisecond) {
		return 1 // reconciling or changing leases: treat as active
	}
	defer s.release()
	return len(s.leases)
}

// MountOptions are the knobs of `mount`.
type MountOptions struct {
	AllowOther bool
	LeaseTTL   time.Duration
	LeaseBy    sessions.By
	IdleClose  time.Duration
	Debug      bool
	Xattrs     bool
	// Transport is how the kernel's requests reach the daemon:
	// TransportAuto, TransportUring or TransportDevice.
	Transport string
	// WarmEntries bounds the metadata warm-up after mounting (0: none).
	WarmEntries int
	// WarmDefault: WarmEntries is the command's default, not asked for. A
	// git work tree at the root served by the fsmonitor hook then skips
	// the warm-up (fsmonitorWarm).
	WarmDefault bool
	// NoFSMonitor: do not point a repository at the mount's root at the
	// fsmonitor hook, and remove the lines an earlier mount added.
	NoFSMonitor bool
	// NoAttribution turns write attribution off for this mount (mount
	// --no-attribution): the overlay records no writers, a final close
	// stores no attribution record, and the session log's entries of the
	// mount's leases name no paths.
	NoAttribution bool
}

// The values of MountOptions.Transport (mount --transport).
const (
	TransportAuto   = "auto"     // io_uring where the kernel offers it, else /dev/fuse
	TransportUring  = "io_uring" // io_uring or fail
	TransportDevice = "dev-fuse" // read(2) and write(2) on /dev/fuse
)

// MountWorkspace mounts ws at mp in this daemon, recovering a previous
// crashed mount of ws first.
func (d *Daemon) MountWorkspace(ws, mp string, opt MountOptions) (*Mount, []string, error) {
	m := d.m
	w, err := m.Get(ws)
	if err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: the daemon is shutting down", workspace.ErrBusy)
	}
	if s := d.mounts[ws]; s != nil {
		d.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %s is already mounted at %s", workspace.ErrBusy, ws, s.mp)
	}
	for _, s := range d.mounts {
		if s == nil {
			continue // another mount being set up
		}
		if s.mp == mp {
			d.mu.Unlock()
			return nil, nil, fmt.Errorf("%w: %s already serves %s", workspace.ErrBusy, mp, s.ws)
		}
		// One mount of the store inside another: unmounting the outer one
		// takes the inner one with it, behind the daemon's back.
		if dirfd.Within(mp, s.mp) || dirfd.Within(s.mp, mp) {
			d.mu.Unlock()
			return nil, nil, fmt.Errorf("%w: mountpoint %s and the mount of %s at %s would be nested", workspace.ErrInvalidInput, mp, s.ws, s.mp)
		}
	}
	// Reserve the name while mounting.
	d.mounts[ws] = nil
	d.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			d.mu.Lock()
			delete(d.mounts, ws)
			d.mu.Unlock()
		}
	}()
	// On etcd, a workspace is mounted on one node at a time: claim it
	// before touching anything (another node's claim fails the mount with
	// cluster.ErrClaimed, naming that node).
	if d.claims != nil {
		if err := d.claims.Claim(context.Background(), ws, mp); err != nil {
			return nil, nil, err // names the workspace (and the node holding it)
		}
		defer func() {
			if !ok {
				if err := d.claims.Release(context.Background(), ws); err != nil {
					d.logger.Printf("%s: %v", ws, err)
				}
			}
		}()
	}

	var notes []string
	stateDir := filepath.Join(d.dir, workspace.MountScratchDir, ws)
	if rec, found, err := m.MountRecord(ws); err != nil {
		return nil, nil, err
	} else if found {
		// Recover first: it detaches the dead mountpoint, which the kernel
		// may still answer stat for from its attribute cache.
		n, err := d.recoverMount(rec, true)
		notes = append(notes, n...)
		if err != nil {
			return nil, notes, fmt.Errorf("recover previous mount of %s: %w", ws, err)
		}
	}
	if err := checkMountpoint(mp, d.dir); err != nil {
		return nil, notes, err
	}
	// An in-place workspace takes in what other programs changed in its
	// directory (and finishes an interrupted materialization) first.
	inPlace, isInPlace, err := m.InPlace(ws)
	if err != nil {
		return nil, notes, err
	}
	if isInPlace {
		res, err := m.SyncInPlace(context.Background(), ws)
		if err != nil {
			return nil, notes, fmt.Errorf("sync %s with %s: %w", ws, inPlace.Dir, err)
		}
		if res.Outcome != workspace.OutcomeCurrent {
			notes = append(notes, fmt.Sprintf("%s: %s with changes made in %s", ws, res.Outcome, inPlace.Dir))
		}
		for _, c := range res.Conflicts {
			notes = append(notes, fmt.Sprintf("conflict in %s (%s): both versions kept with markers", c.Path, c.Kind))
		}
	}
	// An unmounted child whose parent moved follows it before mounting.
	if w.Parent != "" {
		if res, err := m.Rebase(context.Background(), ws, workspace.RebaseOptions{}); err == nil && res.Outcome != workspace.OutcomeCurrent {
			notes = append(notes, fmt.Sprintf("%s: %s onto %s", ws, res.Outcome, w.Parent))
		}
	}
	w, err = m.Get(ws)
	if err != nil {
		return nil, notes, err
	}
	root, err := m.RootOf(w.Head)
	if err != nil {
		return nil, notes, err
	}
	links, err := m.LinksOf(w.Head)
	if err != nil {
		return nil, notes, err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, notes, fmt.Errorf("mount state %s: %w", stateDir, err)
	}
	if err := fusefs.ResetState(stateDir); err != nil {
		return nil, notes, err
	}
	s := &Mount{d: d, ws: ws, mp: mp, stateDir: stateDir, ttl: opt.LeaseTTL, by: opt.LeaseBy, noAttr: opt.NoAttribution,
		lock: make(chan struct{}, 1), leases: map[sessions.Owner]*heldLease{}, pinned: w.Head, gone: make(chan struct{})}
	if err := d.applyContextState(s); err != nil {
		return nil, notes, err
	}
	tr, err := sessions.New(sessions.Config{By: opt.LeaseBy, MountPoint: mp, IdleClose: opt.IdleClose,
		Handler: s, IgnorePIDs: []int{os.Getpid()}})
	if err != nil {
		return nil, notes, err
	}
	s.tracker = tr
	d.applyHarnesses(tr)
	s.inPlace = isInPlace
	if isInPlace && mp == inPlace.Dir {
		// Mounting over the directory itself: keep an fd to what is
		// underneath, through which the store reads unchanged files and
		// reconciliation writes the new head.
		bd, err := dirfd.Open(inPlace.Dir)
		if err != nil {
			tr.Close()
			return nil, notes, fmt.Errorf("open %s: %w", inPlace.Dir, err)
		}
		s.baseDir, s.detach = bd, m.Store().AttachBase(inPlace.Base, bd)
	}
	if err := m.PutMountRecord(workspace.MountRecord{Workspace: ws, Mountpoint: mp, StateDir: stateDir,
		Pinned: w.Head.String(), DaemonPID: os.Getpid(), Since: time.Now().UnixMilli(), InPlace: isInPlace, ClaimRev: d.claimRev(ws)}); err != nil {
		tr.Close()
		s.closeBase()
		return nil, notes, err
	}
	// git status in a work tree the fsmonitor hook serves looks nothing up.
	warm, walkers := opt.WarmEntries, 0
	if !isInPlace && !s.readOnly.Load() && !opt.NoFSMonitor && hasGitDir(m.Store(), root) {
		warm, walkers = fsmonitorWarm(opt, indexHasUntrackedCache(m.Store(), root))
	}
	// Listed before the kernel mount exists: from then on a thread of this
	// daemon may wait on it (the warm-up starts inside MountAt), and if
	// the daemon is killed then, ReapDead must find it.
	d.setConn(ws, &ConnRecord{Workspace: ws, Mountpoint: mp})
	mnt, err := fusefs.MountAt(mp, fusefs.Config{Objects: storeObjects{m.Store()}, Root: root, Links: links, StateDir: stateDir, WarmWalkers: walkers,
		Admitter: tr, DescribeWriter: s.describeWriter, AllowOther: opt.AllowOther, BaseInodes: m.DerivesFromInPlace(ws), Debug: opt.Debug, FsName: "acyclicfs:" + ws, Passthrough: true, EnableXattrs: opt.Xattrs,
		NoAttribution: opt.NoAttribution, WarmEntries: warm, Uring: opt.Transport == TransportUring, PreferUring: opt.Transport == TransportAuto,
		ReadOnly: s.readOnly.Load()})
	if err != nil {
		d.setConn(ws, nil)
		tr.Close()
		s.closeBase()
		_ = m.ClearMountRecord(ws)
		return nil, notes, fmt.Errorf("mount %s at %s: %w", ws, mp, err)
	}
	s.mnt, s.view = mnt, mnt
	// From mountinfo, not a stat of the mountpoint: the daemon asks its
	// own mount nothing it need not (reap.go).
	if dev, _, found := fusectl.FindDev(mp); found {
		s.dev = dev
		_, minor, _ := strings.Cut(dev, ":")
		d.setConn(ws, &ConnRecord{Workspace: ws, Mountpoint: mp, Conn: minor})
	}
	d.mu.Lock()
	d.mounts[ws] = s
	d.mu.Unlock()
	ok = true
	s.followParent()
	s.startGitResolve(root)
	if err := d.applyContextState(s); err != nil { // a freeze that raced this mount
		d.logger.Printf("%s: context state: %v", ws, err)
	}
	// An in-place workspace's .git is the user's own repository: left
	// alone. Without a .git in the pinned tree there is nothing to set up,
	// and the daemon does not ask its own mount (reap.go).
	if !isInPlace && !s.readOnly.Load() && hasGitDir(m.Store(), root) {
		// Without it git works as before, only slower: logged, not fatal.
		// It reads and writes through the mount: from a thread that
		// does not keep the FUSE devices open if the daemon is killed
		// meanwhile (reap.go).
		if exe, err := os.Executable(); err != nil {
			d.logger.Printf("%s: fsmonitor not set up: %v", ws, err)
		} else {
			fusefs.AsideFromDevices(func() { err = configureFSMonitor(mp, exe, d.dir, !opt.NoFSMonitor) })
			if err != nil {
				d.logger.Printf("%s: fsmonitor not set up: %v", ws, err)
			}
		}
	}
	if failpoint.Armed(selfStatPoint + "=" + ws) {
		// A request on the daemon's own mount from a thread sharing its
		// file table (none is left in the product): tests of ReapDead.
		var st unix.Stat_t
		_ = unix.Stat(filepath.Join(mp, "base.txt"), &st)
	}
	d.logger.Printf("mounted %s at %s (generation %s)", ws, mp, w.Head.Short())
	return s, notes, nil
}

// selfStatPoint, armed as daemon.self-stat=WS, makes MountWorkspace stat
// a file of WS's new mount from the goroutine serving the mount command
// (together with the failpoint fuse.self-request, the daemon dies serving
// it and cannot exit).
const selfStatPoint = "daemon.self-stat"

// hasGitDir reports whether tree root has a .git directory.
func hasGitDir(st *store.Store, root store.ID) bool {
	t, err := st.GetTree(root)
	if err != nil {
		return false
	}
	e, ok := t.Lookup(".git")
	return ok && e.Kind == store.KindDir
}

// indexHasUntrackedCache reports whether the work tree at root has a git
// index with an untracked cache (UNTR) that git can use: one this code
// could retarget to the mountpoint (fsmonitor_index.go). Unreadable or
// unknown: false (the warm-up runs).
func indexHasUntrackedCache(st *store.Store, root store.ID) bool {
	t, err := st.GetTree(root)
	if err != nil {
		return false
	}
	g, ok := t.Lookup(".git")
	if !ok || g.Kind != store.KindDir {
		return false
	}
	gt, err := st.GetTree(g.ID)
	if err != nil {
		return false
	}
	e, ok := gt.Lookup("index")
	if !ok || !e.Kind.IsRegular() {
		return false
	}
	index, err := st.ReadBlob(e.ID)
	if err != nil {
		return false
	}
	return hasUntrackedCache(index)
}

// checkMountpoint requires an existing directory; a dead FUSE mount left
// by a crashed daemon is detached first. A stat of its root may still be
// answered from the kernel's attribute cache; statfs reaches the
// connection.
//
// The mountpoint must not be the store, hold it or lie inside it: the
// daemon would answer its own reads of the store through its own mount
// and deadlock.
func checkMountpoint(mp, storeDir string) error {
	var st unix.Stat_t
	err := unix.Stat(mp, &st)
	if err == nil {
		var sf unix.Statfs_t
		if serr := unix.Statfs(mp, &sf); serr != nil {
			err = serr
		}
	}
	if errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.EIO) {
		abortFuse(mp)
		if uerr := unix.Unmount(mp, unix.MNT_DETACH); uerr != nil {
			return fmt.Errorf("clean up dead mount at %s: %w", mp, uerr)
		}
		err = unix.Stat(mp, &st)
	}
	if err != nil {
		return fmt.Errorf("%w: mountpoint %s: %w", workspace.ErrInvalidInput, mp, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%w: mountpoint %s is not a directory", workspace.ErrInvalidInput, mp)
	}
	if resolved, err := filepath.EvalSymlinks(mp); err == nil {
		if sd, err := filepath.EvalSymlinks(storeDir); err == nil {
			switch {
			case dirfd.Within(sd, resolved):
				return fmt.Errorf("%w: mountpoint %s holds the store %s; the mount would hide it from the daemon", workspace.ErrInvalidInput, mp, storeDir)
			case dirfd.Within(resolved, sd):
				return fmt.Errorf("%w: mountpoint %s is inside the store %s", workspace.ErrInvalidInput, mp, storeDir)
			}
		}
	}
	if isMounted(mp) {
		return fmt.Errorf("%w: %s is already a mountpoint", workspace.ErrBusy, mp)
	}
	return nil
}

// isMounted reports whether mp is a mountpoint.
func isMounted(mp string) bool {
	_, _, found := fusectl.Find(mp)
	return found
}

// RecoverMount finishes the work of a mount whose daemon died: detach its
// dead mountpoint, capture and publish whatever its overlay persisted, and
// resume or claim its window's reconciliation.
//
// On etcd it claims the workspace first: if another node holds it, the
// overlay becomes a fork (WS.fenced-NODE-N, fenced.go) and nothing of the
// workspace is touched; if nobody does, the claim is held for the
// recovery and released after it.
func (d *Daemon) RecoverMount(rec workspace.MountRecord) ([]string, error) {
	return d.recoverMount(rec, false)
}

// recoverMount is RecoverMount; keepClaim: the caller (MountWorkspace)
// claimed the workspace and keeps the claim.
func (d *Daemon) recoverMount(rec workspace.MountRecord, keepClaim bool) (_ []string, err error) {
	m := d.m
	var notes []string
	if rec.DaemonPID != os.Getpid() && rec.Mountpoint != "" && isMounted(rec.Mountpoint) {
		// The record's daemon is gone (one daemon serves a store, and it is
		// us): what is mounted there is its dead connection. Abort it first,
		// which also frees tools blocked on it.
		abortFuse(rec.Mountpoint)
		if err := unix.Unmount(rec.Mountpoint, unix.MNT_DETACH); err == nil {
			notes = append(notes, "detached dead mount at "+rec.Mountpoint)
		}
	}
	pinned, err := store.ParseID(rec.Pinned)
	if err != nil {
		return notes, fmt.Errorf("mount record of %s: %w", rec.Workspace, err)
	}
	pinnedRoot, err := m.RootOf(pinned)
	if err != nil {
		return notes, err
	}
	pinnedLinks, err := m.LinksOf(pinned)
	if err != nil {
		return notes, err
	}
	// On etcd: claim the workspace before anything publishes to it.
	other, claimLost, err := d.claimLost(rec.Workspace, rec.Mountpoint)
	if err != nil {
		return notes, err
	}
	if d.claims != nil && !claimLost && !keepClaim {
		defer func() {
			if rerr := d.claims.Release(context.Background(), rec.Workspace); rerr != nil {
				d.logger.Printf("%s: %v", rec.Workspace, rerr)
			}
		}()
	}
	if d.claims != nil && !claimLost {
		// The claim is this node's now; was it another node's since the
		// dead daemon's (made and released while this node was dead)?
		// Then the workspace moved on without the overlay: fork it.
		o, moved, err := d.claims.MovedSince(context.Background(), rec.Workspace, rec.ClaimRev)
		if err != nil {
			return notes, err
		}
		if moved {
			other, claimLost = o, true
		}
	}
	orphans := d.orphanLeases(rec.Workspace) // before the window is claimed
	var head store.ID
	if w, err := m.Get(rec.Workspace); err == nil {
		head = w.Head
	}
	newRoot, newLinks, changed, lost, attributed, err := fusefs.RecoverCaptureAttributed(rec.StateDir, storeObjects{m.Store()}, pinnedRoot, pinnedLinks)
	for _, l := range lost {
		d.logger.Printf("%s: recovery: %s", rec.Workspace, l)
		notes = append(notes, rec.Workspace+": "+l)
		d.mu.Lock()
		d.lost = append(d.lost, fmt.Sprintf("%s: recovery at %s %s", rec.Workspace, time.Now().UTC().Format(time.RFC3339), l))
		d.mu.Unlock()
	}
	if err != nil && isNoSpace(err) {
		// The dead mount's changes cannot be stored yet: say how much to
		// free and what to run then; the overlay is left as it is.
		return notes, fmt.Errorf("recover the mount of %s: %w", rec.Workspace, &noSpaceError{ws: rec.Workspace, store: d.dir,
			needed: fusefs.PendingBytesOf(rec.StateDir), free: max(freeBytes(d.dir), 0),
			then: fmt.Sprintf("run 'acyclicfs mount %s %s' (or 'acyclicfs unmount %s') again", rec.Workspace, rec.Mountpoint, rec.Mountpoint), err: err})
	}
	if err != nil {
		return notes, fmt.Errorf("replay overlay %s: %w", rec.StateDir, err)
	}
	if claimLost {
		n, err := d.recoverFenced(rec.Workspace, pinned, newRoot, newLinks, changed, other)
		notes = append(notes, n...)
		if err != nil {
			return notes, err
		}
		if err := fusefs.ResetState(rec.StateDir); err != nil {
			return notes, err
		}
		return notes, m.ClearMountRecord(rec.Workspace)
	}
	var recovered store.ID
	if changed {
		gen, conflicts, err := m.PublishCapture(rec.Workspace, pinned, newRoot, newLinks, nil)
		if err != nil {
			return notes, err
		}
		recovered = gen
		notes = append(notes, fmt.Sprintf("recovered unpublished changes of %s as %s", rec.Workspace, gen.Short()))
		for _, c := range conflicts {
			notes = append(notes, "kept the mount's version of "+c.Path)
		}
	}
	d.recordRecovered(rec.Workspace, head, recovered, attributed, orphans)
	if err := fusefs.ResetState(rec.StateDir); err != nil {
		return notes, err
	}
	// A window left active or reconciling by the dead daemon: claim it once
	// its leases expired, and finish the interrupted reconcile by its ticket.
	// Its leases cannot be stolen (fencing forbids it), but their holder is
	// dead, so wait for them to expire: at most their TTL.
	ctx := context.Background()
	d.waitOrphanLeases(rec.Workspace)
	if r, ok, err := m.Windows().ClaimReconcile(ctx, rec.Workspace); err == nil && ok {
		res, err := d.finishTicket(rec.Workspace, r)
		if err != nil {
			return notes, err
		}
		notes = append(notes, fmt.Sprintf("finished interrupted reconcile of %s: %s", rec.Workspace, res.Outcome))
	}
	// The mount record stays until here: while it exists, nothing but this
	// recovery writes the in-place directory the dead mount covered.
	if _, ok, err := m.InPlace(rec.Workspace); err == nil && ok {
		res, err := m.SyncInPlace(context.Background(), rec.Workspace)
		if err != nil {
			return notes, fmt.Errorf("materialize recovered %s: %w", rec.Workspace, err)
		}
		notes = append(notes, fmt.Sprintf("materialized %s into its directory: %s", rec.Workspace, res.Outcome))
	}
	if err := m.ClearMountRecord(rec.Workspace); err != nil {
		return notes, err
	}
	return notes, nil
}

// finishTicket runs the rebase of a claimed reconcile ticket (replayed by
// key if it already happened) and completes it, following any next ticket.
func (d *Daemon) finishTicket(ws string, r window.Reconcile) (workspace.Result, error) {
	m := d.m
	ctx := context.Background()
	var res workspace.Result
	for {
		var err error
		res, err = d.rebaseForTicket(ws, r)
		if err != nil {
			return res, err
		}
		failpoint.Hit("reconcile.before-complete")
		next, more, err := m.Windows().CompleteReconcile(ctx, ws, r.Ticket)
		if err != nil {
			return res, fmt.Errorf("complete reconcile of %s: %w", ws, err)
		}
		if !more {
			return res, nil
		}
		r = next
	}
}

func (d *Daemon) rebaseForTicket(ws string, r window.Reconcile) (workspace.Result, error) {
	w, err := d.m.Get(ws)
	if err != nil {
		return workspace.Result{}, err
	}
	if w.Parent == "" {
		return workspace.Result{Workspace: ws, Outcome: workspace.OutcomeCurrent, Head: w.Head, Base: w.Base}, nil
	}
	return d.m.Rebase(context.Background(), ws, workspace.RebaseOptions{Key: "reconcile " + r.Ticket.String()})
}

// Begin implements sessions.Handler: a new tool session opens a lease.
// It waits (bounded) while the mount reconciles.
func (s *Mount) Begin(owner sessions.Owner) error {
	if s.readOnly.Load() {
		return nil // no lease: answered read-only (context_mount.go)
	}
	_, err := s.BeginLease(owner, string(owner), false, s.ttl)
	return err
}

// End implements sessions.Handler: the session is gone.
func (s *Mount) End(owner sessions.Owner) {
	if _, err := s.EndLease(owner); err != nil {
		s.d.logger.Printf("%s: end lease of %s: %v", s.ws, owner, err)
	}
}

func (s *Mount) BeginLease(owner sessions.Owner, label string, explicit bool, ttl time.Duration) (window.Lease, error) {
	if !s.acquire(admitWait) {
		return window.Lease{}, fmt.Errorf("%w: %s is reconciling; gave up after %v", workspace.ErrBusy, s.ws, admitWait)
	}
	defer s.release()
	if s.closing {
		return window.Lease{}, fmt.Errorf("%w: %s is being unmounted", workspace.ErrBusy, s.ws)
	}
	if err := s.refuseReadOnly(); err != nil {
		return window.Lease{}, err
	}
	if hl := s.leases[owner]; hl != nil {
		return hl.holder.Lease(), nil
	}
	parent, err := s.d.m.PinnedParent(s.ws)
	if err != nil {
		return window.Lease{}, err
	}
	ctx := context.Background()
	lease, err := s.d.m.Windows().Begin(ctx, s.ws, parent, label, ttl)
	if errors.Is(err, window.ErrReconciling) {
		// A reconcile that failed or was interrupted still holds its ticket:
		// finish it (replayed by key) instead of failing every new session.
		if r, ok, cerr := s.d.m.Windows().ClaimReconcile(ctx, s.ws); cerr == nil && ok {
			if _, ferr := s.d.finishTicket(s.ws, r); ferr != nil {
				return window.Lease{}, fmt.Errorf("finish interrupted reconcile of %s: %w", s.ws, ferr)
			}
			if err := s.switchToHead(); err != nil {
				return window.Lease{}, err
			}
		}
		lease, err = s.d.m.Windows().Begin(ctx, s.ws, parent, label, ttl)
	}
	if err != nil {
		return window.Lease{}, fmt.Errorf("open lease on %s: %w", s.ws, err)
	}
	hl := &heldLease{owner: owner, holder: window.HoldLease(ctx, s.d.m.Windows(), lease, ttl), explicit: explicit, label: label, since: time.Now(), id: lease.ID}
	s.leases[owner] = hl
	s.noteLeaseBegun(hl)
	return lease, nil
}

// EndLease closes owner's lease; the last close reconciles the mount.
func (s *Mount) EndLease(owner sessions.Owner) (workspace.Result, error) {
	if !s.acquire(0) {
		return workspace.Result{}, errors.New("unreachable")
	}
	defer s.release()
	hl := s.leases[owner]
	if hl == nil {
		return s.Outcome(workspace.OutcomeCurrent), nil
	}
	delete(s.leases, owner)
	lease, _ := hl.holder.Stop()
	s.noteLeaseEnded(hl)
	ctx := context.Background()
	if s.fenced.Load() != nil {
		// The lease's gate went with the lost session and the window is
		// the claiming node's now: nothing to close or reconcile here.
		return s.Outcome(workspace.OutcomeCurrent), nil
	}
	if len(s.leases) > 0 {
		if _, err := s.d.m.Windows().Finish(ctx, lease); err != nil {
			return workspace.Result{}, err
		}
		return s.Outcome(workspace.OutcomeStillActive), nil
	}
	defer s.afterWindowClosed()
	res, err := s.reconcileLast(lease)
	if err == nil {
		s.recordWindow(res.Outcome)
	}
	return res, err
}

// outcomeOf completes r with the workspace's current head.
func (s *Mount) outcomeOf(r workspace.Result) workspace.Result {
	w, _ := s.d.m.Get(s.ws)
	r.Workspace, r.Head, r.Base, r.Parent = s.ws, w.Head, w.Base, w.Parent
	return r
}

func (s *Mount) Outcome(o workspace.Outcome) workspace.Result {
	w, _ := s.d.m.Get(s.ws)
	return workspace.Result{Workspace: s.ws, Outcome: o, Head: w.Head, Base: w.Base, Parent: w.Parent}
}

// reconcileLast is the final close: capture the mount, publish the capture
// with the last lease's permit, close the lease (claiming the reconcile
// ticket), rebase onto the pending parent, switch the view, complete.
// Called with s.lock held.
func (s *Mount) reconcileLast(lease window.Lease) (_ workspace.Result, err error) {
	defer s.holdBackground()() // the warm-up waits: it would compete for the CPU and the overlay
	defer s.doing("final close")()
	if s.failed == nil {
		s.captureState.Store(nil) // a retry's success was shown until now
	}
	start := time.Now()
	t := &ReconcileTiming{}
	defer func() {
		if err == nil {
			t.TotalMS = millis(time.Since(start))
			s.timing = t
		}
	}()
	m := s.d.m
	ctx := context.Background()
	permit := lease.Permit
	if err = s.captureAndPublish(&permit); errors.Is(err, errFencedOut) {
		return s.Outcome(workspace.OutcomeCurrent), nil // nothing of the workspace is ours to change
	} else if err != nil {
		if !workspace.IsFenced(err) {
			return s.closeAfterFailedCapture(lease, err)
		}
		// The lease expired under us (a stalled daemon). Claim the window's
		// reconciliation, then publish under that claim.
		s.d.logger.Printf("%s: lease %s fenced before publish; reclaiming", s.ws, lease.ID)
		if err := s.captureAndPublish(nil); errors.Is(err, errFencedOut) {
			return s.Outcome(workspace.OutcomeCurrent), nil
		} else if err != nil {
			return workspace.Result{}, err
		}
	}
	t.CaptureMS = millis(time.Since(start))
	failpoint.Hit("reconcile.after-publish")
	fin, err := m.Windows().Finish(ctx, lease)
	if err != nil {
		return workspace.Result{}, fmt.Errorf("close lease on %s: %w", s.ws, err)
	}
	r, ok := fin.Reconcile, fin.Outcome == window.FinishReconcile
	if !ok {
		if r, ok, err = m.Windows().ClaimReconcile(ctx, s.ws); err != nil {
			return workspace.Result{}, err
		}
	}
	if s.inPlace {
		res, err := s.syncInPlace()
		if err != nil {
			return res, err
		}
		if res.Sync != nil {
			t.DetectMS, t.MaterializeMS, t.Edits = millis(res.Sync.Detect), millis(res.Sync.Materialize), res.Sync.Edits
		}
		// Complete the window's ticket now: left for the next session's
		// Begin, the window showed reconciling while idle and that Begin
		// paid the completion and a second view switch.
		if ok {
			if _, err := s.d.finishTicket(s.ws, r); err != nil {
				return res, err
			}
		}
		return res, nil
	}
	if !ok {
		res := s.runQueuedPull(s.Outcome(workspace.OutcomeCurrent))
		s.last = res
		return res, nil
	}
	res, err := s.d.finishTicket(s.ws, r)
	if err != nil {
		return res, err
	}
	if err := s.switchToHead(); err != nil {
		return res, err
	}
	res = s.runQueuedPull(res)
	s.last = res
	return res, nil
}

// syncInPlace is an in-place mount's reconciliation: take in what other
// programs wrote to the directory, materialize the head into it, and show
// the result. Called with s.lock held, after the capture was published.
func (s *Mount) syncInPlace() (workspace.Result, error) {
	res, err := s.d.m.SyncInPlace(context.Background(), s.ws)
	if err != nil {
		return res, err
	}
	w, err := s.d.m.Get(s.ws)
	if err != nil {
		return res, err
	}
	if w.Head != s.pinned {
		if err := s.switchToHead(); err != nil {
			return res, err
		}
	}
	res = s.outcomeOf(res)
	s.last = res
	return res, nil
}

// closeBase detaches the fd to an in-place directory underneath the mount.
func (s *Mount) closeBase() {
	if s.detach != nil {
		s.detach()
		s.detach = nil
	}
	if s.baseDir != nil {
		_ = s.baseDir.Close()
		s.baseDir = nil
	}
}

// captureAndPublish publishes the overlay's changes, if any. A capture
// that fails (not fenced) is recorded and retried (capturefail.go); one
// that fails for space is first retried at once if retired upper files
// could be freed. Called with s.lock held.
func (s *Mount) captureAndPublish(permit *store.Permit) error {
	if s.fenced.Load() != nil {
		return errFencedOut // published nothing: the fork holds the changes
	}
	err := s.captureAndPublishOnce(permit)
	if err != nil && isNoSpace(err) {
		if freed, ferr := s.view.FreeScratch(); ferr == nil && freed > 0 {
			s.d.logger.Printf("%s: freed %d bytes of deleted files' scratch for the capture", s.ws, freed)
			err = s.captureAndPublishOnce(permit)
		}
	}
	switch {
	case err == nil:
		s.noteCaptureStored()
	case errors.Is(err, errFencedOut):
	case !workspace.IsFenced(err):
		err = s.noteCaptureFailure(err)
	}
	return err
}

func (s *Mount) captureAndPublishOnce(permit *store.Permit) error {
	release := s.d.m.HoldGC() // captured objects are unreferenced until published
	defer release()
	// The capture's trees are stored in the transaction that publishes
	// them (its blobs are durable already).
	s.takeWriters()
	root, links, changed, trees, done, err := s.view.CaptureDeferredLinks()
	if err != nil {
		return fmt.Errorf("capture %s: %w", s.ws, err)
	}
	if !changed {
		s.attr.pending = nil // changes undone before the capture: nothing to attribute
		done()
		s.view.WritersRecorded()
		return nil
	}
	failpoint.Hit("reconcile.after-capture")
	// On etcd: publish only while this node holds the claim (fenced.go).
	if other, lost, err := s.d.claimLost(s.ws, s.mp); err != nil {
		return err
	} else if lost {
		return s.fenceOutWith(other, root, links, changed, trees, done)
	}
	gen, _, err := s.d.m.PublishCapture(s.ws, s.pinned, root, links, permit, trees...)
	if err != nil {
		return err
	}
	s.recordCapture(gen)
	done()
	s.view.WritersRecorded()
	return nil
}

// switchToHead points the view at the workspace's current head and resets
// the overlay's base. Called with s.lock held.
func (s *Mount) switchToHead() error {
	if s.fenced.Load() != nil {
		return nil // the view stays what the fork holds
	}
	if s.failed != nil {
		// The overlay holds changes no capture stored: a switch would drop
		// them. The view stays; the capture retry switches it.
		return nil
	}
	w, err := s.d.m.Get(s.ws)
	if err != nil {
		return err
	}
	root, err := s.d.m.RootOf(w.Head)
	if err != nil {
		return err
	}
	links, err := s.d.m.LinksOf(w.Head)
	if err != nil {
		return err
	}
	// Not waiting for the kernel invalidations: we hold s.lock, which
	// requests waiting for admission need (see SwitchViewQueued).
	if _, err := s.view.SwitchViewQueuedLinks(root, links); err != nil {
		return fmt.Errorf("switch view of %s: %w", s.ws, err)
	}
	s.pinned = w.Head
	return s.d.m.PutMountRecord(workspace.MountRecord{Workspace: s.ws, Mountpoint: s.mp, StateDir: s.stateDir,
		Pinned: w.Head.String(), DaemonPID: os.Getpid(), Since: time.Now().UnixMilli(), ClaimRev: s.d.claimRev(s.ws)})
}

// parentAdvanced: idle → rebase now and refresh the view; active → the
// window coalesces the parent; reconciling → remembered for the next ticket.
func (s *Mount) parentAdvanced(parentHead store.ID) {
	// The hook and the watch both report a land here: one head once, and
	// a second report waits for the first one's rebase (follow.go).
	if s.fenced.Load() != nil {
		return // another node's mount follows the parent
	}
	done, first := s.takeParentHead(parentHead)
	if !first {
		return
	}
	defer close(done)
	ctx := context.Background()
	r, claimed, err := s.d.m.Windows().ParentAdvanced(ctx, s.ws, parentHead)
	if err != nil {
		s.forgetParentHead(parentHead) // not handled: the next report tries again
		s.d.logger.Printf("%s: parent advanced: %v", s.ws, err)
		return
	}
	if !claimed {
		return
	}
	// Synchronous, so that the command that moved the parent returns with
	// its idle children already following. Lock order is parent before
	// child (lineage is acyclic), so a parent's reconcile may call this.
	s.acquire(0)
	defer s.release()
	if s.closing {
		return
	}
	defer s.holdBackground()()
	defer s.doing("rebase onto its parent")()
	if err := s.captureAndPublish(nil); err != nil {
		s.d.logger.Printf("%s: capture before rebase: %v", s.ws, err)
	}
	res, err := s.d.finishTicket(s.ws, r)
	if err != nil {
		s.d.logger.Printf("%s: rebase onto advanced parent: %v", s.ws, err)
		return
	}
	if err := s.switchToHead(); err != nil {
		s.d.logger.Printf("%s: %v", s.ws, err)
	}
	s.last = res
}

// refresh re-pins an idle mount at its workspace's head after a command
// moved it (land into a mounted parent, an explicit rebase).
func (s *Mount) refresh() {
	if !s.acquire(admitWait) {
		return
	}
	defer s.release()
	if len(s.leases) > 0 || s.closing {
		return // the final close merges with the moved head
	}
	w, err := s.d.m.Get(s.ws)
	if err != nil || w.Head == s.pinned {
		return
	}
	defer s.holdBackground()()
	defer s.doing("refresh onto the moved head")()
	if err := s.captureAndPublish(nil); err != nil {
		s.d.logger.Printf("%s: capture before refresh: %v", s.ws, err)
		return
	}
	if s.inPlace {
		if _, err := s.syncInPlace(); err != nil {
			s.d.logger.Printf("%s: refresh: %v", s.ws, err)
		}
		return
	}
	if err := s.switchToHead(); err != nil {
		s.d.logger.Printf("%s: refresh: %v", s.ws, err)
	}
}

// Unmount ends every lease (the last close reconciles), publishes anything
// left, unmounts and forgets the mount. While another process still uses
// the mount (its working directory, an open file) nothing is done and the
// error wraps workspace.ErrBusy, unless lazy: then its lease is ended too
// and the mount detached, and that process goes on with a view nothing
// captures. (A process that comes in after the check makes the unmount
// itself fail: reconciled, still mounted, the same error.)
func (s *Mount) Unmount(lazy bool) (res workspace.Result, err error) {
	if !lazy {
		// Before anything: ending the leases of processes still at work
		// in the mount would capture and switch the view under them (a
		// git gc running there then read corrupt objects and EIO).
		if users, uerr := s.mnt.Users(); uerr == nil && len(users) > 0 {
			return workspace.Result{}, fmt.Errorf("%w: %w (nothing was done)", workspace.ErrBusy, &fusefs.BusyError{Mountpoint: s.mp, Users: users})
		}
	}
	defer s.doing("unmount")()
	defer s.holdBackground()()
	s.acquire(0)
	s.last = workspace.Result{}
	s.closing = true // new sessions are refused from here on
	s.release()
	unmounted := false
	defer func() {
		if !unmounted {
			s.acquire(0)
			s.closing = false // the mount still serves: let sessions in again
			s.release()
		}
	}()
	s.tracker.EndAll()
	s.acquire(0)
	owners := make([]sessions.Owner, 0, len(s.leases))
	for o := range s.leases {
		owners = append(owners, o)
	}
	s.release()
	sort.Slice(owners, func(i, j int) bool { return owners[i] < owners[j] })
	res = s.Outcome(workspace.OutcomeCurrent)
	for _, o := range owners {
		s.tracker.Unbind(o)
		r, err := s.EndLease(o)
		if err != nil {
			return r, err
		}
		res = r
	}
	s.acquire(0)
	defer s.release()
	if len(owners) == 0 && s.last.Outcome != "" {
		res = s.last // the outcome of the final close EndAll triggered
	}
	if err := s.captureAndPublish(nil); err != nil && !errors.Is(err, errFencedOut) {
		return res, err
	}
	// The final close EndAll triggered already synced an in-place directory;
	// sync again only if nothing did, or the capture above moved the head.
	if s.inPlace && s.fenced.Load() == nil {
		info, _, err := s.d.m.InPlace(s.ws)
		if err != nil {
			return res, err
		}
		if w, err := s.d.m.Get(s.ws); err != nil || s.last.Outcome == "" || w.Head != info.Materialized {
			r, err := s.syncInPlace()
			if err != nil {
				return res, err
			}
			if res.Outcome == workspace.OutcomeCurrent {
				res = r
			}
		}
	}
	// Everything is captured and published: the unmount writes no
	// snapshot (the state directory is reset below), so a full disk does
	// not keep the mount.
	if err := s.mnt.UnmountCaptured(lazy); err != nil {
		if errors.Is(err, fusefs.ErrInUse) {
			// Reconciled, still mounted and serving: what they write next
			// is captured at their final close.
			return res, fmt.Errorf("%w: %w (the workspace was reconciled: %s)", workspace.ErrBusy, err, res.Outcome)
		}
		return res, err // fusefs names the mountpoint
	}
	unmounted = true
	s.stopGitResolve() // what it recorded stays resolved; the next mount goes on
	s.closeBase()
	s.tracker.Close()
	s.goneOnce.Do(func() { close(s.gone) })
	// The kernel mount is gone: whatever fails below, the daemon forgets
	// it (a record left behind is recovered by the next mount or unmount
	// of the workspace, as a dead daemon's).
	s.d.setConn(s.ws, nil)
	defer func() {
		s.d.mu.Lock()
		delete(s.d.mounts, s.ws)
		s.d.mu.Unlock()
	}()
	if err := fusefs.ResetState(s.stateDir); err != nil {
		return res, fmt.Errorf("%w (unmounted; the mount record stays for recovery)", err)
	}
	_ = os.Remove(s.stateDir)
	if err := s.d.m.ClearMountRecord(s.ws); err != nil {
		return res, fmt.Errorf("%w (unmounted; the mount record stays for recovery)", err)
	}
	// Nothing of the mount is left on this node: another may mount it.
	// (A mount record kept for recovery above keeps the claim until the
	// daemon exits.)
	if s.d.claims != nil {
		if err := s.d.claims.Release(context.Background(), s.ws); err != nil {
			s.d.logger.Printf("%s: %v", s.ws, err)
		}
	}
	s.d.logger.Printf("unmounted %s from %s: %s", s.ws, s.mp, res.Outcome)
	return res, nil
}

// maxOrphanWait bounds how long recovery waits for a dead daemon's leases.
const maxOrphanWait = 2 * time.Minute

// waitOrphanLeases sleeps until every lease of ws's window has expired
// (bounded). Only called for a window whose daemon is known dead (we hold
// the store's daemon lock), so no live holder is renewing them; there is no
// event for a deadline passing.
func (d *Daemon) waitOrphanLeases(ws string) {
	snap, err := d.m.Windows().Inspect(context.Background(), ws)
	if err != nil || snap.Phase.Kind != window.PhaseActive {
		return
	}
	var latest int64
	for _, l := range snap.Phase.Leases {
		latest = max(latest, l.ExpiresAtMillis)
	}
	wait := time.Until(time.UnixMilli(latest)) + 10*time.Millisecond
	if wait <= 0 {
		return
	}
	if wait > maxOrphanWait {
		d.logger.Printf("%s: leases of the dead daemon expire in %v; not waiting longer than %v", ws, wait, maxOrphanWait)
		wait = maxOrphanWait
	}
	d.logger.Printf("%s: waiting %v for the dead daemon's leases to expire", ws, wait.Round(time.Millisecond))
	time.Sleep(wait)
}

// abortFuse aborts the FUSE connection mounted at mp, if any, through
// /sys/fs/fuse/connections/N/abort (N is the device minor of the mount).
// Requests blocked on a dead or wedged server fail instead of hanging, and
// a server thread stuck in the kernel is released.
func abortFuse(mp string) {
	_ = fusectl.AbortAt(mp)
}

// storeObjects is what a mount reads and writes: the store, with batched
// captures (one sync for all of a capture's blobs, one transaction for its
// trees) and blobs verified before they are served.
type storeObjects struct{ *store.Store }

// NewBatch implements fusefs.Batcher.
func (s storeObjects) NewBatch() fusefs.Batch { return s.NewBlobBatch() }

// BaseIno is the real inode number and ctime behind a base reference.
func (s storeObjects) BaseIno(id store.ID) (uint64, int64, bool) {
	r, ok, err := s.BaseRefOf(id)
	if err != nil || !ok || r.Git != "" { // a git object reference has no file behind it
		return 0, 0, false
	}
	return r.Ino, r.Ctime, true
}

var (
	_ fusefs.Batcher        = storeObjects{}
	_ fusefs.BlobFileOpener = storeObjects{}
	_ fusefs.BaseInoer      = storeObjects{}
)
