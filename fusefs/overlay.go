package fusefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/acyclicfs/acyclicfs/store"
)

// link is one name of an inode: the directory holding it and the name.
// Directories have exactly one link (the root none); files may have
// several (hard links).
type link struct {
	dir  *inode
	name string
}

// inode is one object of the overlay view. All fields are protected by
// overlay.mu except num, which never changes once the inode is in the
// tree (createUpper gives a new file the number of its pool file before
// it is linked).
type inode struct {
	num uint64
	// ino is the number the mount reports (ino.go): the hash of the path
	// the inode was first named by; 0 until named. pathHash is the hash of
	// its current path (its children's numbers derive from it).
	ino, pathHash uint64

	mode     uint32 // S_IFMT | permission bits
	rdev     uint32 // device number of a character or block device
	uid, gid uint32
	atime    int64 // ns since epoch
	mtime    int64
	ctime    int64
	lower    store.Entry // what the pinned view has here; zero ID if new
	hasLower bool        // lower is meaningful (the inode came from the pinned tree)
	upper    bool        // file data lives in overlay.upperPath(num)
	// retained: the upper file is kept after a view switch found it equal
	// to the new lower entry (seq is 0), so opens keep using it as their
	// backing file — passthrough at native speed, and no copy-up at the
	// next write. Counted in overlay.retainedBytes.
	retained     bool
	retainedSize int64
	tmpfile      bool   // created by O_TMPFILE and not linked yet
	target       []byte // symlink target of a new symlink (lower ones read lazily)
	xattrs       map[string][]byte
	links        []link
	children     map[string]*inode // directories: nil until loaded from lower
	nlinkExtra   int               // directories: number of subdirectories (when loaded)

	// seq is the overlay sequence number of the last change to this
	// inode's own state (attrs, data through the daemon, names for a
	// directory); 0 means identical to lower. subSeq (directories) is the
	// largest seq at or below; 0 means the whole subtree is clean, so
	// capture reuses lower.ID without looking inside.
	seq    uint64
	subSeq uint64
	// linkSeq is the seq of the change that gave the inode its latest name
	// (create, link, rename); 0 for names from the lower tree. SwitchView
	// keeps a name given after the last capture as it is.
	linkSeq uint64

	// capture memo: the stat of the upper file when it was last hashed
	// and the blob it produced, so an unchanged upper file is not rehashed.
	capStat upperStat
	capID   store.ID
	capRacy bool // capStat was taken within racyWindow of the last change (then in overlay.racy)
	// wopens counts the opens of the inode for writing or truncation, so
	// that a view switch can tell whether a file it hashed without the
	// lock may have been written since (hashRacy).
	wopens uint64
	// capTree (directories) is the tree this directory had in the last
	// capture, used by SwitchView to tell names deleted after the capture
	// from names added by a rebase.
	capTree store.ID

	// writer is the latest process that changed the inode since
	// attribution last took it (attribution.go); PID 0: none. writerSince
	// is when that began. Earlier writers are in overlay.moreWriters.
	writer      WriterRef
	writerSince int64
	// walGen is the log generation (wal.go) whose snapshot or frames hold
	// a record of this inode; walListed says that record lists its
	// children, so the log may record their changes by name.
	walGen    uint64
	walListed bool

	// open state
	opens      int      // open file handles of any kind
	upperFile  *os.File // shared backing file for upper data (O_RDWR)
	blobFile   *os.File // shared backing file for clean reads (O_RDONLY)
	blobID     store.ID // the blob blobFile holds
	blobOpens  int      // handles using blobFile
	upperOpens int      // handles using upperFile
	// readers are the open blob handles the daemon serves (not by
	// passthrough): a copy-up moves them to the upper file (redirect), so
	// that they read what is written through the mount from then on.
	readers map[*handle]struct{}
	// plainOpens counts handles given to the kernel without passthrough.
	// While any is open no passthrough handle is given out: go-fuse keeps
	// one backing-ID refcount per inode and drops it at every RELEASE of
	// the inode, passthrough or not, so a plain handle released after a
	// passthrough open would unregister the backing file the kernel is
	// about to look up (the open fails with EIO).
	plainOpens int
	// stalePages: handles of a blob the view no longer shows (a switch
	// changed the content under them) were open, and those the kernel
	// served from its page cache may have read the old content back into
	// it after the switch invalidated it. The next open of the current
	// blob is given without FOPEN_KEEP_CACHE, so that the kernel drops
	// those pages.
	stalePages bool
	// pagesID is the blob whose content the last store into the kernel's
	// page cache held (Mount.storePages): it is not stored again while
	// the view shows it.
	pagesID store.ID
}

