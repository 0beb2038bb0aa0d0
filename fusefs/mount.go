package fusefs

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/fusefs/uring"
	"github.com/acyclicfs/acyclicfs/internal/fusectl"
	"github.com/acyclicfs/acyclicfs/store"
)

// Objects is what the mount needs from the object store. *store.Store
// implements it.
type Objects interface {
	GetTree(id store.ID) (*store.Tree, error)
	// ReadBlob returns a whole blob; used for symlink targets.
	ReadBlob(id store.ID) ([]byte, error)
	// BlobPath names the immutable file holding a blob; clean reads open it O_RDONLY.
	BlobPath(id store.ID) string
	// WriteBlobFile stores the content of the file at path (capture of dirty files).
	WriteBlobFile(path string) (store.ID, int64, error)
	WriteBlobBytes(b []byte) (store.ID, error)
	PutTree(t *store.Tree) (store.ID, error)
}

// nowAdmitter is an Admitter that can tell without blocking whether
// Admit(pid) would return at once. The io_uring transport answers such
// requests on its queue's thread and the others on goroutines of their
// own, so that a session's first request, which may wait for a lease,
// holds up no other request from its CPU.
type nowAdmitter interface {
	AdmitsNow(pid uint32) bool
}

// Admitter is consulted at the start of every request with the caller's
// pid (0 = kernel-internal; always admitted without asking). Admit is on
// the hot path; it may block for a new owner and fails the request with
// its error (ErrNotAdmitted → EAGAIN, anything else → EIO unless it wraps
// a syscall.Errno). A nil Admitter admits everything.
type Admitter interface {
	Admit(pid uint32) error
}

// Config describes one mount.
type Config struct {
	Objects Objects
	// Root is the root tree of the pinned generation; zero = empty tree.
	Root store.ID
	// Links are the pinned generation's hard-link groups
	// (store.Generation.Links): each group shows as one inode.
	Links [][]string
	// StateDir is private and persistent: upper files and the overlay
	// snapshot. If it holds a snapshot (a crashed or cleanly unmounted
	// mount), Mount replays it.
	StateDir string
	Admitter Admitter
	// DescribeWriter describes a writer for the overlay log, once per
	// writer per log (wal_attribution.go), so that a recovery after a
	// crash can attribute its changes; nil: writers are logged by pid.
	DescribeWriter func(WriterRef) WriterInfo
	// NoAttribution turns write attribution off (mount --no-attribution):
	// the mount records no writers (no exec check, no writer in the
	// overlay log) and TakeWriters reports nothing.
	NoAttribution bool
	AllowOther    bool
	Debug         bool
	FsName        string
	// AttrTimeout and EntryTimeout apply to clean entries (the view is
	// pinned, so they can be long; default 1h). Dirty entries use
	// DirtyTimeout (default: AttrTimeout). Every change of a dirty entry
	// goes through the kernel, which updates or invalidates what it
	// cached (a passthrough write invalidates size and times), and the
	// view switch invalidates what it changes; a short timeout only made
	// the kernel ask again (a LOOKUP per file for rm after touch).
	AttrTimeout, EntryTimeout time.Duration
	DirtyTimeout              time.Duration
	// Passthrough lets the kernel do reads and writes of open files
	// directly on the backing file when it allows (root, Linux ≥ 6.9);
	// without it, or when the kernel refuses, I/O goes through the daemon.
	Passthrough bool
	// PassthroughClean also serves read-only opens of clean files by
	// passthrough on the blob file (first reads at native speed instead of
	// through the daemon; later reads hit the page cache either way). The
	// kernel then refuses any other backing file for that inode while
	// those readers are open, so a writer opening it meanwhile gets
	// ETXTBSY. Off by default.
	PassthroughClean bool
	// EnableXattrs serves user.* extended attributes from the overlay. Off
	// by default: with xattrs on, the kernel sends GETXATTR
	// security.capability before every write, passthrough writes included
	// (4 KiB passthrough writes measured 26 µs instead of 4.1 µs); off, it
	// gets ENOSYS once and never asks again (see doc.go).
	EnableXattrs bool
	// BaseInodes reports the real inode numbers of an in-place
	// directory's files that the view still names by base reference
	// (Objects must implement BaseInoer), and the overlay's own numbers
	// with bit 62 set. Off: every inode number is the overlay's own.
	BaseInodes bool
	// RetainUpperBytes bounds the upper files kept after a capture whose
	// view switch found them unchanged (default 4 GiB; negative: none).
	// A kept file stays its clean inode's backing file, so reading what a
	// tool wrote stays passthrough (native speed) after the lease ends,
	// and the next write needs no copy-up; the price is the disk space of
	// a second copy (the store holds the blob) until the file changes or
	// the mount's state is reset.
	RetainUpperBytes int64
	// ReadOnly mounts the view read-only from the start (see
	// Mount.SetReadOnly): every change fails with EROFS.
	ReadOnly bool
	// Uring serves the mount's requests over io_uring (fusefs/uring) instead
	// of read(2) and write(2) on /dev/fuse. Mount fails with
	// ErrUringUnavailable where the kernel does not offer it.
	Uring bool
	// PreferUring serves the mount over io_uring where the kernel offers
	// it and through /dev/fuse otherwise: a mount whose rings cannot be
	// set up is taken down and mounted again without them. Uring wins.
	PreferUring bool
	// WarmEntries, when positive, lists up to that many names of the view
	// through the mount right after mounting, so that the kernel caches
	// their entries and attributes before tools ask (warm.go).
	WarmEntries int
	// WarmWalkers is how many threads list at once during the warm-up
	// (0: warmWalkers). A mount whose git work tree answers git status
	// through the fsmonitor hook uses few: git then looks up nothing, and
	// the warm-up would only compete with it for the CPUs.
	WarmWalkers int
}

