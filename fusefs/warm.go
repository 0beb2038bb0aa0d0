package fusefs

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Metadata warm-up.
//
// A freshly mounted view is cold in the kernel: the first stat of every
// path is a LOOKUP round trip to the daemon (30–40 µs on the reference
// machine, against about 1 µs for a cached native stat), so the first
// `git status` of an 11,000-file tree paid some 13,000 of them, one at a
// time, in the tool's own critical path. The warm-up lists the view's
// directories through the mount itself, right after the mount, from
// warmWalkers daemon threads: the kernel asks READDIRPLUS for the first
// chunk of each listing, and one such request returns hundreds of names
// with their attributes, which the kernel caches as dentries and inodes
// for the entry timeout (an hour; the view is pinned). A tool arriving
// later finds the names cached and sends no request for them.
//
// The warm-up is admitted without a lease (the Mount recognises its
// threads), so it never pins the view or waits for a reconcile, and it
// reads no file contents. It runs breadth first (skipping a git
// repository's loose-object directories: looseObjectDir) and stops after
// about Config.WarmEntries names, at Unmount, or on an error that is not
// about one directory (warmSkippable); it pauses while the daemon holds it
// (HoldWarm, during reconciles) and never crosses into another filesystem
// mounted below the mountpoint.
//
// Listings cache names that exist; a tool also asks for names that do not.
// git status opens .gitignore in every directory it scans, and each miss
// is a LOOKUP round trip unless the kernel holds a negative entry (cached
// for the entry timeout, like a positive one). When the root holds .git,
// the walker looks up each of gitProbes that a directory's listing lacks
// (outside .git, which git does not scan), so the kernel caches the miss:
// one request per directory in the background instead of one in git's
// path. A view switch that adds such a name invalidates it as any other
// new name (reconcileDir).
//
// A view switch can overlap a listing: the reply was computed on the old
// view and the kernel may apply it after the switch's invalidations. The
// walker brackets each listing with the switch counters (started before
// the overlay changes, notified after the invalidations were sent) and,
// if a switch was in progress or began meanwhile, invalidates every name
// it just listed and the listing itself, after the switch's own notes.

// warmer is the state of a Mount's warm-up.
type warmer struct {
	active  atomic.Bool                // walkers may be running (admit's fast check)
	tids    [warmWalkers]atomic.Uint32 // the walking threads (admit skips them)
	entries atomic.Int64               // names listed so far
	stop    chan struct{}              // closed by Unmount
	done    chan struct{}              // closed when the walk has ended

	mu     sync.Mutex
	cond   *sync.Cond // signalled when the queue grows or a walker goes idle
	queue  [][]string // directories still to list, as paths of names
	busy   int        // walkers listing a directory now
	limit  int64
	dev    uint64   // the mount's device, from the root's listing
	probes []string // names looked up where a listing lacks them (set after the root's listing)
	held   int      // HoldWarm calls not yet released: no new listings
	parked int      // walkers waiting for work now (tests)

	reinvalidated atomic.Int64       // listings invalidated after an overlapping switch
	afterList     func(dir []string) // test hook: runs after each listing
}

// warmWalkers is how many threads list at once. A listing is mostly
// waiting (the round trips, the daemon building the directory), so many
// walkers overlap those waits: on the Go src tree (1,300 mostly small
// directories) in place, 16 walkers finished in 380-450 ms against
// 440-600 ms with 4, with less daemon CPU, and a git status started right
// after the mount took 400-490 ms against 510-580 ms; on a tree of
// 100-file directories both took the same.
const warmWalkers = 16

// warmStopWait bounds how long Unmount waits for a listing in flight (a
// getdents blocked behind a request that waits for admission must not
// hold up the unmount; the lazy unmount fallback covers its descriptor).
const warmStopWait = 2 * time.Second

// gitProbes are the names a git work tree's warm-up looks up in every
// directory that lacks them: git status reads .gitignore wherever it scans.
var gitProbes = []string{".gitignore"}

// warmBufSize is the getdents buffer. The kernel sizes a READDIRPLUS
// request by it (up to max_pages), so one request lists about 800 names.
const warmBufSize = 128 << 10

