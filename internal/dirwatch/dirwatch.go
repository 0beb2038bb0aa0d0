// Package dirwatch tells which directories of a tree changed since a point
// in time, from inotify(7) events, so that a caller that verified a
// directory once need not list and stat it again while nothing happened in
// it.
//
// A Watcher numbers what it has seen: every event it reads takes the next
// sequence number, and Sync reads every pending event and returns the
// number reached. A directory is watched by path (relative to the tree's
// root, "" is the root) through a descriptor the caller opened, so the
// watched directory is exactly the one the caller looked at, even when the
// tree is mounted over (acyclicfs watches an in-place directory underneath
// its own mount, where no process but the daemon's materialization and
// rare programs holding a descriptor from before the mount write).
//
// Per watched directory it keeps the last event of any kind (a name in it
// created, removed, renamed, written, its attributes changed) and the last
// event that changes the directory's own lstat (a name created, removed or
// renamed in it, its own attributes, the directory itself moved or
// removed). A directory that was moved, removed, or lost its watch is
// forgotten (with everything watched below it), so a later question about
// its path answers "unknown" rather than "quiet"; a queue overflow makes
// every directory changed.
//
// What inotify does not report is not seen here either: writes through a
// shared mapping, writes through a hard link in a directory outside the
// tree, and changes made by other machines on a network file system
// (Supported refuses those). A caller must not let a quiet answer stand in
// for a check where that matters.
package dirwatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrFull is returned when the watcher holds its maximum of watches (or
// the system's inotify limit was reached): the directory is not watched.
var ErrFull = errors.New("dirwatch: too many watches")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("dirwatch: closed")

// mask is every event that can change what a listing with lstats shows.
const mask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// selfEvents change the watched directory's own lstat (its mtime and ctime
// move with every name created, removed or renamed in it).
const selfEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// Watcher watches directories of one tree. It is safe for concurrent use.
type Watcher struct {
	mu     sync.Mutex
	fd     int
	seq    uint64
	max    int
	byWD   map[int32]*watch
	byPath map[string]*watch
	buf    []byte
	events int64 // events read (tests, status)
}

type watch struct {
	wd    int32
	path  string
	since uint64 // the sequence number when the watch was added
	any   uint64 // the last event of any kind
	self  uint64 // the last event that changed the directory's own lstat
}

// New returns a Watcher that holds at most max watches.
func New(max int) (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("dirwatch: inotify_init1: %w", err)
	}
	return &Watcher{fd: fd, max: max, byWD: map[int32]*watch{}, byPath: map[string]*watch{}, buf: make([]byte, 64<<10)}, nil
}

// Close releases the inotify descriptor. Later calls fail with ErrClosed
// or answer "unknown".
func (w *Watcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd = -1
	w.byWD, w.byPath, w.buf = map[int32]*watch{}, map[string]*watch{}, nil
	return err
}

// Supported reports whether changes to the file system holding the open
// directory fd are all reported by inotify: local file systems only.
func Supported(fd int) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.F2FS_SUPER_MAGIC,
		0xca451a4e, // bcachefs
		0x2fc12fc1: // zfs
		return true
	}
	return false
}

// Add watches the directory open as fd (any descriptor of it, O_PATH
// included) under path. It returns the sequence number from which the
// watch reports events: a change made before Add returned may be missing,
// one made after it is not. Adding a path watched already keeps the
// existing watch and its numbers.
func (w *Watcher) Add(path string, fd int) (since uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return 0, ErrClosed
	}
	if err := w.drainLocked(); err != nil {
		return 0, err
	}
	if x := w.byPath[path]; x != nil {
		return x.since, nil
	}
	if len(w.byPath) >= w.max {
		return 0, ErrFull
	}
	wd, err := unix.InotifyAddWatch(w.fd, fmt.Sprintf("/proc/self/fd/%d", fd), mask)
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return 0, ErrFull
		}
		return 0, fmt.Errorf("dirwatch: watch %q: %w", path, err)
	}
	if x := w.byWD[int32(wd)]; x != nil {
		// The same directory under another path (it was moved and its
		// watch not yet forgotten): start over under the new path.
		delete(w.byPath, x.path)
	}
	x := &watch{wd: int32(wd), path: path, since: w.seq}
	w.byWD[x.wd], w.byPath[path] = x, x
	return x.since, nil
}