// maxWrite is the largest WRITE the kernel sends (and so the size of
// each request buffer); idleReaders bounds the buffers a /dev/fuse mount
// keeps checked out (MaxInflightRequestBytes above): 4 MiB per mount
// instead of 9.
const (
	maxWrite    = 1 << 20
	idleReaders = 4
)

// Mount is a live FUSE mount of an overlay view.
type Mount struct {
	cfg        Config
	ov         *overlay
	mountpoint string
	server     *fuse.Server
	rootNode   *node
	dirs       *dirsFS  // the raw layer that serves listings without OPENDIR
	baseInos   baseInos // Config.BaseInodes: lower ID → real inode number

	clean, dirty time.Duration // kernel cache timeouts

	snapMu sync.Mutex // serialises snapshot writes so a newer one is never overwritten by an older

	notifyMu sync.Mutex    // protects notifyQ
	notifyQ  []func()      // kernel notifications queued by SwitchView
	notifyC  chan struct{} // wakes the notifier goroutine
	doneC    chan struct{} // closed when the server has stopped

	// Reads and writes served by the daemon (not by kernel passthrough);
	// tests use them to check passthrough engages.
	daemonReads, daemonWrites, daemonGetxattrs atomic.Int64
	daemonLookups, daemonGetattrs              atomic.Int64
	storedPages                                atomic.Int64 // contents pushed by storePages

	readOnly atomic.Bool // changes fail with EROFS (readonly.go)

	uring *uring.Transport // Config.Uring: the rings serving requests

	lockWaits atomic.Int64 // lock requests (SETLKW) being waited on

	warm warmer // the metadata warm-up (warm.go)
	// switchStarted counts view switches begun; switchNotified is the
	// count whose kernel invalidations have all been sent (warm.go).
	switchStarted, switchNotified atomic.Uint64

	unmountMu  sync.Mutex
	unmounted  bool // Unmount or UnmountUnused succeeded (or gave up lazily)
	unmountErr error

	// mntID and dev identify the kernel mount this Mount serves (statx of
	// the mountpoint once mounted): the mountpoint's path may come to name
	// another file system (a lazy detach, an umount -l from outside).
	mntID, dev uint64
}