// startWarm begins the warm-up of up to limit names with walkers threads
// (0 or out of range: warmWalkers).
func (m *Mount) startWarm(limit, walkers int) {
	if walkers <= 0 || walkers > warmWalkers {
		walkers = warmWalkers
	}
	w := &m.warm
	w.stop = make(chan struct{})
	w.done = make(chan struct{})
	w.cond = sync.NewCond(&w.mu)
	w.queue = [][]string{nil}
	w.limit = int64(limit)
	w.active.Store(true)
	var wg sync.WaitGroup
	var started sync.WaitGroup
	for i := range walkers {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			if !privateFiles() {
				defer runtime.UnlockOSThread()
			} // else the thread must end with the walk: see privateFiles
			// Background work: the walker's thread runs only when a CPU
			// is otherwise idle, so that the tools the warm-up is for
			// (and the requests they make) are never slowed by it.
			if idle := setIdlePriority(); idle {
				defer restorePriority()
			}
			w.tids[i].Store(uint32(unix.Gettid()))
			defer w.tids[i].Store(0)
			started.Done()
			m.walkWarm()
		}()
	}
	started.Wait() // the threads are known before any request of theirs arrives
	go func() {
		wg.Wait()
		w.active.Store(false)
		close(w.done)
	}()
}

// stopWarm ends the warm-up and waits (bounded) for the walk to return.
func (m *Mount) stopWarm() {
	w := &m.warm
	if w.stop == nil {
		return
	}
	w.mu.Lock()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	t := time.NewTimer(warmStopWait)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
	}
}

// WaitWarm returns once the warm-up has ended (at once if none was
// started) or the mount is gone.
func (m *Mount) WaitWarm() {
	if m.warm.done == nil {
		return
	}
	select {
	case <-m.warm.done:
	case <-m.doneC:
	}
}

// Warmed reports how many names the warm-up has listed and whether it is
// still running.
func (m *Mount) Warmed() (entries int64, running bool) {
	w := &m.warm
	if w.done == nil {
		return 0, false
	}
	select {
	case <-w.done:
	default:
		running = true
	}
	return w.entries.Load(), running
}

// HoldWarm pauses the warm-up until release is called (listings already
// in flight finish). The daemon holds it while it reconciles, so that a
// lease end does not compete with the walk for the CPU and the overlay.
func (m *Mount) HoldWarm() (release func()) {
	w := &m.warm
	if w.cond == nil {
		return func() {}
	}
	w.mu.Lock()
	w.held++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			w.held--
			w.cond.Broadcast()
			w.mu.Unlock()
		})
	}
}

// isWarmer reports whether a request comes from a warm-up thread.
func (m *Mount) isWarmer(pid uint32) bool {
	w := &m.warm
	if !w.active.Load() {
		return false
	}
	for i := range w.tids {
		if w.tids[i].Load() == pid {
			return true
		}
	}
	return false
}

// next hands a walker the next directory to list and the mount's device
// (0 until the root was listed); ok is false once the walk is over (queue
// drained with no walker busy, limit reached, or stopped).
func (w *warmer) next(doneC <-chan struct{}) (dir []string, dev uint64, probes []string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		select {
		case <-w.stop:
			return nil, 0, nil, false
		case <-doneC:
			return nil, 0, nil, false
		default:
		}
		if w.entries.Load() >= w.limit {
			return nil, 0, nil, false
		}
		if len(w.queue) > 0 && w.held == 0 {
			dir = w.queue[0]
			w.queue = w.queue[1:]
			w.busy++
			probes = w.probes
			if slices.Contains(dir, ".git") {
				probes = nil // git reads no .gitignore inside its own directory
			}
			return dir, w.dev, probes, true
		}
		if w.busy == 0 && len(w.queue) == 0 {
			return nil, 0, nil, false
		}
		w.parked++
		w.cond.Wait()
		w.parked--
	}
}

// finished records a listing: its subdirectories join the queue.
func (w *warmer) finished(dir []string, ents []warmEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.busy--
	objects := len(dir) >= 2 && dir[len(dir)-2] == ".git" && dir[len(dir)-1] == "objects"
	for _, e := range ents {
		if e.dir && !(objects && looseObjectDir(e.name)) {
			w.queue = append(w.queue, append(dir[:len(dir):len(dir)], e.name))
		}
	}
	w.cond.Broadcast()
}

