package fusefs

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
	"strings"
	"unsafe"

	"github.com/acyclicfs/acyclicfs/internal/fsmtoken"
	"github.com/acyclicfs/acyclicfs/store"
)

// The mount answers git's fsmonitor hook (docs/git.md "fsmonitor"): which
// paths may have changed since a token it handed out. The answer comes
// from the overlay's own bookkeeping, never from walking the tree:
//
//   - inodes whose seq or linkSeq is newer than the token (subSeq prunes
//     clean subtrees, so the walk is O(changed));
//   - fsmLog: names removed or renamed away, files whose writable handle
//     was released (their writes bypassed the daemon), and view switches
//     (the old and new lower trees, plus every path that was dirty
//     before the switch, since a switch may reset an inode's seq);
//   - files open for writing now.
//
// Anything the bookkeeping cannot vouch for (another overlay's dirty
// token, a log that overflowed, a directory moved, a diff too big) is
// answered with "everything may have changed", which makes git scan.

// fsmLogMax bounds the log's entries and fsmLogBytes its memory (an
// entry's fsmEntryBytes plus its path), fsmMaxPaths an answer; past
// either bound of the log its older half is dropped (a token from before
// it is answered "everything"), past fsmMaxPaths the answer is
// "everything". Without the byte bound the log of a busy mount held 65,536
// entries of 96 bytes plus their paths, 8 MiB per mount, kept for good.
const (
	fsmLogMax   = 1 << 16
	fsmLogBytes = 2 << 20
	fsmMaxPaths = 1 << 17
	// fsmReuseSwitches: an unchanged token is handed back while at most
	// this many view switches came after it.
	fsmReuseSwitches = 16
)

// fsmEntry is one log record at seq: a path (relative to the mount root,
// "/"-separated; a trailing "/" names a directory's whole cone), or a
// view switch from tree oldRoot to newRoot.
type fsmEntry struct {
	seq  uint64
	path string
	sw   *fsmSwitch // a view switch (rare: a pointer keeps entries small)
}

// fsmSwitch is a view switch's trees.
type fsmSwitch struct{ oldRoot, newRoot store.ID }

// fsmEntryBytes is what an entry costs besides its path's bytes.
const fsmEntryBytes = int(unsafe.Sizeof(fsmEntry{}))

// fsmState is the overlay's fsmonitor bookkeeping, guarded by overlay.mu.
type fsmState struct {
	epoch string
	log   []fsmEntry
	// floor: a token with a Seq below it cannot be answered from the log
	// (entries dropped, a directory moved): it gets "everything".
	floor uint64
	// writers counts the writable handles open on each inode.
	writers map[*inode]int
	// bytes is the log's memory (fsmLogBytes).
	bytes int
}

func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fsmRecord logs path at the current seq. Caller holds mu.
func (o *overlay) fsmRecord(path string) {
	o.fsmAppend(fsmEntry{seq: o.seq, path: path})
}

// fsmAppend adds e to the log, first dropping its older half if it is
// full (fsmLogMax, fsmLogBytes). Caller holds mu.
func (o *overlay) fsmAppend(e fsmEntry) {
	if len(o.fsm.log) >= fsmLogMax || o.fsm.bytes >= fsmLogBytes {
		drop := len(o.fsm.log) / 2
		o.fsm.floor = max(o.fsm.floor, o.fsm.log[drop-1].seq)
		o.fsm.log = append(o.fsm.log[:0], o.fsm.log[drop:]...)
		clear(o.fsm.log[len(o.fsm.log):cap(o.fsm.log)]) // let the dropped paths go
		o.fsm.bytes = 0
		for _, k := range o.fsm.log {
			o.fsm.bytes += fsmEntryBytes + len(k.path)
		}
	}
	o.fsm.log = append(o.fsm.log, e)
	o.fsm.bytes += fsmEntryBytes + len(e.path)
}

// fsmRemoved logs that d/name (c) went away. Caller holds mu, after the
// change's seq was taken.
func (o *overlay) fsmRemoved(d *inode, name string, c *inode) {
	p, ok := o.dirPath(d)
	if !ok {
		return
	}
	p = joinPath(p, name)
	o.fsmRecord(p)
	if c.isDir() {
		o.fsmRecord(p + "/")
	}
}