// MountAt mounts the view described by cfg at mountpoint (a function
// named Mount cannot coexist with the Mount type) and returns once
// the kernel serves it.
func MountAt(mountpoint string, cfg Config) (*Mount, error) {
	if cfg.PreferUring && !cfg.Uring && UringAvailable() == nil {
		c := cfg
		c.Uring = true
		m, err := mountAt(mountpoint, c)
		if !errors.Is(err, ErrUringUnavailable) {
			return m, err
		}
		// The rings could not be set up (io_uring turned off by sysctl,
		// say): the aborted mount is gone; serve /dev/fuse instead.
	}
	return mountAt(mountpoint, cfg)
}

func mountAt(mountpoint string, cfg Config) (*Mount, error) {
	if cfg.Objects == nil {
		return nil, ErrNoObjects
	}
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("mount %s: empty StateDir", mountpoint)
	}
	if cfg.AttrTimeout == 0 {
		cfg.AttrTimeout = time.Hour
	}
	if cfg.EntryTimeout == 0 {
		cfg.EntryTimeout = time.Hour
	}
	if cfg.DirtyTimeout == 0 {
		cfg.DirtyTimeout = cfg.AttrTimeout
	}
	if cfg.FsName == "" {
		cfg.FsName = "acyclicfs"
	}
	if cfg.RetainUpperBytes == 0 {
		cfg.RetainUpperBytes = 4 << 30
	}
	ov, err := openOverlay(cfg.StateDir, cfg.Objects, cfg.Root, cfg.Links)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	if ov.fresh && !cfg.ReadOnly {
		// Without it the first change writes a snapshot instead.
		_ = ov.walBegin()
	}
	m := &Mount{cfg: cfg, ov: ov, mountpoint: mountpoint,
		clean: cfg.AttrTimeout, dirty: cfg.DirtyTimeout,
		notifyC: make(chan struct{}, 1), doneC: make(chan struct{})}
	m.readOnly.Store(cfg.ReadOnly)
	ov.retainLimit = max(cfg.RetainUpperBytes, 0)
	ov.noAttr = cfg.NoAttribution
	if ew, ok := cfg.Admitter.(ExecWatcher); ok && !cfg.NoAttribution {
		ov.execs = ew
	}
	ov.describe = cfg.DescribeWriter
	ov.pool = newUpperPool(ov.upperDir(), ov.reserveIno)
	ov.pool.start()
	m.rootNode = &node{m: m, in: ov.root}
	entryT := cfg.EntryTimeout
	attrT := cfg.AttrTimeout
	opts := &fs.Options{
		EntryTimeout: &entryT,
		AttrTimeout:  &attrT,
		// A name missing from the pinned view can only appear through this
		// mount (the kernel sees it) or a view switch (which invalidates
		// every added name), so negative entries are cached as long.
		NegativeTimeout: &entryT,
		RootStableAttr:  &fs.StableAttr{Ino: 1},
		// Mode 000 is a mode: without this go-fuse shows a file without
		// permission bits as 0644 (a directory as 0755), and with
		// allow_other the kernel would let every user read it.
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			AllowOther:   cfg.AllowOther,
			Debug:        cfg.Debug,
			FsName:       cfg.FsName,
			Name:         "acyclicfs",
			DirectMount:  true,
			MaxWrite:     maxWrite,
			MaxReadAhead: 1 << 20,
			// Every reader blocked in read(2) on /dev/fuse holds a
			// request buffer of MaxWrite; go-fuse keeps up to
			// GOMAXPROCS+1 of them per mount (9 MiB at the daemon's 8
			// Ps), live heap that the daemon's GC percent multiplies.
			// The budget bounds the buffers checked out (blocked
			// readers and WRITEs being served) to idleReaders: other
			// requests give theirs back as soon as they are read, so
			// how many are served at once is not bounded by it.
			MaxInflightRequestBytes: idleReaders * (maxWrite + 64<<10),
			DisableXAttrs:           !cfg.EnableXattrs,
			// Symlink targets are cached in the page cache; a view switch
			// invalidates changed ones with the inode's content.
			EnableSymlinkCaching: true,
			// Locks are served from lock files (locks.go).
			EnableLocks:       true,
			Options:           mountOptions(cfg.AllowOther, os.Geteuid()),
			ExtraCapabilities: killprivCaps(cfg.AllowOther, os.Geteuid()),
		},
	}
	if cfg.Uring {
		if err := UringAvailable(); err != nil {
			ov.pool.close()
			return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
		}
		opts.MountOptions.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	}
	m.dirs = newDirsFS(fs.NewNodeFS(m.rootNode, opts))
	m.dirs.flush = func(before uint64) { _ = m.ov.walFlush(&m.snapMu, before) }
	m.dirs.marked = m.ov.walMarks.Load
	server, fuseFD, err := uring.NewServer(m.dirs, mountpoint, &opts.MountOptions, cfg.Uring)
	if err != nil {
		ov.pool.close()
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	go server.Serve()
	if cfg.Uring {
		// Until every queue has a ring the kernel holds all requests back,
		// WaitMount's included.
		if err := m.startUring(server, fuseFD, &opts.MountOptions); err != nil {
			_ = fusectl.AbortAt(mountpoint)
			_ = server.Unmount()
			server.Wait()
			ov.pool.close()
			if !errors.Is(err, ErrUringUnavailable) {
				err = fmt.Errorf("%w: %w", ErrUringUnavailable, err)
			}
			return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
		}
	}
	if err := server.WaitMount(); err != nil {
		// As fs.Mount: the serve loop ends by itself when the mount failed.
		ov.pool.close()
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	m.server = server
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, mountpoint, unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &st); err == nil && st.Mask&unix.STATX_MNT_ID != 0 {
		m.mntID, m.dev = st.Mnt_id, unix.Mkdev(st.Dev_major, st.Dev_minor)
	}
	go func() {
		server.Wait()
		if m.uring != nil {
			m.uring.Stop()
		}
		ov.pool.close()
		close(m.doneC)
	}()
	go m.notifier()
	if cfg.WarmEntries > 0 {
		m.startWarm(cfg.WarmEntries, cfg.WarmWalkers)
	}
	return m, nil
}

