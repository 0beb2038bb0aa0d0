package fusefs

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
	"github.com/acyclicfs/acyclicfs/store"
)

// The write-ahead log (overlay.wal) records every change of the table as
// it happens, on top of the last snapshot (its base): a request that
// changed names or metadata is answered only after a frame with the new
// state of what it changed has been written to the log (write(2), not
// fsync). A daemon killed with SIGKILL therefore loses nothing a tool saw
// completed, sync(1) or not: the kernel keeps what was written, and the
// next mount replays the snapshot, then the log's frames. The kernel sends
// FUSE_SYNCFS only to virtiofs servers (fc->sync_fs), so sync(2) and
// syncfs(2) never reach the daemon; the log is what makes them keep their
// promise against a daemon crash. Against power loss sync(2) flushes the
// state directory's file system, log included; syncfs(2) on the mount does
// not (nothing reaches the daemon), and fsync of a file or directory in the
// mount is what is durable there, as before.
//
// A frame holds records of inodes (whole, or for a directory already
// listed in the base or log only the names that changed, or only the
// subtree sequence number), plus the table's counters, under one CRC: a
// frame applies whole or not at all. A snapshot starts a new log (the
// snapshot names it by a random nonce); anything that changes the table
// in bulk (a view switch, the end of a capture) asks for a snapshot before
// the next frame (walGen = 0). The end of a capture does not: what it
// changes that a snapshot keeps (the captured directories' tree IDs, the
// capture's sequence number) goes into the next frame.

const (
	walName = "overlay.wal"
	// walMagic starts a log whose frames are encoded by hand
	// (wal_codec.go). Version 2 logs (walMagicV2, gob frames from one
	// encoder per log) may carry writer records (wal_attribution.go);
	// version 1 logs (walMagicV1) still replay: gob leaves the fields they
	// lack empty. Both replay as before; a mount writes version 3.
	walMagic   = "ACYFSWL3"
	walMagicV2 = "ACYFSWL2"
	walMagicV1 = "ACYFSWL1"
	// walCompact is the log size above which the next flush writes a
	// snapshot instead (which starts an empty log).
	walCompact = 64 << 20
)

const (
	walFull  = 1 // the whole inode (a directory with its listing if loaded)
	walSub   = 2 // SubSeq only
	walNames = 3 // a listed directory: its attributes and changed names
)

type walRec struct {
	Kind  uint8
	Inode snapInode
	Names []snapChild // walNames: Num 0 = the name was removed
}

type walFrame struct {
	NextIno, Seq uint64
	// CapSeq is the table's sequence number at the last capture (0:
	// unchanged, as in frames from before the field: a capture's end then
	// started a new snapshot).
	CapSeq uint64
	Recs   []walRec
	// Writers appends to the log's writer table; Removed sets removed
	// names' attribution (wal_attribution.go).
	Writers []WriterInfo
	Removed []walRemoved
}

// walRetired is an upper file only the log names, retired: to delete
// once a frame is written, from the trash or (inPlace) from upper/.
type walRetired struct {
	num     uint64
	inPlace bool
}

// path is where r waits for its frame.
func (o *overlay) retiredPath(r walRetired) string {
	if r.inPlace {
		return o.upperPath(r.num)
	}
	return o.trashPath(r.num)
}

// removeRetired deletes retired upper files.
func (o *overlay) removeRetired(rs []walRetired) {
	for _, r := range rs {
		_ = os.Remove(o.retiredPath(r))
	}
}

// walState is the overlay's log bookkeeping, guarded by overlay.mu.
type walState struct {
	// gen numbers the current base (the last snapshot encoded by this
	// process); 0: no base, the next flush writes a snapshot.
	gen   uint64
	nonce uint64 // the base snapshot's nonce, which the log file carries
	seq   uint64 // last gen handed out
	marks map[*inode]uint8
	names map[*inode]map[string]bool
	// named lists the upper files frames of the current log name (they
	// must outlive an unlink until a frame recording it is written);
	// trash holds the ones retired since the last frame, deleted once the
	// next frame is written.
	named map[uint64]bool
	trash []walRetired
	size  int64 // bytes in the log file
	// writerIdx is the log's writer table (wal_attribution.go);
	// newWriters the entries the next frame appends; removedDirty the
	// removed names whose attribution changed since the last frame.
	writerIdx    map[WriterRef]uint32
	newWriters   []WriterInfo
	removedDirty map[string]bool
	// arena holds the writer indices of the frame or snapshot being
	// encoded (walWriters). Guarded by mu and walMu.
	arena []uint32
	// frame, ins and listed are walEncode's, reused from frame to frame
	// (a frame is written before every request that changed the table
	// is answered, and their allocation was most of its encoding).
	// Guarded by mu and walMu: the frame is read by walWrite, which runs
	// under walMu.
	frame       walFrame
	ins, listed []*inode
}