// upperStat identifies a version of an upper file's content.
type upperStat struct {
	size, mtime, ctime int64
}

func statOf(st *syscall.Stat_t) upperStat {
	return upperStat{size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

func (in *inode) isDir() bool     { return in.mode&syscall.S_IFMT == syscall.S_IFDIR }
func (in *inode) isSymlink() bool { return in.mode&syscall.S_IFMT == syscall.S_IFLNK }
func (in *inode) isReg() bool     { return in.mode&syscall.S_IFMT == syscall.S_IFREG }

// isSpecial reports whether in is a FIFO, socket or device: a name with
// attributes only (the kernel serves its opens itself).
func (in *inode) isSpecial() bool {
	_, ok := store.SpecialKindOfMode(in.mode)
	return ok
}

// errNeedLoad asks overlay.update to load dir's lower tree outside the
// lock and retry.
type errNeedLoad struct{ dir *inode }

func (e *errNeedLoad) Error() string { return fmt.Sprintf("directory %d not loaded", e.dir.num) }

// overlay is the inode table: the pinned lower tree, loaded lazily per
// directory, plus the dirty state. It has no FUSE dependency so that
// RecoverCapture can use it offline.
type overlay struct {
	objects  Objects
	stateDir string
	uid, gid uint32

	mu     sync.Mutex // protects every inode field, root, nextIno, seq, capSeq, inos
	root   *inode
	rootID store.ID
	// inos maps each path-derived inode number handed out in this mount
	// to the overlay inode that reports it (ino.go), so that none is
	// handed out twice.
	inos map[uint64]uint64
	// inosSwept is the table's size after its last sweep (sweepInos).
	inosSwept int
	nextIno   uint64
	seq       uint64 // last sequence number handed out
	capSeq    uint64 // seq at the last Capture (0: never captured)

	// unsnapped is set by every change the snapshot records and cleared
	// when one is encoded, so an fsync with nothing new to record costs
	// only the file's own fsync.
	unsnapped bool
	// trash lists upper files moved to trashDir since the last snapshot
	// was encoded; they are deleted once that snapshot is durable.
	trash []uint64
	// unlinked marks the trash entries of files retired because no name
	// and no open handle was left (not by a view switch): a full disk may
	// truncate them before the next snapshot (writeSnapshot).
	unlinked map[uint64]bool
	// named holds the upper files the durable snapshot may name; nil until
	// this process wrote one (then an older snapshot may name anything).
	// An upper file it does not name is deleted at once when retired: a
	// file created and removed between fsyncs must give its space back
	// (a full disk is freed by rm). encodedUppers is scratch for
	// encodeSnapshot. Both guarded by mu.
	named, encodedUppers map[uint64]bool

	openHandles int        // open file handles in the whole mount (protected by mu)
	released    *sync.Cond // on mu; broadcast when a handle is released

	// retainLimit bounds the bytes of retained upper files (0: none kept);
	// retainedBytes is what they hold now. Both guarded by mu.
	retainLimit, retainedBytes int64

	// pool supplies empty upper files for creates (nil offline); set
	// before the overlay is shared.
	pool *upperPool

	// The write-ahead log (wal.go): wal is guarded by mu, walLog by walMu
	// (taken before mu, after a snapshot's lock); walPending says that a
	// flush has something to write.
	wal        walState
	walMu      sync.Mutex
	walLog     walLog
	walPending atomic.Bool
	walMarks   atomic.Uint64 // changes marked so far

	// recovery describes what opening the state directory could not keep
	// (a log that did not replay, upper files no record named); set
	// before the overlay is shared.
	recovery []string
	// fresh: no snapshot or log was found at open (the mount then starts
	// a log with no snapshot under it, wal.go).
	fresh bool

	// uppers lists upper files a replayed snapshot refers to; only used
	// while opening, before the overlay is shared.
	uppers map[uint64]bool

	// capturing counts captures storing contents now; captureFiles and
	// captureBytes count the files and bytes the latest one has hashed
	// (CaptureProgress).
	// lowerLinks are the link groups of the pinned generation; multi
	// holds inodes that may have several names (links.go). Guarded by mu.
	lowerLinks [][]string
	multi      map[*inode]struct{}

	capturing                  atomic.Int32
	captureFiles, captureBytes atomic.Int64

	// racy holds the inodes whose capture memo may be racy (capRacy; an
	// entry may be stale: hashRacy drops those). prehashed is what
	// hashRacy found, during a view switch. Both guarded by mu.
	racy      map[*inode]struct{}
	prehashed map[*inode]racyHash

	// fsm is the change bookkeeping that answers git's fsmonitor hook
	// (fsmonitor.go). Guarded by mu.
	fsm fsmState

	// moreWriters holds the earlier writers of inodes that more than one
	// process changed since attribution last took them (attribution.go).
	// Guarded by mu.
	moreWriters map[*inode][]WriterRef
	// removed holds, by path, who removed names of the captured base
	// since attribution last took them (attribution.go). Guarded by mu.
	removed map[string]*removedName
	// execs tells a pid's exec generation (the Admitter, if it is an
	// ExecWatcher); describe describes a writer for the overlay log
	// (Config.DescribeWriter). Both set before the mount serves.
	execs    ExecWatcher
	describe func(WriterRef) WriterInfo
	// noAttr: attribution is off (Config.NoAttribution); every change's
	// writer is unknown (PID 0), so none is recorded. Set before the
	// mount serves.
	noAttr bool
	// walDesc holds the writers a replayed snapshot or log described
	// (wal_attribution.go). Guarded by mu.
	walDesc map[WriterRef]WriterInfo
	// taken holds what the last TakeWriters reported, per inode and per
	// removed path, until WritersRecorded clears it. Guarded by mu.
	taken        map[*inode][]WriterRef
	takenRemoved map[string][]WriterRef
}

func newOverlay(objects Objects, stateDir string, rootID store.ID) *overlay {
	o := &overlay{objects: objects, stateDir: stateDir, nextIno: 2,
		uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), inos: map[uint64]uint64{}}
	o.rootID = rootID
	o.released = sync.NewCond(&o.mu)
	o.root = &inode{num: 1, ino: 1, pathHash: rootPathHash, mode: syscall.S_IFDIR | 0o755, uid: o.uid, gid: o.gid,
		lower: store.Entry{Kind: store.KindDir, ID: rootID}, hasLower: true}
	now := time.Now().UnixNano()
	o.root.mtime, o.root.atime, o.root.ctime = now, now, now
	return o
}

func (o *overlay) upperDir() string { return filepath.Join(o.stateDir, "upper") }
func (o *overlay) trashDir() string { return filepath.Join(o.stateDir, "upper-trash") }
func (o *overlay) trashPath(num uint64) string {
	return filepath.Join(o.trashDir(), strconv.FormatUint(num, 10))
}

// trashUpper retires an upper file the table no longer needs. The snapshot
// on disk may still name it, so it is moved aside (freeing its name for a
// new copy-up) and deleted only after a snapshot without it is durable;
// replay of an older snapshot moves it back. Caller holds mu.
//
// An upper file only the log names (wal.go) is deleted once a frame that
// no longer names it is written.
//
// dead: the inode has no name and no open left, so nothing can give it an
// upper file again. Then an upper file only the log names needs no new
// name either: it stays where a replay of the log finds it and is deleted
// in place once the frame recording its end is written, one unlink(2)
// instead of a rename(2) and an unlink(2) per removed new file. (A crash
// between that frame and the unlink leaves it a stray, which recovery
// deletes as it deletes any upper file no record names.)
func (o *overlay) trashUpper(num uint64, dead bool) {
	logOnly := o.named != nil && !o.named[num]
	if logOnly && !o.wal.named[num] {
		_ = os.Remove(o.upperPath(num))
		return
	}
	if logOnly && dead {
		o.wal.trash = append(o.wal.trash, walRetired{num: num, inPlace: true})
		o.walPending.Store(true)
		return
	}
	// rename(2) directly: os.Rename adds an lstat of the target, on every unlink.
	if err := syscall.Rename(o.upperPath(num), o.trashPath(num)); err == nil {
		if logOnly {
			o.wal.trash = append(o.wal.trash, walRetired{num: num})
			o.walPending.Store(true)
			return
		}
		o.trash = append(o.trash, num)
		o.unsnapped = true
	}
}

func (o *overlay) upperPath(num uint64) string {
	return filepath.Join(o.upperDir(), strconv.FormatUint(num, 10))
}

// getTree fetches a tree; the zero ID is the empty tree.
func (o *overlay) getTree(id store.ID) (*store.Tree, error) {
	if id.IsZero() {
		return &store.Tree{}, nil
	}
	t, err := o.objects.GetTree(id)
	if err != nil {
		return nil, fmt.Errorf("load tree %s: %w", id.Short(), err)
	}
	return t, nil
}

// update runs fn under the lock, loading directories fn asks for (via
// errNeedLoad) outside the lock and retrying.
func (o *overlay) update(fn func() error) error {
	for {
		o.mu.Lock()
		err := fn()
		o.mu.Unlock()
		var nl *errNeedLoad
		if !errors.As(err, &nl) {
			return err
		}
		if err := o.load(nl.dir); err != nil {
			return err
		}
	}
}

// load reads d's lower tree without the lock and installs it.
func (o *overlay) load(d *inode) error {
	o.mu.Lock()
	if d.children != nil {
		o.mu.Unlock()
		return nil
	}
	id := d.lower.ID
	o.mu.Unlock()
	t, err := o.getTree(id)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if d.children == nil && d.lower.ID == id {
		o.install(d, t)
	}
	return nil
}

// install fills an unloaded directory from its lower tree. Caller holds mu.
func (o *overlay) install(d *inode, t *store.Tree) {
	d.children = make(map[string]*inode, len(t.Entries))
	for _, e := range t.Entries {
		c := o.newLowerInode(e)
		c.links = []link{{dir: d, name: e.Name}}
		o.nameInode(d, e.Name, c)
		d.children[e.Name] = c
		if c.isDir() {
			d.nlinkExtra++
		}
	}
}

// typeForKind is the stat file type (S_IFMT bits) of kind k.
func typeForKind(k store.Kind) uint32 {
	switch k {
	case store.KindSymlink:
		return syscall.S_IFLNK
	case store.KindDir:
		return syscall.S_IFDIR
	case store.KindFIFO, store.KindSocket, store.KindCharDev, store.KindBlockDev:
		return store.SpecialMode(k)
	}
	return syscall.S_IFREG
}

// modeFor is the stat mode a lower entry shows: its type and the
// permission bits the tree records.
func modeFor(e *store.Entry) uint32 { return typeForKind(e.Kind) | e.Perm() }

// newLowerInode makes a clean inode for a lower entry. Caller holds mu.
func (o *overlay) newLowerInode(e store.Entry) *inode {
	c := &inode{num: o.nextIno, mode: modeFor(&e), rdev: uint32(e.Rdev()), uid: o.uid, gid: o.gid,
		atime: e.Mtime, mtime: e.Mtime, ctime: e.Mtime, lower: e, hasLower: true}
	c.lower.Name = ""
	o.nextIno++
	return c
}

// newInode makes a new overlay-only inode. Caller holds mu.
func (o *overlay) newInode(mode, uid, gid uint32) *inode {
	now := time.Now().UnixNano()
	c := &inode{num: o.nextIno, mode: mode, uid: uid, gid: gid, atime: now, mtime: now, ctime: now}
	o.nextIno++
	if c.isDir() {
		c.children = map[string]*inode{}
	}
	return c
}

// reserveIno allocates an inode number for the upper-file pool.
func (o *overlay) reserveIno() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.nextIno
	o.nextIno++
	return n
}