// Transport names how the mount's requests reach the daemon: "io_uring"
// or "dev-fuse" (read and write on /dev/fuse).
func (m *Mount) Transport() string {
	if m.uring != nil {
		return "io_uring"
	}
	return "dev-fuse"
}

// UringRequests is the number of requests answered over io_uring (0 for
// a mount served through read and write on /dev/fuse).
func (m *Mount) UringRequests() int64 {
	if m.uring == nil {
		return 0
	}
	return m.uring.Answered()
}

// uringOffThread is the number of io_uring requests answered off their
// queue's thread (tests).
func (m *Mount) uringOffThread() int64 {
	if m.uring == nil {
		return 0
	}
	return m.uring.OffThread()
}

// uringSetupFault, set by tests, fails the rings' setup after INIT as a
// kernel that refuses io_uring would (sysctl kernel.io_uring_disabled).
var uringSetupFault func() error

// startUring serves the mount over io_uring, when the kernel took it up.
func (m *Mount) startUring(server *fuse.Server, fuseFD int, opts *fuse.MountOptions) error {
	var admitsNow func(uint32) bool
	if na, ok := m.cfg.Admitter.(nowAdmitter); ok {
		// The warm-up's walkers are admitted without a lease (admit): their
		// requests never wait, so they are answered on the queue's thread
		// like any admitted tool's, not handed to a goroutine each.
		admitsNow = func(pid uint32) bool { return m.isWarmer(pid) || na.AdmitsNow(pid) }
	}
	if uringSetupFault != nil {
		if err := uringSetupFault(); err != nil {
			return err
		}
	}
	t, err := uring.Start(server, m.dirs, opts, fuseFD, admitsNow)
	if err != nil {
		return err
	}
	m.uring = t
	return nil
}

