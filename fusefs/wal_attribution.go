package fusefs

import (
	"fmt"
	"slices"
	"sort"

	"github.com/acyclicfs/acyclicfs/store"
)

// Write attribution in the overlay's snapshot and write-ahead log, so
// that a daemon killed with SIGKILL loses no writer: recovery
// (RecoverCaptureAttributed) names, for each path it captures, the
// processes that changed it, as the dead daemon described them.
//
// Each log (and its base snapshot) has a writer table: a writer is
// described (DescribeWriter: pid, command, session, lease) once per log,
// when a record first names it — the snapshot's table holds the writers
// it names, and each frame appends the ones it names first. An inode's
// record carries the table indices of its writers (1-based, oldest
// first) and when the first began; a removed name (attribution.go) is a
// record of its own by path. A record replaces the one before it, so the
// log's last word on an inode or path is its current attribution state:
// when the daemon has stored a capture's attribution (WritersRecorded),
// the inodes and paths it cleared are recorded again, without writers.

// maxWALWriters bounds a log's writer table; writers past it are not
// described in the log (a crash then loses their attribution).
const maxWALWriters = 4096

// WriterInfo describes a writer for the overlay log: what the daemon
// knew of it when its first change was logged.
type WriterInfo struct {
	Ref           WriterRef
	Comm          string
	Argv          []string
	ArgvTruncated bool
	// Session is the lease owner of the process; Lease its lease id.
	Session, Lease string
	// LeaseKind, Leader and LeaseStart describe that lease (its kind,
	// its session leader's command line, its start in Unix ns).
	LeaseKind  string
	Leader     []string
	LeaseStart int64
}

// RecoveredPath is who changed one path, as a recovered overlay log
// recorded it.
type RecoveredPath struct {
	Path        string
	Writers     []WriterInfo
	First, Last int64
}

// walRemoved is a removed name's attribution state in a snapshot or log:
// its removers (writer table indices); none: cleared.
type walRemoved struct {
	Path        string
	Writers     []uint32
	First, Last int64
}

// walWriterIndex is w's index in the current log's writer table,
// describing it into the next frame (or the snapshot being encoded) if
// it is new; 0 when the table is full. Caller holds mu.
func (o *overlay) walWriterIndex(w WriterRef) uint32 {
	if i, ok := o.wal.writerIdx[w]; ok {
		return i
	}
	if len(o.wal.writerIdx) >= maxWALWriters {
		return 0
	}
	if o.wal.writerIdx == nil {
		o.wal.writerIdx = map[WriterRef]uint32{}
	}
	info := WriterInfo{Ref: w}
	if d, ok := o.walDesc[w]; ok {
		info = d
	} else if o.describe != nil {
		info = o.describe(w)
		info.Ref = w
	}
	o.wal.newWriters = append(o.wal.newWriters, info)
	i := uint32(len(o.wal.writerIdx) + 1)
	o.wal.writerIdx[w] = i
	return i
}

// walWriters are in's writers as table indices, oldest first, and when
// the first began. The indices live in o.wal.arena, which the next
// frame or snapshot reuses (walMu serialises encoding and writing), so
// that logging them allocates nothing per record. Caller holds mu and
// walMu.
func (o *overlay) walWriters(in *inode) ([]uint32, int64) {
	if in.writer.PID == 0 {
		return nil, 0
	}
	start := len(o.wal.arena)
	more := o.moreWriters[in]
	for _, w := range more {
		o.wal.arena = append(o.wal.arena, o.walWriterIndex(w))
	}
	if !slices.Contains(more, in.writer) { // a writer that came back is listed at its first change
		o.wal.arena = append(o.wal.arena, o.walWriterIndex(in.writer))
	}
	return o.wal.arena[start:len(o.wal.arena):len(o.wal.arena)], in.writerSince
}

// walRemovedRec is path's removal state for a record. Caller holds mu.
func (o *overlay) walRemovedRec(path string) walRemoved {
	r := walRemoved{Path: path}
	if x := o.removed[path]; x != nil {
		r.First, r.Last = x.first, x.last
		for _, w := range x.ws {
			r.Writers = append(r.Writers, o.walWriterIndex(w))
		}
	}
	return r
}

// walResetWriters starts the writer table of a new log (a snapshot is
// being encoded, which describes what it names). Caller holds mu.
func (o *overlay) walResetWriters() {
	o.wal.writerIdx, o.wal.newWriters, o.wal.removedDirty = nil, nil, nil
	o.wal.arena = o.wal.arena[:0]
}

// walRemovedChanged records that path's removal state changed. Caller
// holds mu.
func (o *overlay) walRemovedChanged(path string) {
	o.unsnapped = true
	if o.wal.gen == 0 {
		o.walPending.Store(true)
		return
	}
	if o.wal.removedDirty == nil {
		o.wal.removedDirty = map[string]bool{}
	}
	o.wal.removedDirty[path] = true
	o.walMarks.Add(1)
	o.walPending.Store(true)
}

