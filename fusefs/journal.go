package fusefs

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/internal/osfile"
	"github.com/acyclicfs/acyclicfs/store"
)

// The overlay is made durable as a compacted snapshot of the dirty part of
// the inode table, written atomically (temp → fsync → rename → fsync dir)
// whenever a tool calls fsync or fsyncdir, and at unmount. Its size is
// O(dirty directories + their entries), never O(tree): clean subtrees are
// recorded by their lower entry only.

const (
	snapName    = "overlay.snap"
	snapMagic   = "ACYFSOV1"
	snapVersion = 1
)

// crcTable is built on first use: building it costs about 0.25 ms, which
// every CLI process would otherwise pay at start (most never touch a
// journal).
var crcTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

type snapChild struct {
	Name string
	Num  uint64
}

type snapInode struct {
	Num                 uint64
	Mode, UID, GID      uint32
	Rdev                uint32 // devices; absent (0) in snapshots from before special files
	Atime, Mtime, Ctime int64
	Lower               store.Entry
	HasLower, Upper     bool
	Target              []byte
	Xattrs              map[string][]byte
	Seq, SubSeq         uint64
	LinkSeq             uint64
	CapTree             store.ID
	Loaded              bool
	Children            []snapChild
	// Writers are the inode's writers since the last recorded capture
	// (indices into the writer table of the snapshot and its log, oldest
	// first; wal_attribution.go), WriterSince when the first began.
	// Absent (nil) in snapshots and logs from before attribution.
	Writers     []uint32
	WriterSince int64
}

type snapshot struct {
	Version              int
	RootID               store.ID
	NextIno, Seq, CapSeq uint64
	Inodes               []snapInode // Inodes[0] is the root
	// Nonce names the write-ahead log (wal.go) that continues this
	// snapshot; 0 (snapshots before the log): none.
	Nonce uint64
	// Writers is the writer table (wal_attribution.go) and Removed the
	// removed names' attribution; absent in older snapshots.
	Writers []WriterInfo
	Removed []walRemoved
}

// encodeSnapshot serialises the dirty part of the table. Caller holds mu.
func (o *overlay) encodeSnapshot() ([]byte, error) {
	s := snapshot{Version: snapVersion, RootID: o.rootID, NextIno: o.nextIno, Seq: o.seq, CapSeq: o.capSeq, Nonce: o.wal.nonce}
	o.encodedUppers = map[uint64]bool{}
	o.walResetWriters()
	seen := map[*inode]bool{}
	var visit func(in *inode)
	visit = func(in *inode) {
		seen[in] = true
		in.walGen, in.walListed = o.wal.gen, walListable(in)
		idx := len(s.Inodes)
		if in.upper {
			o.encodedUppers[in.num] = true
		}
		s.Inodes = append(s.Inodes, snapInode{Num: in.num, Mode: in.mode, Rdev: in.rdev, UID: in.uid, GID: in.gid,
			Atime: in.atime, Mtime: in.mtime, Ctime: in.ctime, Lower: in.lower, HasLower: in.hasLower,
			Upper: in.upper, Target: in.target, Xattrs: in.xattrs, Seq: in.seq, SubSeq: in.subSeq,
			LinkSeq: in.linkSeq, CapTree: in.capTree})
		s.Inodes[idx].Writers, s.Inodes[idx].WriterSince = o.walWriters(in)
		if !in.isDir() || in.subSeq == 0 || in.children == nil {
			return
		}
		names := sortedNames(in.children)
		kids := make([]snapChild, 0, len(names))
		for _, name := range names {
			c := in.children[name]
			kids = append(kids, snapChild{Name: name, Num: c.num})
		}
		s.Inodes[idx].Loaded = true
		s.Inodes[idx].Children = kids
		for _, name := range names {
			if c := in.children[name]; !seen[c] {
				visit(c)
			}
		}
	}
	visit(o.root)
	s.Removed = o.snapRemoved()
	s.Writers, o.wal.newWriters = o.wal.newWriters, nil
	var buf bytes.Buffer
	buf.WriteString(snapMagic)
	buf.Write(make([]byte, 8)) // length, filled below
	if err := gob.NewEncoder(&buf).Encode(&s); err != nil {
		return nil, fmt.Errorf("encode overlay snapshot: %w", err)
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint64(b[len(snapMagic):], uint64(len(b)-len(snapMagic)-8))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable())), nil
}