// walScratchMax bounds what the reused frame keeps between frames: one
// huge frame (a directory listed in full) does not pin its records.
const walScratchMax = 1024

// walKeepMarks is the largest mark set walEncode clears for reuse.
const walKeepMarks = 64

// walLog is the open log file, guarded by overlay.walMu.
type walLog struct {
	f   *os.File
	buf []byte // the frame being written, reused
	ok  bool   // f is open and nothing failed since; written under walMu and mu
}

// walMark records that in's state changed. Caller holds mu.
func (o *overlay) walMark(in *inode, kind uint8) {
	o.walMarks.Add(1)
	if o.wal.gen == 0 {
		o.walPending.Store(true) // the next flush writes a snapshot
		return
	}
	if o.wal.marks == nil {
		o.wal.marks = map[*inode]uint8{}
	}
	if kind == walFull || o.wal.marks[in] == 0 {
		o.wal.marks[in] = kind
	}
	o.walPending.Store(true)
}

// walName records that d's entry name changed. Caller holds mu.
func (o *overlay) walName(d *inode, name string) {
	if o.wal.gen == 0 {
		o.walMark(d, walFull)
		return
	}
	if o.wal.names == nil {
		o.wal.names = map[*inode]map[string]bool{}
	}
	m := o.wal.names[d]
	if m == nil {
		m = map[string]bool{}
		o.wal.names[d] = m
	}
	m[name] = true
	o.walMark(d, walFull)
}

// walRebase asks for a snapshot before the next frame: the table changed
// in a way the log does not record. Caller holds mu.
func (o *overlay) walRebase() {
	o.wal.gen = 0
	o.wal.marks, o.wal.names, o.wal.removedDirty = nil, nil, nil
	o.walPending.Store(true)
}

// snapRecord is in's snapshot record; a loaded directory's listing is
// included when withKids. Caller holds mu.
func snapRecord(in *inode, withKids bool) snapInode {
	r := snapInode{Num: in.num, Mode: in.mode, UID: in.uid, GID: in.gid,
		Atime: in.atime, Mtime: in.mtime, Ctime: in.ctime, Lower: in.lower, HasLower: in.hasLower,
		Upper: in.upper, Target: in.target, Xattrs: in.xattrs, Seq: in.seq, SubSeq: in.subSeq,
		LinkSeq: in.linkSeq, CapTree: in.capTree}
	if withKids && in.isDir() && in.children != nil {
		names := sortedNames(in.children)
		r.Loaded = true
		r.Children = make([]snapChild, 0, len(names))
		for _, name := range names {
			r.Children = append(r.Children, snapChild{Name: name, Num: in.children[name].num})
		}
	}
	return r
}

// walListable reports whether in's record lists its children: a loaded
// directory with a change below (as encodeSnapshot decides).
func walListable(in *inode) bool { return in.isDir() && in.children != nil && in.subSeq != 0 }