// walEncodeRemoved appends the changed removal states to f. Caller
// holds mu.
func (o *overlay) walEncodeRemoved(f *walFrame) {
	paths := make([]string, 0, len(o.wal.removedDirty))
	for p := range o.wal.removedDirty {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		f.Removed = append(f.Removed, o.walRemovedRec(p))
	}
	o.wal.removedDirty = nil
}

// snapRemoved lists every removal state for a snapshot. Caller holds mu.
func (o *overlay) snapRemoved() []walRemoved {
	paths := make([]string, 0, len(o.removed))
	for p := range o.removed {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	out := make([]walRemoved, 0, len(paths))
	for _, p := range paths {
		out = append(out, o.walRemovedRec(p))
	}
	return out
}

// applyAttribution folds a frame's writer table entries and removal
// states into s (replay). Removal states replace by path.
func (s *snapshot) applyAttribution(f *walFrame, removed map[string]walRemoved) {
	s.Writers = append(s.Writers, f.Writers...)
	for _, r := range f.Removed {
		if len(r.Writers) == 0 {
			delete(removed, r.Path)
		} else {
			removed[r.Path] = r
		}
	}
}

// restoreWriters gives the overlay built from s the attribution state s
// records. Indices outside the table are ignored: attribution never
// fails a recovery.
func (o *overlay) restoreWriters(s *snapshot, byNum map[uint64]*inode) {
	ref := func(i uint32) (WriterRef, bool) {
		if i == 0 || int(i) > len(s.Writers) {
			return WriterRef{}, false
		}
		d := s.Writers[i-1]
		if d.Ref.PID == 0 {
			return WriterRef{}, false
		}
		if o.walDesc == nil {
			o.walDesc = map[WriterRef]WriterInfo{}
		}
		o.walDesc[d.Ref] = d
		return d.Ref, true
	}
	refs := func(idx []uint32) []WriterRef {
		var out []WriterRef
		for _, i := range idx {
			if w, ok := ref(i); ok && !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
		return out
	}
	for i := range s.Inodes {
		r := &s.Inodes[i]
		in := byNum[r.Num]
		ws := refs(r.Writers)
		if in == nil || len(ws) == 0 {
			continue
		}
		in.writer, in.writerSince = ws[len(ws)-1], r.WriterSince
		if len(ws) > 1 {
			if o.moreWriters == nil {
				o.moreWriters = map[*inode][]WriterRef{}
			}
			o.moreWriters[in] = ws[:len(ws)-1]
		}
	}
	for _, r := range s.Removed {
		if ws := refs(r.Writers); len(ws) > 0 {
			if o.removed == nil {
				o.removed = map[string]*removedName{}
			}
			o.removed[r.Path] = &removedName{ws: ws, first: r.First, last: r.Last}
		}
	}
}

// describeRecovered resolves writers to what the log described.
func (o *overlay) describeRecovered(ws []WriterRef) []WriterInfo {
	out := make([]WriterInfo, 0, len(ws))
	for _, w := range ws {
		d, ok := o.walDesc[w]
		if !ok {
			d = WriterInfo{Ref: w}
		}
		out = append(out, d)
	}
	return out
}

// RecoverCaptureAttributed is RecoverCaptureLinks that also returns who
// changed which path, as the overlay's snapshot and log recorded it
// (wal_attribution.go): the writers the dead mount had not yet seen
// recorded (WritersRecorded), sorted by path; none when nothing changed.
func RecoverCaptureAttributed(stateDir string, objects Objects, root store.ID, links [][]string) (store.ID, [][]string, bool, []string, []RecoveredPath, error) {
	if objects == nil {
		return store.ID{}, nil, false, nil, nil, ErrNoObjects
	}
	ov, err := openOverlay(stateDir, objects, root, links)
	if err != nil {
		return store.ID{}, nil, false, nil, nil, fmt.Errorf("recover capture: %w", err)
	}
	ov.mu.Lock()
	var ws []PathWriters
	ov.takeWriters(ov.root, "", &ws)
	for p, r := range ov.removed {
		ws = append(ws, PathWriters{Path: p, Writers: r.ws, First: r.first, Last: r.last})
	}
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].Path < ws[j].Path })
	ws = mergeWriters(ws)
	paths := make([]RecoveredPath, 0, len(ws))
	for _, w := range ws {
		paths = append(paths, RecoveredPath{Path: w.Path, Writers: ov.describeRecovered(w.Writers), First: w.First, Last: w.Last})
	}
	ov.mu.Unlock()
	id, got, _, err := ov.capture()
	if err != nil {
		return store.ID{}, nil, false, ov.recovery, nil, fmt.Errorf("recover capture: %w", err)
	}
	changed := id != root || !store.EqualLinks(got, links)
	if !changed {
		paths = nil
	}
	return id, got, changed, ov.recovery, paths, nil
}