// fsmMovedDir: a directory moved. Git's untracked cache may hold listings
// for the old and new places' subdirectories that no single report
// invalidates, so tokens from before are answered with "everything".
// Caller holds mu.
func (o *overlay) fsmMovedDir() { o.fsm.floor = o.seq }

// fsmOpened counts a writable handle on in. Caller holds mu.
func (o *overlay) fsmOpened(in *inode) {
	if o.fsm.writers == nil {
		o.fsm.writers = map[*inode]int{}
	}
	o.fsm.writers[in]++
}

// fsmReleased: a writable handle on in closed; its writes are logged as a
// change of every name it has. Caller holds mu.
func (o *overlay) fsmReleased(in *inode) {
	if o.fsm.writers[in]--; o.fsm.writers[in] <= 0 {
		delete(o.fsm.writers, in)
	}
	o.seq++
	for _, p := range o.pathsOf(in) {
		o.fsmRecord(p)
	}
}

// fsmSwitching logs a view switch from the current lower tree to newRoot,
// with every path dirty before it (the switch may make them clean: a file
// changed after a token and changed back before the capture would
// otherwise go unreported). Caller holds mu.
func (o *overlay) fsmSwitching(newRoot store.ID) {
	o.seq++
	var dirty []string
	if o.root.subSeq != 0 {
		if !o.fsmWalk(o.root, "", 0, "", &dirty) {
			o.fsm.floor = o.seq
			dirty = nil
		}
	}
	for _, p := range dirty {
		o.fsmRecord(p)
	}
	o.fsmAppend(fsmEntry{seq: o.seq, sw: &fsmSwitch{oldRoot: o.rootID, newRoot: newRoot}})
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// dirPath is d's path from the root; false if d is detached. Caller holds mu.
func (o *overlay) dirPath(d *inode) (string, bool) {
	var names []string
	for d != o.root {
		if len(d.links) == 0 {
			return "", false
		}
		names = append(names, d.links[0].name)
		d = d.links[0].dir
	}
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	return strings.Join(names, "/"), true
}

// pathsOf lists every name of in. Caller holds mu.
func (o *overlay) pathsOf(in *inode) []string {
	var out []string
	for _, l := range in.links {
		if p, ok := o.dirPath(l.dir); ok {
			out = append(out, joinPath(p, l.name))
		}
	}
	return out
}

// fsmWalk appends the path of every inode below d (at path) whose seq or
// linkSeq is above since, skipping the directory skip (a path). It
// reports false once the answer grew past fsmMaxPaths. Caller holds mu.
func (o *overlay) fsmWalk(d *inode, path string, since uint64, skip string, out *[]string) bool {
	for name, c := range d.children {
		p := joinPath(path, name)
		if p == skip {
			continue
		}
		if c.seq > since || c.linkSeq > since {
			if len(*out) >= fsmMaxPaths {
				return false
			}
			*out = append(*out, p)
		}
		if c.isDir() && c.subSeq > since && c.children != nil {
			if !o.fsmWalk(c, p, since, skip, out) {
				return false
			}
		}
	}
	return true
}

// FSMonitorAnswer is the answer to a fsmonitor query: the token to hand
// git, and either All ("everything may have changed") or the paths,
// relative to the queried worktree, that may have changed since the
// token asked about. A path ending in "/" names a directory's cone.
type FSMonitorAnswer struct {
	Token string
	All   bool
	Paths []string
}

// FSMonitor answers git's fsmonitor query for the worktree at prefix (a
// "/"-separated path relative to the mount root, "" for the root) since
// token. It never fails: what it cannot answer exactly it answers with
// All.
func (m *Mount) FSMonitor(token, prefix string) FSMonitorAnswer {
	return m.ov.fsmonitor(token, strings.Trim(prefix, "/"))
}

func (o *overlay) fsmonitor(token, prefix string) FSMonitorAnswer {
	gitDir := joinPath(prefix, ".git")
	tok, perr := fsmtoken.Parse(token)

	o.mu.Lock()
	if o.fsm.epoch == "" {
		o.fsm.epoch = newEpoch()
	}
	next := fsmtoken.Token{Tree: [32]byte(o.rootID), Epoch: o.fsm.epoch, Seq: o.seq, Clean: o.fsmClean(gitDir)}
	ans := FSMonitorAnswer{Token: next.String(), All: true}
	var (
		raw      []string // mount-relative paths
		switches []fsmSwitch
		diffFrom store.ID // clean token of another overlay: diff its tree with the lower tree
		ok       = perr == nil
	)
	switch {
	case !ok:
	case tok.Epoch == o.fsm.epoch:
		ok = tok.Seq <= o.seq && tok.Seq >= o.fsm.floor
		if ok {
			ok = o.fsmWalk(o.root, "", tok.Seq, gitDir, &raw)
		}
		if ok {
			i := sort.Search(len(o.fsm.log), func(i int) bool { return o.fsm.log[i].seq > tok.Seq })
			for _, e := range o.fsm.log[i:] {
				if e.sw != nil {
					switches = append(switches, *e.sw)
				} else {
					raw = append(raw, e.path)
				}
			}
		}
	case tok.Clean:
		ok = o.fsm.floor == 0 && o.fsmWalk(o.root, "", 0, gitDir, &raw)
		if ok {
			for _, e := range o.fsm.log {
				if e.sw == nil {
					raw = append(raw, e.path)
				}
			}
			diffFrom = store.ID(tok.Tree)
			switches = append(switches, fsmSwitch{oldRoot: diffFrom, newRoot: o.rootID})
		}
	default:
		ok = false // a dirty token of another overlay: its changes are unknown here
	}
	if ok {
		for in := range o.fsm.writers {
			raw = append(raw, o.pathsOf(in)...)
		}
	}
	o.mu.Unlock()
	if !ok {
		return ans
	}

	set := map[string]bool{}
	for _, p := range raw {
		rel, keep, all := relativeTo(p, prefix)
		if all {
			return ans
		}
		if keep {
			set[rel] = true
		}
	}
	for _, sw := range switches {
		if !o.fsmDiffRoots(sw.oldRoot, sw.newRoot, prefix, set) {
			return ans
		}
	}
	paths := make([]string, 0, len(set))
	for p := range set {
		if p == ".git" || p == ".git/" || strings.HasPrefix(p, ".git/") {
			continue // git ignores its own directory
		}
		paths = append(paths, p)
	}
	if len(paths) > fsmMaxPaths {
		return ans
	}
	sort.Strings(paths)
	ans.All, ans.Paths = false, paths
	if len(paths) == 0 && len(switches) <= fsmReuseSwitches {
		// Nothing changed since token (.git/ aside): it still describes
		// the worktree, and handing it back spares git rewriting its
		// index for a new token. Not once many view switches lie between
		// (every session's end is one): each would be diffed again at
		// every query.
		ans.Token = token
	}
	return ans
}

// relativeTo makes a mount-relative path relative to prefix: keep is
// false for a path outside it, all true for a path at or above it (the
// worktree itself changed).
func relativeTo(p, prefix string) (rel string, keep, all bool) {
	if prefix == "" {
		if p == "" || p == "/" {
			return "", false, true
		}
		return p, true, false
	}
	trimmed := strings.TrimSuffix(p, "/")
	if trimmed == prefix || strings.HasPrefix(prefix, trimmed+"/") {
		return "", false, true
	}
	if r, ok := strings.CutPrefix(p, prefix+"/"); ok {
		return r, true, false
	}
	return "", false, false
}

// fsmClean reports whether the view outside gitDir is exactly the lower
// tree: no inode changed (seq), no writable handle open. O(changed).
// Caller holds mu.
func (o *overlay) fsmClean(gitDir string) bool {
	if o.root.subSeq == 0 && len(o.fsm.writers) == 0 {
		return true
	}
	if o.root.seq != 0 || o.fsmChangedBelow(o.root, "", gitDir) {
		return false
	}
	for in := range o.fsm.writers {
		for _, p := range o.pathsOf(in) {
			if p != gitDir && !strings.HasPrefix(p, gitDir+"/") {
				return false
			}
		}
	}
	return true
}

// fsmChangedBelow reports whether an inode below d (at path), outside the
// directory skip, has a change of its own relative to the lower tree.
// Caller holds mu.
func (o *overlay) fsmChangedBelow(d *inode, path, skip string) bool {
	for name, c := range d.children {
		p := joinPath(path, name)
		if p == skip {
			continue
		}
		if c.seq > 0 || c.isDir() && c.subSeq > 0 && c.children != nil && o.fsmChangedBelow(c, p, skip) {
			return true
		}
	}
	return false
}

// fsmDiffRoots adds to set every path below prefix that differs between
// the trees oldRoot and newRoot, relative to prefix. A directory only on
// one side is listed file by file, as its creation or removal one name at
// a time would have been. It reports false when the answer must be
// "everything" (a tree missing, the prefix not a directory on both sides,
// too many paths).
func (o *overlay) fsmDiffRoots(oldRoot, newRoot store.ID, prefix string, set map[string]bool) bool {
	if oldRoot == newRoot {
		return true
	}
	a, ok := o.fsmSubtree(oldRoot, prefix)
	if !ok {
		return false
	}
	b, ok := o.fsmSubtree(newRoot, prefix)
	if !ok {
		return false
	}
	return o.fsmDiff(a, b, "", set)
}

// fsmSubtree resolves prefix in the tree root.
func (o *overlay) fsmSubtree(root store.ID, prefix string) (store.ID, bool) {
	id := root
	if prefix == "" {
		return id, true
	}
	for _, name := range strings.Split(prefix, "/") {
		t, err := o.getTree(id)
		if err != nil {
			return store.ID{}, false
		}
		e, found := t.Lookup(name)
		if !found || e.Kind != store.KindDir {
			return store.ID{}, false
		}
		id = e.ID
	}
	return id, true
}

func (o *overlay) fsmDiff(a, b store.ID, path string, set map[string]bool) bool {
	if a == b {
		return true
	}
	ta, err := o.getTree(a)
	if err != nil {
		return false
	}
	tb, err := o.getTree(b)
	if err != nil {
		return false
	}
	i, j := 0, 0
	for i < len(ta.Entries) || j < len(tb.Entries) {
		var ea, eb *store.Entry
		switch {
		case j == len(tb.Entries) || i < len(ta.Entries) && ta.Entries[i].Name < tb.Entries[j].Name:
			ea = &ta.Entries[i]
			i++
		case i == len(ta.Entries) || tb.Entries[j].Name < ta.Entries[i].Name:
			eb = &tb.Entries[j]
			j++
		default:
			ea, eb = &ta.Entries[i], &tb.Entries[j]
			i, j = i+1, j+1
		}
		name := ""
		if ea != nil {
			name = ea.Name
		} else {
			name = eb.Name
		}
		p := joinPath(path, name)
		if path == "" && name == ".git" {
			continue
		}
		if len(set) > fsmMaxPaths {
			return false
		}
		switch {
		case ea != nil && eb != nil && ea.Kind == store.KindDir && eb.Kind == store.KindDir:
			if !o.fsmDiff(ea.ID, eb.ID, p, set) {
				return false
			}
		case ea != nil && eb != nil && ea.Kind == eb.Kind && ea.ID == eb.ID && ea.Mtime == eb.Mtime:
		default:
			set[p] = true
			for _, e := range []*store.Entry{ea, eb} {
				if e != nil && e.Kind == store.KindDir {
					set[p+"/"] = true
					if !o.fsmList(e.ID, p, set) {
						return false
					}
				}
			}
		}
	}
	return true
}

// fsmList adds every path below the tree id (at path).
func (o *overlay) fsmList(id store.ID, path string, set map[string]bool) bool {
	t, err := o.getTree(id)
	if err != nil {
		return false
	}
	for _, e := range t.Entries {
		if len(set) > fsmMaxPaths {
			return false
		}
		p := joinPath(path, e.Name)
		set[p] = true
		if e.Kind == store.KindDir && !o.fsmList(e.ID, p, set) {
			return false
		}
	}
	return true
}

// size is the number of paths the bookkeeping holds.
func (s *fsmState) size() int { return len(s.log) + len(s.writers) }