// children returns d's loaded children or errNeedLoad. Caller holds mu.
func (o *overlay) children(d *inode) (map[string]*inode, error) {
	if !d.isDir() {
		return nil, syscall.ENOTDIR
	}
	if d != o.root && len(d.links) == 0 {
		return nil, syscall.ENOENT // removed directory
	}
	if d.children == nil {
		return nil, &errNeedLoad{dir: d}
	}
	return d.children, nil
}

// touch records a change of in's own state and propagates subSeq to the
// root along every link. Caller holds mu.
func (o *overlay) touch(in *inode) {
	o.unretain(in)
	o.unsnapped = true
	o.seq++
	in.seq = o.seq
	o.walMark(in, walFull)
	o.propagate(in, o.seq)
}

func (o *overlay) propagate(in *inode, seq uint64) {
	if in.isDir() {
		in.subSeq = seq
	}
	for _, l := range in.links {
		for d := l.dir; d != nil; {
			if d.subSeq == seq {
				break
			}
			d.subSeq = seq
			o.walMark(d, walSub)
			if len(d.links) == 0 {
				break
			}
			d = d.links[0].dir
		}
	}
}

// dirChanged records a namespace change in d. Caller holds mu.
func (o *overlay) dirChanged(d *inode) {
	now := time.Now().UnixNano()
	d.mtime, d.ctime = now, now
	o.touch(d)
}

