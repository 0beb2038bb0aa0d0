package fusefs

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Write attribution: which processes changed which paths since the last
// capture. The hot path pays one compare (and, for a new writer, a field
// write) per change of an inode: the inode remembers its latest writer's
// pid (inode.writer); an earlier, different writer is kept aside in
// overlay.moreWriters, which only a second writer of one inode touches.
// TakeWriters walks the dirty part of the table (subSeq) at capture time.

// PathWriters names the processes that changed one path since the last
// TakeWriters: their pids (FUSE callers: thread ids), oldest first, and
// the first and last change time (ns since the epoch).
type PathWriters struct {
	Path        string
	PIDs        []uint32
	First, Last int64
}

// callerPID is the pid of the request in ctx; 0 when unknown.
func callerPID(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid
	}
	return 0
}

// noteWriter records pid as in's latest writer. Caller holds mu.
func (o *overlay) noteWriter(in *inode, pid uint32) {
	if pid == 0 || in.writer == pid {
		return
	}
	if in.writer != 0 {
		if o.moreWriters == nil {
			o.moreWriters = map[*inode][]uint32{}
		}
		if prev := o.moreWriters[in]; !slices.Contains(prev, in.writer) {
			o.moreWriters[in] = append(prev, in.writer)
		}
	} else {
		in.writerSince = time.Now().UnixNano()
	}
	in.writer = pid
}

// TakeWriters returns who changed which path since the last call, sorted
// by path, and forgets it: a path changed again later is reported by the
// next call only. A path is named by each of its names; changes to
// removed files are reported as changes of their directory.
func (m *Mount) TakeWriters() []PathWriters {
	o := m.ov
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []PathWriters
	o.takeWriters(o.root, "", &out)
	o.moreWriters = nil
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// takeWriters collects and clears the writers of d and below. Caller
// holds mu.
func (o *overlay) takeWriters(d *inode, path string, out *[]PathWriters) {
	if d.writer != 0 {
		p := path
		if p == "" {
			p = "."
		}
		o.emitWriters(d, []string{p}, out)
	}
	for name, c := range d.children {
		p := joinPath(path, name)
		if c.isDir() {
			if c.subSeq != 0 || c.writer != 0 {
				o.takeWriters(c, p, out)
			}
			continue
		}
		if c.writer == 0 {
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

// emitWriters appends in's writers under each of paths and clears them.
// Caller holds mu.
func (o *overlay) emitWriters(in *inode, paths []string, out *[]PathWriters) {
	pids := append(slices.Clone(o.moreWriters[in]), in.writer)
	last := max(in.ctime, in.mtime, in.writerSince)
	for _, p := range paths {
		*out = append(*out, PathWriters{Path: p, PIDs: pids, First: in.writerSince, Last: last})
	}
	in.writer, in.writerSince = 0, 0
}