// decodeSnapshot parses and validates a snapshot file's bytes.
func decodeSnapshot(b []byte) (*snapshot, error) {
	hdr := len(snapMagic) + 8
	if len(b) < hdr+4 || string(b[:len(snapMagic)]) != snapMagic {
		return nil, fmt.Errorf("%w: bad header", ErrBadSnapshot)
	}
	n := binary.LittleEndian.Uint64(b[len(snapMagic):])
	if n != uint64(len(b)-hdr-4) {
		return nil, fmt.Errorf("%w: bad length", ErrBadSnapshot)
	}
	if crc32.Checksum(b[:len(b)-4], crcTable()) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrBadSnapshot)
	}
	var s snapshot
	if err := gob.NewDecoder(bytes.NewReader(b[hdr : len(b)-4])).Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	if s.Version != snapVersion {
		return nil, fmt.Errorf("%w: version %d", ErrBadSnapshot, s.Version)
	}
	if len(s.Inodes) == 0 || s.Inodes[0].Num != 1 || s.Inodes[0].Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("%w: bad root", ErrBadSnapshot)
	}
	return &s, nil
}

// build turns a decoded snapshot into an overlay, checking that it is a
// tree (directories reached once, children exist, names valid).
func (s *snapshot) build(objects Objects, stateDir string) (*overlay, error) {
	o := newOverlay(objects, stateDir, s.RootID)
	o.nextIno, o.seq, o.capSeq = s.NextIno, s.Seq, s.CapSeq
	byNum := make(map[uint64]*inode, len(s.Inodes))
	for i := range s.Inodes {
		r := &s.Inodes[i]
		if _, dup := byNum[r.Num]; dup || r.Num == 0 || r.Num >= s.NextIno && r.Num != 1 {
			return nil, fmt.Errorf("%w: bad inode number %d", ErrBadSnapshot, r.Num)
		}
		switch r.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR, syscall.S_IFREG, syscall.S_IFLNK:
			if r.Rdev != 0 {
				return nil, fmt.Errorf("%w: device number on mode %o", ErrBadSnapshot, r.Mode)
			}
		case syscall.S_IFIFO, syscall.S_IFSOCK:
			if r.Rdev != 0 {
				return nil, fmt.Errorf("%w: device number on mode %o", ErrBadSnapshot, r.Mode)
			}
		case syscall.S_IFCHR, syscall.S_IFBLK:
		default:
			return nil, fmt.Errorf("%w: bad mode %o", ErrBadSnapshot, r.Mode)
		}
		in := &inode{num: r.Num, mode: r.Mode, rdev: r.Rdev, uid: r.UID, gid: r.GID, atime: r.Atime, mtime: r.Mtime,
			ctime: r.Ctime, lower: r.Lower, hasLower: r.HasLower, upper: r.Upper, target: r.Target,
			xattrs: r.Xattrs, seq: r.Seq, subSeq: r.SubSeq, linkSeq: r.LinkSeq, capTree: r.CapTree}
		if in.upper && !in.isReg() {
			return nil, fmt.Errorf("%w: upper data on a non-file", ErrBadSnapshot)
		}
		if len(r.Children) > 0 && !r.Loaded {
			return nil, fmt.Errorf("%w: children of an unloaded directory", ErrBadSnapshot)
		}
		if r.Loaded {
			if !in.isDir() {
				return nil, fmt.Errorf("%w: children of a non-directory", ErrBadSnapshot)
			}
			in.children = make(map[string]*inode, len(r.Children))
		}
		if i == 0 {
			in.lower = store.Entry{Kind: store.KindDir, ID: s.RootID}
			in.hasLower = true
		}
		byNum[r.Num] = in
	}
	for i := range s.Inodes {
		r := &s.Inodes[i]
		d := byNum[r.Num]
		for _, k := range r.Children {
			c := byNum[k.Num]
			if c == nil || !store.ValidName(k.Name) || d.children[k.Name] != nil || c == o.root {
				return nil, fmt.Errorf("%w: bad child %q", ErrBadSnapshot, k.Name)
			}
			if c.isDir() && len(c.links) > 0 {
				return nil, fmt.Errorf("%w: directory %d linked twice", ErrBadSnapshot, c.num)
			}
			d.children[k.Name] = c
			c.links = append(c.links, link{dir: d, name: k.Name})
			if c.isDir() {
				d.nlinkExtra++
			}
		}
	}
	o.root = byNum[1]
	o.root.ino, o.root.pathHash = 1, rootPathHash
	// Every recorded inode must hang off the root (no cycles, no orphans).
	reached := 0
	var walk func(d *inode, depth int) error
	walk = func(d *inode, depth int) error {
		reached++
		if depth > 4096 {
			return fmt.Errorf("%w: too deep", ErrBadSnapshot)
		}
		for _, c := range d.children {
			if c.isDir() {
				if err := walk(c, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(o.root, 0); err != nil {
		return nil, err
	}
	dirs := 0
	for _, in := range byNum {
		if in.isDir() {
			dirs++
		}
	}
	if reached != dirs {
		return nil, fmt.Errorf("%w: unreachable directories", ErrBadSnapshot)
	}
	o.numberTree(o.root)
	for _, in := range byNum {
		if len(in.links) > 1 {
			o.noteMulti(in)
		}
	}
	o.uppers = map[uint64]bool{}
	for num, in := range byNum {
		if in.upper {
			o.uppers[num] = true
			if in.seq == 0 {
				// Retained when the snapshot was written: it may have been
				// opened for writing since (that open's touch need not be
				// durable), so the next capture looks at it again.
				o.touch(in)
			}
		}
	}
	o.restoreWriters(s, byNum)
	return o, nil
}

// loadSnapshot reads stateDir's snapshot; found is false when there is none.
func loadSnapshot(stateDir string, objects Objects) (*overlay, bool, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, snapName))
	if errors.Is(err, fs.ErrNotExist) {
		return loadFreshWAL(stateDir, objects)
	}
	if err != nil {
		return nil, false, fmt.Errorf("read overlay snapshot: %w", err)
	}
	s, err := decodeSnapshot(b)
	if err != nil {
		return nil, false, err
	}
	var frames []walFrame
	if s.Nonce != 0 {
		if frames, _, err = readWAL(stateDir, s.Nonce); err != nil {
			return nil, false, err
		}
	}
	o, err := replay(s, frames, objects, stateDir)
	if err != nil && len(frames) > 0 {
		// The log does not fit its snapshot: recover the snapshot alone
		// and say what was dropped.
		s, _ = decodeSnapshot(b)
		o, err = replay(s, nil, objects, stateDir)
		if err == nil {
			o.recovery = append(o.recovery, fmt.Sprintf("overlay log (%d changes) not replayed: %v", len(frames), err))
		}
	}
	if err != nil {
		return nil, false, err
	}
	return o, true, nil
}

// loadFreshWAL replays the log of a mount that never wrote a snapshot
// (its base is the empty overlay on the root the log names); found is
// false when there is no such log or it holds no frame.
func loadFreshWAL(stateDir string, objects Objects) (*overlay, bool, error) {
	frames, root, err := readWAL(stateDir, 0)
	if err != nil || len(frames) == 0 {
		return nil, false, err
	}
	base := newOverlay(objects, stateDir, root)
	s := &snapshot{Version: snapVersion, RootID: root, NextIno: base.nextIno,
		Inodes: []snapInode{snapRecord(base.root, false)}}
	o, err := replay(s, frames, objects, stateDir)
	if err != nil {
		// Nothing else to fall back on but the pinned view: say so.
		o = newOverlay(objects, stateDir, root)
		o.recovery = append(o.recovery, fmt.Sprintf("overlay log (%d changes) not replayed: %v", len(frames), err))
		o.named = map[uint64]bool{}
		return o, true, nil
	}
	return o, true, nil
}

// replay builds the overlay of snapshot s followed by frames, and puts
// back the upper files it names that were retired after they were
// written.
func replay(s *snapshot, frames []walFrame, objects Objects, stateDir string) (*overlay, error) {
	if err := s.applyWAL(frames); err != nil {
		return nil, err
	}
	o, err := s.build(objects, stateDir)
	if err != nil {
		return nil, err
	}
	for num := range o.uppers {
		if _, err := os.Stat(o.upperPath(num)); err != nil {
			// Retired after this snapshot was written (unlink, view
			// switch): the snapshot still needs it.
			if rerr := os.Rename(o.trashPath(num), o.upperPath(num)); rerr != nil {
				return nil, fmt.Errorf("%w: upper file of inode %d: %v", ErrBadSnapshot, num, err)
			}
		}
	}
	return o, nil
}

// removeStrayUppers deletes upper files the replayed table does not
// reference (written after the last snapshot, or left by a copy-up).
func (o *overlay) removeStrayUppers() error {
	ents, err := os.ReadDir(o.upperDir())
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	var lost strayReport
	for _, e := range ents {
		num, err := strconv.ParseUint(e.Name(), 10, 64)
		if err == nil && o.uppers[num] {
			continue
		}
		if err == nil {
			// An upper file with data that no record names: a create or
			// copy-up whose request did not complete. (Empty ones are
			// mostly the dead mount's pool; copy-up temporaries hold
			// only what the view has anyway.)
			if info, ierr := e.Info(); ierr == nil && info.Size() > 0 {
				lost.Files++
				lost.Bytes += info.Size()
			}
		}
		if err := os.Remove(filepath.Join(o.upperDir(), e.Name())); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	if lost.Files > 0 {
		o.recovery = append(o.recovery, "dropped "+lost.String()+" that no record names (written by requests the crash interrupted)")
	}
	o.uppers = nil
	// Whatever is left in the trash is named by no snapshot any more.
	if err := os.RemoveAll(o.trashDir()); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.MkdirAll(o.trashDir(), 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	return nil
}

// writeSnapshot makes the current overlay durable.
func (m *Mount) writeSnapshot() error { return m.ov.writeSnapshot(&m.snapMu) }

func (o *overlay) writeSnapshot(snapMu interface {
	Lock()
	Unlock()
}) error {
	snapMu.Lock()
	defer snapMu.Unlock()
	o.walMu.Lock()
	defer o.walMu.Unlock()
	o.mu.Lock()
	if !o.unsnapped {
		// Nothing changed since the last snapshot: nothing for a flush
		// to write either.
		o.walPending.Store(false)
		o.mu.Unlock()
		return nil
	}
	// A new base for the log: what is marked now is in the snapshot.
	o.wal.seq++
	o.wal.gen, o.wal.nonce = o.wal.seq, newNonce()
	o.wal.marks, o.wal.names = nil, nil
	o.wal.named, o.wal.size = map[uint64]bool{}, 0
	o.walPending.Store(false)
	nonce, rootID := o.wal.nonce, o.rootID
	b, err := o.encodeSnapshot()
	o.unsnapped = err != nil
	// Upper files the old log named wait for the new snapshot too.
	trash, logTrash := o.trash, o.wal.trash
	o.trash, o.wal.trash = nil, nil
	newNamed := o.encodedUppers
	if err == nil && o.named != nil {
		// While the new snapshot is being written, either may be on disk.
		for num := range newNamed {
			o.named[num] = true
		}
	}
	o.mu.Unlock()
	if err != nil {
		o.mu.Lock()
		o.trash = append(o.trash, trash...)
		o.walRebase()
		o.mu.Unlock()
		o.walDrop(logTrash)
		return err
	}
	written := false
	defer func() {
		if !written {
			o.mu.Lock()
			o.unsnapped = true
			o.trash = append(o.trash, trash...)
			o.walRebase() // the log's base is the snapshot on disk, which does not match the marks
			o.mu.Unlock()
			o.walDrop(logTrash)
			return
		}
		// Upper files retired before this snapshot are not named by it.
		for _, num := range trash {
			_ = os.Remove(o.trashPath(num))
		}
		o.removeRetired(logTrash)
		o.mu.Lock()
		o.named = newNamed
		for _, num := range trash {
			delete(o.unlinked, num)
		}
		o.mu.Unlock()
	}()
	// Upper files' names (copy-ups, creates) must be durable before a
	// snapshot that refers to them.
	if err := osfile.Sync(o.upperDir()); err != nil {
		return err
	}
	failpoint.Hit("overlay.before-snapshot")
	err = writeFileAtomic(filepath.Join(o.stateDir, snapName), b)
	if err != nil && isNoSpace(err) && o.truncateUnlinked(trash) {
		// The disk is full, maybe of files deleted since the last
		// snapshot, which keeps them until a new one is durable: give
		// their space back first and try once more.
		err = writeFileAtomic(filepath.Join(o.stateDir, snapName), b)
	}
	if err != nil {
		return err
	}
	failpoint.Hit("overlay.after-snapshot")
	written = true
	if err := o.walStart(nonce, rootID); err != nil {
		// Frames cannot be written: the next flush tries a snapshot again.
		o.mu.Lock()
		o.walPending.Store(true)
		o.mu.Unlock()
	}
	return nil
}

// truncateUnlinked empties the retired upper files among trash that were
// retired by an unlink (no name and no handle left), and reports whether
// it freed anything. The durable snapshot may still name them: a crash
// before the next snapshot brings such a file back, empty, where it was
// deleted since that snapshot (its content is what was deleted). Files
// retired by a view switch are left whole: a replay needs their content.
func (o *overlay) truncateUnlinked(trash []uint64) bool {
	o.mu.Lock()
	var nums []uint64
	for _, num := range trash {
		if o.unlinked[num] {
			nums = append(nums, num)
		}
	}
	o.mu.Unlock()
	freed := false
	for _, num := range nums {
		var st syscall.Stat_t
		if syscall.Stat(o.trashPath(num), &st) == nil && st.Blocks > 0 && os.Truncate(o.trashPath(num), 0) == nil {
			freed = true
		}
	}
	return freed
}

func sortedNames(m map[string]*inode) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// writeFileAtomic writes temp → fsync → rename → fsync dir.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		_ = os.Remove(tmp) // a partial write holds space a full disk needs
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return osfile.Sync(filepath.Dir(path))
}