// looseObjectDir reports whether name, in a git repository's objects
// directory, is one of the 256 fan-out directories of loose objects. The
// warm-up does not list them: git looks objects up by name (a handful for
// a status), while a freshly committed tree holds one loose object per
// file and directory — in the Go src tree more names than the work tree
// itself. On the Go src tree in place, freshly committed (12,800 names in
// the work tree and .git, 12,900 loose objects), a first git status
// racing the warm-up took 427-551 ms without them against 676-714 ms with
// them listed breadth first (same host, alternated); listed last instead,
// they slowed the second status (78-83 ms → 120-168 ms) while the walkers
// were still busy with them.
func looseObjectDir(name string) bool {
	if len(name) != 2 {
		return false
	}
	for _, c := range []byte(name) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// walkWarm lists directories breadth first until the walk is over. An
// error about one directory (warmSkippable) skips it; any other stops the
// whole walk. The root is listed alone (the queue holds nothing else until
// it is done), and its device is the mount's.
func (m *Mount) walkWarm() {
	w := &m.warm
	buf := make([]byte, warmBufSize)
	for {
		dir, dev, probes, ok := w.next(m.doneC)
		if !ok {
			return
		}
		budget := int(w.limit - w.entries.Load())
		started, notified := m.switchStarted.Load(), m.switchNotified.Load()
		probe := func(ents []warmEntry) []string { return missing(probes, ents) }
		if len(dir) == 0 {
			// The root decides: a git work tree gets gitProbes.
			probe = func(ents []warmEntry) []string {
				if len(missing([]string{".git"}, ents)) != 0 {
					return nil
				}
				w.mu.Lock()
				w.probes = gitProbes
				w.mu.Unlock()
				return missing(gitProbes, ents)
			}
		}
		ents, probed, fdev, err := listWarm(filepath.Join(append([]string{m.mountpoint}, dir...)...), dev, budget, buf, probe)
		if err == nil && len(dir) == 0 {
			w.mu.Lock()
			w.dev = fdev
			w.mu.Unlock()
		}
		if w.afterList != nil {
			w.afterList(dir)
		}
		// What the kernel took in, even from a listing that failed half
		// way, is invalidated again if a switch overlapped it.
		if warmOverlap(started, notified, m.switchStarted.Load()) {
			w.reinvalidated.Add(1)
			m.reinvalidate(dir, ents, probed)
		}
		if err != nil {
			ents = nil
			if !warmSkippable(err) {
				w.mu.Lock()
				select {
				case <-w.stop:
				default:
					close(w.stop)
				}
				w.mu.Unlock()
			}
		}
		w.entries.Add(int64(len(ents)))
		w.finished(dir, ents)
	}
}

// warmOverlap reports whether a view switch may have overlapped a listing,
// from the switch counters before it (started0, notified0) and after it
// (started1): one was in progress, or one began.
func warmOverlap(started0, notified0, started1 uint64) bool {
	return started0 != notified0 || started1 != started0
}

// reinvalidate queues invalidations of dir's listing, of every name in
// ents and of the probed names (negative entries): a view switch
// overlapped their listing.
func (m *Mount) reinvalidate(dir []string, ents []warmEntry, probed []string) {
	fns := make([]func(), 0, len(ents)+len(probed)+1)
	fns = append(fns, func() { m.sendNote(note{dir: dir, content: true}) })
	for _, e := range ents {
		fns = append(fns, func() { m.sendNote(note{dir: dir, name: e.name}) })
	}
	for _, name := range probed {
		fns = append(fns, func() { m.sendNote(note{dir: dir, name: name}) })
	}
	m.queueNotify(fns)
}

// missing returns the names of want that ents lacks.
func missing(want []string, ents []warmEntry) []string {
	var out []string
	for _, n := range want {
		if !slices.ContainsFunc(ents, func(e warmEntry) bool { return e.name == n }) {
			out = append(out, n)
		}
	}
	return out
}

// errOtherFS: a directory below the mountpoint belongs to another mount.
var errOtherFS = errors.New("another filesystem")

// warmEntry is one name of a listing.
type warmEntry struct {
	name string
	dir  bool
}

// warmSkippable reports whether a listing's error concerns only that
// directory (it went away, became something else, is not ours to read, or
// belongs to another mount): the walk goes on without it. Anything else
// (the connection gone, EIO) ends the walk.
func warmSkippable(err error) bool {
	return errors.Is(err, errOtherFS) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) ||
		errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ESTALE)
}