// mountOptions is the kernel's permission model for a mount. A mount only
// its owner can reach (no allow_other) by root is served without
// default_permissions: the kernel's check would ask for the attributes of
// every directory on a path before each create, unlink or rename (a
// GETATTR round trip once the cached attributes of a changed directory
// expire: a fifth of all requests under git add and commit), and it would
// only confirm what root may do anyway. The kernel still refuses to exec a
// file without an exec bit; the ACCESS requests it sends instead are
// answered by node.Access with the kernel's rule for root. Every other
// mount keeps the kernel's check: another user must not reach files their
// mode forbids.
//
// Device nodes open only on a root-only mount ("dev": go-fuse, like
// fusermount, mounts nodev otherwise). There only root can reach them,
// and only a caller with CAP_MKNOD can make them; a mount other users can
// enter shows device nodes but opens none (EACCES), so a device captured
// from one context never becomes another user's way to a disk.
func mountOptions(allowOther bool, euid int) []string {
	if rootOnly(allowOther, euid) {
		return []string{"dev"}
	}
	return []string{"default_permissions"}
}

// rootOnly reports whether only root can reach the mount.
func rootOnly(allowOther bool, euid int) bool { return !allowOther && euid == 0 }

// killprivCaps is the INIT capability that makes the daemon, not the
// kernel, clear set-uid and set-gid bits, for root-only mounts. Without
// it the kernel fetches the attributes before every chown of a file
// (GETATTR, to recompute the mode from fresh bits): under tar -x as root,
// which chowns every file it writes, that was one request in eight. With
// it a chown carries FATTR_KILL_SUIDGID and Setattr clears the bits.
// Writes and truncations by root (CAP_FSETID) keep the bits natively, so
// the kernel's per-write kill flags, which go-fuse's node API does not
// pass on, never apply to a root-only mount's callers; other mounts keep
// the kernel's handling (a passthrough write never reaches the daemon).
func killprivCaps(allowOther bool, euid int) uint64 {
	if rootOnly(allowOther, euid) {
		return fuse.CAP_HANDLE_KILLPRIV_V2
	}
	return 0
}

// openOverlay prepares stateDir and replays its snapshot if there is one.
func openOverlay(stateDir string, objects Objects, root store.ID, links [][]string) (*overlay, error) {
	for _, d := range []string{"/upper", "/upper-trash"} {
		if err := os.MkdirAll(stateDir+d, 0o700); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
	}
	// Lock files of a previous daemon hold no locks any more.
	if err := os.RemoveAll(stateDir + "/locks"); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := os.MkdirAll(stateDir+"/locks", 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	ov, found, err := loadSnapshot(stateDir, objects)
	if err != nil {
		return nil, err
	}
	if !found {
		ov = newOverlay(objects, stateDir, root)
		ov.named = map[uint64]bool{} // no snapshot on disk names anything
		ov.fresh = true
	}
	if err := ov.removeStrayUppers(); err != nil {
		return nil, err
	}
	if found && ov.rootID != root {
		// The caller pinned a different generation than the one the
		// overlay was made on. Whether it contains the last capture is
		// unknown here, so every overlay change is kept on top of it:
		// nothing recorded can be lost.
		ov.capSeq = 0
		if _, err := ov.switchView(root, links, nil); err != nil {
			return nil, err
		}
		return ov, nil
	}
	ov.mu.Lock()
	err = ov.applyLinks(links, nil)
	ov.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("link groups: %w", err)
	}
	return ov, nil
}

// Root returns the root tree of the currently pinned generation.
func (m *Mount) Root() store.ID {
	m.ov.mu.Lock()
	defer m.ov.mu.Unlock()
	return m.ov.rootID
}

// Dirty reports whether the view differs from the pinned generation.
func (m *Mount) Dirty() bool {
	m.ov.mu.Lock()
	defer m.ov.mu.Unlock()
	return m.ov.root.subSeq != 0
}

// Unmount writes the overlay snapshot and unmounts. If the mount is busy
// it falls back to a lazy unmount (MNT_DETACH): the mountpoint disappears
// at once and the daemon serves open files until they close; Wait returns
// after that.
func (m *Mount) Unmount() error { return m.unmount(true, true) }