// Sync reads every pending event and returns the sequence number reached.
// Every change made before Sync was called has a number at most the one
// returned.
func (w *Watcher) Sync() (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return 0, ErrClosed
	}
	err := w.drainLocked()
	return w.seq, err
}

// Quiet reports whether path has been watched since at most seq and had no
// event after seq, as of the last Sync or Add. With self set only events
// that change the directory's own lstat count.
func (w *Watcher) Quiet(path string, seq uint64, self bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	x := w.byPath[path]
	if x == nil || x.since > seq {
		return false
	}
	if self {
		return x.self <= seq
	}
	return x.any <= seq
}

// QuietSince is Quiet for a directory whose watch may be younger than seq:
// it reports whether path is watched and had no event after seq or, if
// the watch was added later, after it was added (what came before the
// watch is the caller's to check).
func (w *Watcher) QuietSince(path string, seq uint64, self bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	x := w.byPath[path]
	if x == nil {
		return false
	}
	from := max(seq, x.since)
	if self {
		return x.self <= from
	}
	return x.any <= from
}

// Watching returns how many directories are watched and how many events
// were read so far.
func (w *Watcher) Watching() (dirs int, events int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byPath), w.events
}

// drainLocked reads and applies every pending event.
func (w *Watcher) drainLocked() error {
	for {
		n, err := unix.Read(w.fd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return nil
		}
		if err != nil {
			return fmt.Errorf("dirwatch: read events: %w", err)
		}
		if n <= 0 {
			return nil
		}
		w.apply(w.buf[:n])
	}
}

// apply applies a buffer of events.
func (w *Watcher) apply(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		// struct inotify_event: wd, mask, cookie, len, name[len].
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
		m := binary.NativeEndian.Uint32(b[4:8])
		end := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(b[12:16]))
		if end > len(b) || end < unix.SizeofInotifyEvent {
			return
		}
		name := b[unix.SizeofInotifyEvent:end]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		w.event(wd, m, string(name))
		b = b[end:]
	}
}

// event applies one event.
func (w *Watcher) event(wd int32, m uint32, name string) {
	w.seq++
	w.events++
	if m&unix.IN_Q_OVERFLOW != 0 {
		// Events were lost: every directory may have changed.
		for _, x := range w.byPath {
			x.any, x.self = w.seq, w.seq
		}
		return
	}
	x := w.byWD[wd]
	if x == nil {
		return
	}
	x.any = w.seq
	if m&selfEvents != 0 || (m&unix.IN_ATTRIB != 0 && name == "") {
		x.self = w.seq
	}
	switch {
	case m&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0:
		// The directory is gone from its path: forget it and what was
		// watched below it (paths there no longer name those directories).
		w.forgetLocked(x.path)
	case m&unix.IN_ISDIR != 0 && m&(unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_DELETE) != 0 && name != "":
		// A subdirectory left or replaced this name: what was watched under
		// it is elsewhere now (or gone).
		w.forgetLocked(join(x.path, name))
	}
}

// forgetLocked drops the watches of path and everything below it.
func (w *Watcher) forgetLocked(path string) {
	for p, x := range w.byPath {
		if p == path || path == "" || strings.HasPrefix(p, path+"/") {
			_, _ = unix.InotifyRmWatch(w.fd, uint32(x.wd)) // EINVAL when the kernel dropped it already
			delete(w.byPath, p)
			delete(w.byWD, x.wd)
		}
	}
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