// listWarm lists the directory at path and reports its device. A
// directory on another device than dev (a mount below ours) is not
// listed: errOtherFS. dev 0 accepts any (the root). It stops reading once
// it has budget names (a huge directory does not exceed the warm-up's
// limit by more than a chunk). After a complete listing it looks up the
// names probe returns (absent ones: the kernel caches the miss) and
// returns them as probed. On an error it returns what it listed so far.
func listWarm(path string, dev uint64, budget int, buf []byte, probe func([]warmEntry) []string) (ents []warmEntry, probed []string, _ uint64, _ error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, 0, err
	}
	if dev != 0 && st.Dev != dev {
		return nil, nil, st.Dev, errOtherFS
	}
	complete := false
	for len(ents) < budget {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return ents, nil, st.Dev, err
		}
		if n <= 0 {
			// This last, empty getdents costs a READDIRPLUS, but it is
			// what tells the kernel the listing is complete: only then
			// does it serve the directory's later listings from its cache.
			complete = true
			break
		}
		ents = parseDirents(buf[:n], ents)
	}
	// A listing makes the kernel drop the directory's cached atime
	// (fuse_readdir), so the first stat of it afterwards would be a
	// GETATTR round trip in the tool's path: take it here.
	_ = unix.Fstat(fd, &st)
	if complete && probe != nil {
		// Only a complete listing tells which names are absent.
		probed = probe(ents)
		var pst unix.Stat_t
		for _, name := range probed {
			_ = unix.Fstatat(fd, name, &pst, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	return ents, probed, st.Dev, nil
}

// parseDirents appends the names of the linux_dirent64 records in b to
// ents, skipping "." and "..". A truncated or malformed record ends the
// parse.
func parseDirents(b []byte, ents []warmEntry) []warmEntry {
	const header = 19 // ino 8, off 8, reclen 2, type 1
	for len(b) >= header {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < header || reclen > len(b) {
			return ents
		}
		typ := b[18]
		name := b[header:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if s := string(name); s != "" && s != "." && s != ".." {
			ents = append(ents, warmEntry{name: s, dir: typ == unix.DT_DIR})
		}
		b = b[reclen:]
	}
	return ents
}

// setIdlePriority puts the calling (locked) thread in SCHED_IDLE; false
// if the kernel refused.
func setIdlePriority() bool {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	return unix.SchedSetAttr(0, &attr, 0) == nil
}

// restorePriority puts the calling thread back in SCHED_OTHER before it
// returns to the runtime's pool.
func restorePriority() {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	_ = unix.SchedSetAttr(0, &attr, 0)
}

// AsideFromDevices runs f on a thread whose file table lacks the
// process's FUSE devices (privateFiles), for work that waits on one of the
// process's own mounts: killed meanwhile, the process still dies. It
// returns when f has. Files f opens live in that table: f must close them
// before it returns and hand none to other goroutines. Where the kernel
// refuses a table of its own, f runs on the shared one.
func AsideFromDevices(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if !privateFiles() {
			defer runtime.UnlockOSThread()
		} // else the thread ends with f
		f()
	}()
	<-done
}

// privateFiles gives the calling thread a file table of its own, without
// the FUSE devices (and io_uring instances) the process serves its mounts
// through, and reports whether it did. A walker waits on the daemon's own
// mount: had it the devices in its table, a daemon killed meanwhile (kill
// -9, the OOM killer) could never finish dying — its threads exit, but
// the walker waits uninterruptibly for an answer only the dead daemon
// could give, and keeps every device (the mounts hang), the store's locks
// and the process with it (issue #38). With a table of its own, the
// other threads' exit closes the devices, the kernel aborts the
// connections, the walker's request fails, and it exits too. The
// walker's thread must then never run other goroutines: it stays locked
// and ends with the walk (the runtime exits a thread whose goroutine
// returns locked).
func privateFiles() bool {
	if err := unix.Unshare(unix.CLONE_FILES); err != nil {
		return false
	}
	dir, err := unix.Open("/proc/thread-self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true // still a table of its own; the devices stay in it
	}
	defer unix.Close(dir)
	var devs []int
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(dir, buf)
		if err != nil || n <= 0 {
			break
		}
		for _, e := range parseDirents(buf[:n], nil) {
			fd, err := strconv.Atoi(e.name)
			if err != nil || fd == dir {
				continue
			}
			lb := make([]byte, 64)
			k, err := unix.Readlinkat(dir, e.name, lb)
			if err != nil {
				continue
			}
			if t := string(lb[:k]); t == "/dev/fuse" || t == "anon_inode:[io_uring]" {
				devs = append(devs, fd)
			}
		}
	}
	for _, fd := range devs {
		_ = unix.Close(fd) // in this thread's table only
	}
	return true
}