// addLink inserts c as d/name. Caller holds mu; name must be free.
func (o *overlay) addLink(d *inode, name string, c *inode) {
	d.children[name] = c
	c.links = append(c.links, link{dir: d, name: name})
	if len(c.links) > 1 {
		o.noteMulti(c)
	}
	o.nameInode(d, name, c)
	if c.isDir() {
		d.nlinkExtra++
	}
	o.dirChanged(d)
	c.linkSeq = o.seq
	o.walName(d, name)
	o.walMark(c, walFull)
}

// removeLink deletes d/name (which must be c). Caller holds mu. When the
// last link of an unopened file goes, its upper file is deleted.
func (o *overlay) removeLink(d *inode, name string, c *inode) {
	detachName(d, name, c)
	c.ctime = time.Now().UnixNano()
	o.dirChanged(d)
	o.fsmRemoved(d, name, c)
	o.walName(d, name)
	o.walMark(c, walFull)
	o.maybeDropUpper(c)
}

// detachName drops the name d/name of c from both sides of the table.
// Caller holds mu.
func detachName(d *inode, name string, c *inode) {
	delete(d.children, name)
	for i, l := range c.links {
		if l.dir == d && l.name == name {
			c.links = append(c.links[:i], c.links[i+1:]...)
			break
		}
	}
	if c.isDir() {
		d.nlinkExtra--
	}
}

