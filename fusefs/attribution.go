package fusefs

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Write attribution: which processes changed which paths since the last
// capture. The hot path pays, per change of an inode (not per read,
// lookup or data write), one compare (and, for a new writer, a field
// write), and at a process's first change of an inode since the last
// capture one ask of the exec watcher (ExecWatcher, a pread of
// /proc/PID/comm: fusefs/sessions; caller): the inode remembers its latest writer
// (inode.writer: pid and exec generation); an earlier, different writer
// is kept aside in overlay.moreWriters, which only a second writer of
// one inode touches. TakeWriters walks the dirty part of the table
// (subSeq) at capture time.
//
// A name removed (unlink, rmdir, the old name of a rename, a name a
// rename replaced) is not reachable from the table any more: its
// removal is kept by path in overlay.removed, which only those requests
// touch, and only for names the last capture (or the lower tree) had —
// a name made and removed since then is no change.

// PathWriters names the processes that changed one path since the last
// TakeWriters, oldest first, and the first and last change time (ns
// since the epoch).
type PathWriters struct {
	Path        string
	Writers     []WriterRef
	First, Last int64
}

// WriterRef names one writer: its pid (FUSE callers: thread ids) and the
// exec generation of the program it ran when it wrote (ExecWatcher; 0
// without one).
type WriterRef struct {
	PID, Exec uint32
}

// ExecWatcher is what an Admitter may also be: it tells which program a
// pid runs, as a generation counting the execs it noticed, so that a
// process that execs is attributed with the program that made each
// change. ExecGen is called at most once per request that changes
// something, and not when the inode changed already names the pid.
type ExecWatcher interface {
	ExecGen(pid uint32) uint32
}

// caller is the process of one request that changes something, as a
// writer: its exec generation is asked of the exec watcher at most once
// per request, and only when a change records it — not when the inode
// changed already names this pid (the exec check is made at a process's
// first change of an inode since the last capture), nor for the removal
// of a name made since then.
type caller struct {
	o     *overlay
	pid   uint32 // 0: unknown, or attribution off
	w     WriterRef
	asked bool
}

// callerOf is the caller of the request in ctx.
func (o *overlay) callerOf(ctx context.Context) caller {
	return o.pidCaller(callerPID(ctx))
}

// pidCaller is pid as a caller; pid 0 when attribution is off.
func (o *overlay) pidCaller(pid uint32) caller {
	if o.noAttr {
		pid = 0
	}
	return caller{o: o, pid: pid}
}

// writerFor is c as the writer of a change of in (nil: of no inode).
// Caller holds mu.
func (c *caller) writerFor(in *inode) WriterRef {
	switch {
	case c.pid == 0:
		return WriterRef{}
	case c.asked:
		return c.w
	case in != nil && in.writer.PID == c.pid:
		return in.writer
	}
	c.w, c.asked = c.o.writerOf(c.pid), true
	return c.w
}

// writerOf is pid as a writer now.
func (o *overlay) writerOf(pid uint32) WriterRef {
	if pid == 0 || o.execs == nil {
		return WriterRef{PID: pid}
	}
	return WriterRef{PID: pid, Exec: o.execs.ExecGen(pid)}
}

// callerPID is the pid of the request in ctx; 0 when unknown.
func callerPID(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid
	}
	return 0
}

// noteWriter records c as in's latest writer. Caller holds mu.
func (o *overlay) noteWriter(in *inode, c *caller) {
	if c.pid == 0 {
		return
	}
	w := c.writerFor(in)
	if o.taken != nil {
		if t, ok := o.taken[in]; ok {
			// A change after TakeWriters: WritersRecorded must not clear w.
			if i := slices.Index(t, w); i >= 0 {
				o.taken[in] = slices.Delete(slices.Clone(t), i, i+1)
			}
		}
	}
	if in.writer == w {
		return
	}
	o.unsnapped = true
	o.walMark(in, walFull) // the log records the inode's writers
	if in.writer.PID != 0 {
		if o.moreWriters == nil {
			o.moreWriters = map[*inode][]WriterRef{}
		}
		if prev := o.moreWriters[in]; !slices.Contains(prev, in.writer) {
			o.moreWriters[in] = append(prev, in.writer)
		}
	} else {
		in.writerSince = time.Now().UnixNano()
	}
	in.writer = w
}

// removedName records who removed one path of the captured base.
type removedName struct {
	ws          []WriterRef
	first, last int64
}

// noteRemoved records that cl removes d/name, which names c; call it
// before the name changes. Caller holds mu.
func (o *overlay) noteRemoved(d *inode, name string, c *inode, cl *caller) {
	if cl.pid == 0 || c.linkSeq > o.capSeq {
		return // a name given since the last capture: its removal undoes it
	}
	w := cl.writerFor(nil)
	dp, ok := o.dirPath(d)
	if !ok {
		return
	}
	p := joinPath(dp, name)
	now := time.Now().UnixNano()
	if o.removed == nil {
		o.removed = map[string]*removedName{}
	}
	o.walRemovedChanged(p)
	if t, ok := o.takenRemoved[p]; ok {
		if i := slices.Index(t, w); i >= 0 {
			o.takenRemoved[p] = slices.Delete(slices.Clone(t), i, i+1)
		}
	}
	r := o.removed[p]
	if r == nil {
		o.removed[p] = &removedName{ws: []WriterRef{w}, first: now, last: now}
		return
	}
	if !slices.Contains(r.ws, w) {
		r.ws = append(r.ws, w)
	}
	r.last = now
}