// UnmountUnused is Unmount for a mount no other process uses: when the
// kernel refuses the unmount because a process still has its working
// directory, an open file, a mapping or its root inside, the mount stays
// and keeps serving, and the error is a *BusyError naming those processes
// (errors.Is ErrInUse). Detaching it lazily instead would let them go on
// writing into a view nobody captures any more. Only this process's own
// descriptors (a warm-up listing in flight) are detached lazily. It may be
// called again after a BusyError.
func (m *Mount) UnmountUnused() error { return m.unmount(false, true) }

// UnmountCaptured is Unmount (lazy) or UnmountUnused (!lazy) for a caller
// that has just captured and published the view and discards the state
// directory once unmounted: no overlay snapshot is written, so it needs
// no space on the store's disk (a full disk does not keep the mount).
func (m *Mount) UnmountCaptured(lazy bool) error { return m.unmount(lazy, false) }

func (m *Mount) unmount(lazy, snapshot bool) error {
	m.unmountMu.Lock()
	defer m.unmountMu.Unlock()
	if m.unmounted {
		return m.unmountErr
	}
	m.stopWarm()
	// No pool file may appear in the state directory after Unmount
	// returns (the daemon may reset it); late creates make their own.
	m.ov.pool.close()
	var serr error
	if snapshot {
		serr = m.writeSnapshot()
	}
	if !m.ours() {
		// Detached already (umount -l from outside): the kernel mount
		// goes away with its last user, and what the path names now is
		// not ours to unmount.
	} else if err := m.server.Unmount(); err != nil {
		// go-fuse falls back to fusermount, whose refusal is text, not
		// EBUSY: look for users whatever the error.
		if !lazy {
			if users, uerr := m.Users(); uerr == nil && len(users) > 0 {
				return &BusyError{Mountpoint: m.mountpoint, Users: users}
			}
		}
		if derr := syscall.Unmount(m.mountpoint, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("unmount %s: %w (lazy: %v)", m.mountpoint, err, derr)
		}
	}
	m.unmounted = true
	if serr != nil {
		m.unmountErr = fmt.Errorf("unmount %s: %w", m.mountpoint, serr)
	}
	return m.unmountErr
}

// ours reports whether the mountpoint's path still names this mount (a
// detach from outside leaves it naming the directory underneath). Without
// a recorded identity it assumes so.
func (m *Mount) ours() bool {
	if m.mntID == 0 {
		return true
	}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, m.mountpoint, unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &st); err != nil {
		// ENOTCONN, EIO: a connection in trouble is still ours to unmount.
		return !errors.Is(err, unix.ENOENT)
	}
	return st.Mnt_id == m.mntID
}

// Dev is the device number of the mount's file system (st_dev of every
// file in it; 0 if unknown).
func (m *Mount) Dev() uint64 { return m.dev }

// Wait blocks until the FUSE server has stopped.
func (m *Mount) Wait() { <-m.doneC }

// notifier sends queued kernel cache invalidations. It runs on its own
// goroutine so no notification is ever sent from inside a request handler
// or with a lock a handler needs (go-fuse deadlocks otherwise).
func (m *Mount) notifier() {
	for {
		select {
		case <-m.doneC:
			return
		case <-m.notifyC:
		}
		m.notifyMu.Lock()
		q := m.notifyQ
		m.notifyQ = nil
		m.notifyMu.Unlock()
		for _, f := range q {
			f()
		}
	}
}

// queueNotify hands fns to the notifier; the returned channel closes once
// they have been sent (or the server stopped).
func (m *Mount) queueNotify(fns []func()) <-chan struct{} {
	done := make(chan struct{})
	fns = append(fns, func() { close(done) })
	m.notifyMu.Lock()
	m.notifyQ = append(m.notifyQ, fns...)
	m.notifyMu.Unlock()
	select {
	case m.notifyC <- struct{}{}:
	default:
	}
	return done
}