// maybeDropUpper deletes the upper file of an inode that has no names and
// no open handles. Caller holds mu.
func (o *overlay) maybeDropUpper(c *inode) {
	if len(c.links) == 0 && c.opens == 0 && c.upper {
		o.retireUpper(c, true)
		if o.trashIndex(c.num) >= 0 {
			if o.unlinked == nil {
				o.unlinked = map[uint64]bool{}
			}
			o.unlinked[c.num] = true
		}
	}
}

// trashIndex is num's index in trash, or -1. Caller holds mu.
func (o *overlay) trashIndex(num uint64) int {
	for i := len(o.trash) - 1; i >= 0; i-- {
		if o.trash[i] == num {
			return i
		}
	}
	return -1
}

// dropUpper retires c's upper file; c shows its lower entry again.
// Caller holds mu.
func (o *overlay) dropUpper(c *inode) { o.retireUpper(c, false) }

// retireUpper is dropUpper; dead as for trashUpper. Caller holds mu.
func (o *overlay) retireUpper(c *inode, dead bool) {
	o.unretain(c)
	o.trashUpper(c.num, dead)
	c.upper = false
	c.capStat, c.capID = upperStat{}, store.ID{}
}

// markRacy records that c's capture memo is racy (c.capRacy), for the
// next view switch to hash it before taking the lock. Caller holds mu.
func (o *overlay) markRacy(c *inode) {
	if o.racy == nil {
		o.racy = map[*inode]struct{}{}
	}
	o.racy[c] = struct{}{}
}

// retain keeps c's upper file, whose content a view switch found equal to
// c's new lower entry, as a clean inode's backing file if the budget
// allows; it reports whether it did. Caller holds mu.
func (o *overlay) retain(c *inode, size int64) bool {
	if size > o.retainLimit-o.retainedBytes+c.retainedSize {
		o.unretain(c)
		return false
	}
	o.retainedBytes += size - c.retainedSize
	c.retained, c.retainedSize = true, size
	return true
}

// unretain makes a retained upper file an ordinary one (about to change,
// or be dropped). Caller holds mu.
func (o *overlay) unretain(c *inode) {
	if c.retained {
		o.retainedBytes -= c.retainedSize
		c.retained, c.retainedSize = false, 0
	}
}

// isAncestor reports whether a is d or one of d's ancestors. Caller holds mu.
func isAncestor(a, d *inode) bool {
	for d != nil {
		if d == a {
			return true
		}
		if len(d.links) == 0 {
			return false
		}
		d = d.links[0].dir
	}
	return false
}

// nlink is the link count reported to the kernel.
func (in *inode) nlink() uint32 {
	if in.isDir() {
		if in.children == nil {
			return 1 // unknown without loading: 1 disables find's leaf optimisation
		}
		return uint32(2 + in.nlinkExtra)
	}
	return uint32(len(in.links))
}

// clean reports whether in (a non-directory) equals its lower entry.
func (in *inode) clean() bool { return in.seq == 0 && (!in.upper || in.retained) }

// kind is the store kind the inode captures as.
func (in *inode) kind() store.Kind {
	switch in.mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return store.KindDir
	case syscall.S_IFLNK:
		return store.KindSymlink
	}
	if k, ok := store.SpecialKindOfMode(in.mode); ok {
		return k
	}
	if in.mode&0o111 != 0 {
		return store.KindExec
	}
	return store.KindFile
}