// walEncode turns the marks into a frame and returns it with the upper
// files to delete once it is written. Caller holds mu; o.wal.gen != 0.
func (o *overlay) walEncode() (*walFrame, []walRetired) {
	f := &o.wal.frame // the last frame is written: walMu is held
	recs := f.Recs
	clear(recs)
	if cap(recs) > walScratchMax {
		recs = nil
	}
	*f = walFrame{NextIno: o.nextIno, Seq: o.seq, CapSeq: o.capSeq, Recs: recs[:0]}
	o.wal.arena = o.wal.arena[:0]
	listed := o.wal.listed[:0]
	full := func(in *inode) {
		l := walListable(in)
		r := walRec{Kind: walFull, Inode: snapRecord(in, l)}
		r.Inode.Writers, r.Inode.WriterSince = o.walWriters(in)
		f.Recs = append(f.Recs, r)
		in.walGen, in.walListed = o.wal.gen, l
		if in.upper {
			o.wal.named[in.num] = true
		}
		if l {
			listed = append(listed, in)
		}
	}
	ins := o.wal.ins[:0]
	for in := range o.wal.marks {
		ins = append(ins, in)
	}
	slices.SortFunc(ins, func(a, b *inode) int { return cmp.Compare(a.num, b.num) })
	for _, in := range ins {
		switch {
		case in.walGen != o.wal.gen || walListable(in) && !in.walListed:
			full(in)
		case o.wal.marks[in] == walSub:
			f.Recs = append(f.Recs, walRec{Kind: walSub, Inode: snapInode{Num: in.num, SubSeq: in.subSeq}})
		case in.walListed:
			r := walRec{Kind: walNames, Inode: snapRecord(in, false)}
			r.Inode.Writers, r.Inode.WriterSince = o.walWriters(in)
			changed := o.wal.names[in]
			names := make([]string, 0, len(changed))
			for name := range changed {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				var num uint64
				if c := in.children[name]; c != nil {
					num = c.num
					if c.walGen != o.wal.gen {
						full(c)
					}
				}
				r.Names = append(r.Names, snapChild{Name: name, Num: num})
			}
			f.Recs = append(f.Recs, r)
		default:
			full(in)
		}
	}
	// Every child of a directory listed in full needs a record.
	for len(listed) > 0 {
		d := listed[len(listed)-1]
		listed = listed[:len(listed)-1]
		for _, name := range sortedNames(d.children) {
			if c := d.children[name]; c.walGen != o.wal.gen {
				full(c)
			}
		}
	}
	clear(ins)
	clear(listed[:cap(listed)])
	if cap(ins) <= walScratchMax {
		o.wal.ins = ins[:0]
	}
	if cap(listed) <= walScratchMax {
		o.wal.listed = listed[:0]
	}
	// A small mark set is kept for the next frame (clearing costs its
	// capacity; a big one is dropped instead).
	if len(o.wal.marks) <= walKeepMarks {
		clear(o.wal.marks)
	} else {
		o.wal.marks = nil
	}
	if len(o.wal.names) <= walKeepMarks {
		clear(o.wal.names)
	} else {
		o.wal.names = nil
	}
	o.walEncodeRemoved(f)
	f.Writers, o.wal.newWriters = o.wal.newWriters, nil
	trash := o.wal.trash
	o.wal.trash = nil
	return f, trash
}

// walFlush writes a frame with the changes since the last one, or a
// snapshot when there is no base (or the log is too large). A request
// that may have changed the table calls it before answering, with the
// mark count (walMarks) it read before it ran: when nothing was marked
// since and nothing waits, there is nothing to do. When another flush
// already took the changes, it waits until that flush has written them.
func (o *overlay) walFlush(snapMu interface {
	Lock()
	Unlock()
}, before uint64) error {
	if o.walMarks.Load() == before && !o.walPending.Load() {
		return nil
	}
	for {
		if !o.walPending.Load() {
			// Whoever cleared it holds walMu until its frame or
			// snapshot is written: wait for that.
			o.walMu.Lock()
			//lint:ignore SA2001 a barrier: the lock is held while a frame is written
			o.walMu.Unlock()
			return nil
		}
		o.mu.Lock()
		snap := o.walNeedsSnapshot()
		o.mu.Unlock()
		if snap {
			return o.writeSnapshot(snapMu)
		}
		o.walMu.Lock()
		o.mu.Lock()
		if o.walNeedsSnapshot() {
			o.mu.Unlock()
			o.walMu.Unlock()
			continue
		}
		o.walPending.Store(false)
		if len(o.wal.marks) == 0 && len(o.wal.trash) == 0 && len(o.wal.removedDirty) == 0 {
			o.mu.Unlock()
			o.walMu.Unlock()
			return nil
		}
		f, trash := o.walEncode()
		o.mu.Unlock()
		err := o.walWrite(f)
		if err != nil {
			// The log stops here (a full disk): the next flush writes a
			// snapshot.
			o.mu.Lock()
			o.walPending.Store(true)
			o.mu.Unlock()
			o.walDrop(trash)
			o.walMu.Unlock()
			return err
		}
		o.walMu.Unlock()
		o.removeRetired(trash)
		return nil
	}
}

// walDrop empties the log when it cannot go on (a frame or a snapshot
// failed to write, as on a full disk): recovery then falls back to the
// snapshot, as without a log, and the upper files only the log named —
// retired ones in trash included — need not be kept for it: rm gives the
// space back at once, which a full disk needs. Truncating needs no space.
// Caller holds walMu, not mu.
func (o *overlay) walDrop(trash []walRetired) {
	if l := &o.walLog; l.f != nil {
		_ = l.f.Truncate(int64(len(walMagic) + 8 + len(store.ID{})))
	}
	o.mu.Lock()
	o.walLog.ok = false
	o.wal.named = map[uint64]bool{}
	o.wal.size = 0
	o.mu.Unlock()
	o.removeRetired(trash)
}