// TakeWriters returns who changed which path since the last recorded
// capture, sorted by path, one entry per path. A path is named by each of
// its names; a removed name is reported under its own path (and as a
// change of its directory). What it reports stays (and stays in the
// overlay log, for a recovery) until WritersRecorded: a second call
// before that reports it again, with any change made since.
func (m *Mount) TakeWriters() []PathWriters {
	o := m.ov
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []PathWriters
	o.taken, o.takenRemoved = map[*inode][]WriterRef{}, map[string][]WriterRef{}
	o.takeWriters(o.root, "", &out)
	for p, r := range o.removed {
		out = append(out, PathWriters{Path: p, Writers: slices.Clone(r.ws), First: r.first, Last: r.last})
		o.takenRemoved[p] = slices.Clone(r.ws)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return mergeWriters(out)
}

// WritersRecorded forgets what the last TakeWriters reported (the daemon
// stored it with the capture, or the capture changed nothing): the next
// TakeWriters reports only changes made since. The overlay log records
// the cleared state before it returns, so that a recovery does not
// attribute the same changes again.
func (m *Mount) WritersRecorded() {
	o := m.ov
	o.mu.Lock()
	before := o.walMarks.Load()
	for in, ws := range o.taken {
		all := append(slices.Clone(o.moreWriters[in]), in.writer)
		all = slices.DeleteFunc(all, func(w WriterRef) bool { return w.PID == 0 || slices.Contains(ws, w) })
		if len(all) == 0 {
			in.writer, in.writerSince = WriterRef{}, 0
			delete(o.moreWriters, in)
		} else {
			in.writer = all[len(all)-1]
			if len(all) > 1 {
				o.moreWriters[in] = all[:len(all)-1]
			} else {
				delete(o.moreWriters, in)
			}
		}
		o.unsnapped = true
		o.walMark(in, walFull)
	}
	for p, ws := range o.takenRemoved {
		if r := o.removed[p]; r != nil {
			r.ws = slices.DeleteFunc(r.ws, func(w WriterRef) bool { return slices.Contains(ws, w) })
			if len(r.ws) == 0 {
				delete(o.removed, p)
			}
		}
		o.walRemovedChanged(p)
	}
	o.taken, o.takenRemoved = nil, nil
	// TakeWriters reports the inodes it finds from the root: the earlier
	// writers of one that is gone (removed, or replaced by a view switch,
	// and not open) are never reported, and were kept, with the inode,
	// for the mount's life.
	for in := range o.moreWriters {
		if in.opens == 0 && !o.attached(in) {
			delete(o.moreWriters, in)
		}
	}
	o.mu.Unlock()
	if m.dirs != nil && m.dirs.flush != nil {
		m.dirs.flush(before)
	}
}

// mergeWriters folds the entries of one path (sorted by path) into one:
// its writers in order of first appearance, the earliest first and latest
// last change.
func mergeWriters(ws []PathWriters) []PathWriters {
	out := ws[:0]
	for _, w := range ws {
		if n := len(out); n > 0 && out[n-1].Path == w.Path {
			p := &out[n-1]
			for _, x := range w.Writers {
				if !slices.Contains(p.Writers, x) {
					p.Writers = append(slices.Clip(p.Writers), x)
				}
			}
			if w.First != 0 && (p.First == 0 || w.First < p.First) {
				p.First = w.First
			}
			p.Last = max(p.Last, w.Last)
			continue
		}
		out = append(out, w)
	}
	return out
}

// takeWriters collects the writers of d and below into out and o.taken.
// Caller holds mu.
func (o *overlay) takeWriters(d *inode, path string, out *[]PathWriters) {
	if d.writer.PID != 0 {
		p := path
		if p == "" {
			p = "."
		}
		o.emitWriters(d, []string{p}, out)
	}
	for name, c := range d.children {
		p := joinPath(path, name)
		if c.isDir() {
			if c.subSeq != 0 || c.writer.PID != 0 {
				o.takeWriters(c, p, out)
			}
			continue
		}
		if c.writer.PID == 0 {
			continue
		}
		if len(c.links) > 1 {
			if c.links[0].dir != d || c.links[0].name != name {
				continue // reported once, under all its names, from its first
			}
			o.emitWriters(c, o.pathsOf(c), out)
			continue
		}
		o.emitWriters(c, []string{p}, out)
	}
}

// writersOf lists in's writers in order of their first change: the
// earlier ones (a writer that came back after another is there already),
// then the latest. Caller holds mu.
func (o *overlay) writersOf(in *inode) []WriterRef {
	ws := slices.Clone(o.moreWriters[in])
	if !slices.Contains(ws, in.writer) {
		ws = append(ws, in.writer)
	}
	return ws
}

// emitWriters appends in's writers under each of paths. Caller holds mu.
func (o *overlay) emitWriters(in *inode, paths []string, out *[]PathWriters) {
	ws := o.writersOf(in)
	last := max(in.ctime, in.mtime, in.writerSince)
	for _, p := range paths {
		*out = append(*out, PathWriters{Path: p, Writers: ws, First: in.writerSince, Last: last})
	}
	if o.taken != nil {
		o.taken[in] = slices.Clone(ws)
	}
}

// attached reports whether in is reachable from the root by one of its
// names. Caller holds mu.
func (o *overlay) attached(in *inode) bool {
	for in != o.root {
		up := (*inode)(nil)
		for _, l := range in.links {
			if l.dir != nil && l.dir.children[l.name] == in {
				up = l.dir
				break
			}
		}
		if up == nil {
			return false
		}
		in = up
	}
	return true
}