// walNeedsSnapshot reports whether the next flush must write a snapshot.
// Caller holds mu.
func (o *overlay) walNeedsSnapshot() bool {
	return o.wal.gen == 0 || o.wal.size > walCompact || !o.walLog.ok
}

// walWrite appends one frame: length, CRC-32C, the frame's encoding
// (wal_codec.go). Caller holds walMu.
func (o *overlay) walWrite(f *walFrame) error {
	l := &o.walLog
	b := appendWALFrame(append(l.buf[:0], make([]byte, 8)...), f)
	if cap(b) <= 1<<20 {
		l.buf = b // keep the buffer unless one huge frame grew it
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-8))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:], crcTable()))
	if _, err := l.f.Write(b); err != nil {
		return fmt.Errorf("overlay log: %w", err)
	}
	o.mu.Lock()
	o.wal.size += int64(len(b))
	o.mu.Unlock()
	return nil
}

// walStart begins the log of a snapshot with the given nonce, which is
// now on disk, or (nonce 0) of a fresh overlay on root with no snapshot.
// Caller holds walMu.
func (o *overlay) walStart(nonce uint64, root store.ID) error {
	l := &o.walLog
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	o.mu.Lock()
	l.ok = false
	o.mu.Unlock()
	path := filepath.Join(o.stateDir, walName)
	tmp := path + ".tmp"
	f, err := osfile.Open(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("overlay log: %w", err)
	}
	hdr := binary.LittleEndian.AppendUint64([]byte(walMagic), nonce)
	hdr = append(hdr, root[:]...)
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		return fmt.Errorf("overlay log: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return fmt.Errorf("overlay log: %w", err)
	}
	l.f = f
	o.mu.Lock()
	l.ok = true
	o.mu.Unlock()
	return nil
}

func newNonce() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1 // never 0 (no log)
}

// readWAL returns the frames of stateDir's log that belong to the
// snapshot with nonce (0: the log of a fresh overlay, whose root it also
// returns); a torn or corrupt frame ends the log.
func readWAL(stateDir string, nonce uint64) ([]walFrame, store.ID, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, walName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, store.ID{}, nil
	}
	if err != nil {
		return nil, store.ID{}, fmt.Errorf("read overlay log: %w", err)
	}
	frames, root := decodeWAL(b, nonce)
	return frames, root, nil
}

// decodeWAL parses a log's bytes: the frames up to the first that is
// incomplete, fails its checksum or does not decode, and the root its
// header names.
func decodeWAL(b []byte, nonce uint64) ([]walFrame, store.ID) {
	var root store.ID
	hdr := len(walMagic) + 8 + len(root)
	if len(b) < hdr || binary.LittleEndian.Uint64(b[len(walMagic):]) != nonce {
		return nil, root
	}
	magic := string(b[:len(walMagic)])
	if magic != walMagic && magic != walMagicV2 && magic != walMagicV1 {
		return nil, root
	}
	copy(root[:], b[len(walMagic)+8:])
	b = b[hdr:]
	if magic == walMagic {
		return decodeWALFrames(b), root
	}
	var stream bytes.Buffer
	dec := gob.NewDecoder(&stream)
	var frames []walFrame
	for len(b) >= 8 {
		n := int(binary.LittleEndian.Uint32(b))
		if n > len(b)-8 || crc32.Checksum(b[8:8+n], crcTable()) != binary.LittleEndian.Uint32(b[4:]) {
			break
		}
		stream.Write(b[8 : 8+n])
		var f walFrame
		if err := dec.Decode(&f); err != nil || stream.Len() != 0 {
			break
		}
		frames = append(frames, f)
		b = b[8+n:]
	}
	return frames, root
}

// decodeWALFrames parses the frames of a version 3 log after its header,
// up to the first that is incomplete, fails its checksum or does not
// decode.
func decodeWALFrames(b []byte) []walFrame {
	var frames []walFrame
	for len(b) >= 8 {
		n := int(binary.LittleEndian.Uint32(b))
		if n > len(b)-8 || crc32.Checksum(b[8:8+n], crcTable()) != binary.LittleEndian.Uint32(b[4:]) {
			break
		}
		f, err := decodeWALFrame(b[8 : 8+n])
		if err != nil {
			break
		}
		frames = append(frames, f)
		b = b[8+n:]
	}
	return frames
}

// walBegin starts the log of a fresh overlay (no snapshot on disk): the
// first changes of a mount append frames instead of writing a snapshot.
// Called before the overlay is shared.
func (o *overlay) walBegin() error {
	o.wal.seq++
	o.wal.gen, o.wal.nonce = o.wal.seq, 0
	o.wal.named = map[uint64]bool{}
	o.walResetWriters()
	o.root.walGen, o.root.walListed = o.wal.gen, false
	if err := o.walStart(0, o.rootID); err != nil {
		o.wal.gen = 0
		return err
	}
	return nil
}

// applyWAL applies frames to a decoded snapshot: records replace inodes,
// name records edit listings, and the result keeps only what the root
// reaches (an unlinked inode's record stays behind in the log).
func (s *snapshot) applyWAL(frames []walFrame) error {
	if len(frames) == 0 {
		return nil
	}
	byNum := make(map[uint64]*snapInode, len(s.Inodes))
	for i := range s.Inodes {
		byNum[s.Inodes[i].Num] = &s.Inodes[i]
	}
	kids := map[uint64]map[string]uint64{} // listings edited by name
	removed := make(map[string]walRemoved, len(s.Removed))
	for _, r := range s.Removed {
		removed[r.Path] = r
	}
	listing := func(r *snapInode) map[string]uint64 {
		m := kids[r.Num]
		if m == nil {
			m = make(map[string]uint64, len(r.Children))
			for _, c := range r.Children {
				m[c.Name] = c.Num
			}
			kids[r.Num] = m
		}
		return m
	}
	for _, f := range frames {
		for i := range f.Recs {
			rec := &f.Recs[i]
			r := rec.Inode
			switch rec.Kind {
			case walFull:
				delete(kids, r.Num)
				byNum[r.Num] = &r
			case walSub:
				old := byNum[r.Num]
				if old == nil {
					return fmt.Errorf("%w: log updates unknown inode %d", ErrBadSnapshot, r.Num)
				}
				old.SubSeq = r.SubSeq
			case walNames:
				old := byNum[r.Num]
				if old == nil || !old.Loaded {
					return fmt.Errorf("%w: log renames in unlisted directory %d", ErrBadSnapshot, r.Num)
				}
				m := listing(old)
				r.Loaded, r.Children = true, nil
				byNum[r.Num] = &r
				for _, c := range rec.Names {
					if c.Num == 0 {
						delete(m, c.Name)
					} else {
						m[c.Name] = c.Num
					}
				}
			default:
				return fmt.Errorf("%w: log record kind %d", ErrBadSnapshot, rec.Kind)
			}
		}
		s.NextIno, s.Seq = f.NextIno, f.Seq
		if f.CapSeq != 0 {
			s.CapSeq = f.CapSeq
		}
		s.applyAttribution(&f, removed)
	}
	s.Removed = s.Removed[:0:0]
	for _, r := range removed {
		s.Removed = append(s.Removed, r)
	}
	sort.Slice(s.Removed, func(i, j int) bool { return s.Removed[i].Path < s.Removed[j].Path })
	for num, m := range kids {
		r := byNum[num]
		r.Children = r.Children[:0:0]
		for name, c := range m {
			r.Children = append(r.Children, snapChild{Name: name, Num: c})
		}
		sort.Slice(r.Children, func(i, j int) bool { return r.Children[i].Name < r.Children[j].Name })
	}
	root := byNum[1]
	if root == nil {
		return fmt.Errorf("%w: no root", ErrBadSnapshot)
	}
	out := []snapInode{*root}
	seen := map[uint64]bool{1: true}
	for i := 0; i < len(out); i++ {
		for _, c := range out[i].Children {
			if seen[c.Num] {
				continue // build reports a directory linked twice
			}
			r := byNum[c.Num]
			if r == nil {
				return fmt.Errorf("%w: log names unknown inode %d", ErrBadSnapshot, c.Num)
			}
			seen[c.Num] = true
			out = append(out, *r)
		}
	}
	s.Inodes = out
	return nil
}

// strayReport describes the upper files a recovery deleted because no
// record named them: data written after the last record of its file.
type strayReport struct {
	Files int
	Bytes int64
}

func (r strayReport) String() string {
	files := " upper files ("
	if r.Files == 1 {
		files = " upper file ("
	}
	return strconv.Itoa(r.Files) + files + strconv.FormatInt(r.Bytes, 10) + " bytes)"
}
