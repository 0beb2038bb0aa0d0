package fusefs

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sync/errgroup"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/internal/osfile"
	"github.com/acyclicfs/acyclicfs/store"
)

// note is one kernel cache invalidation owed after a view switch: the
// entry name in directory dir (a path of names from the root, as the
// kernel knew it), or the attributes and data of that entry's inode, or
// (content with an empty name) the cached listing of dir itself.
type note struct {
	dir     []string
	name    string
	content bool
}

// SwitchView pins a new generation. Overlay state that the new root
// already contains is dropped; anything changed after the last Capture
// stays dirty on top of the new view, and so does an upper file still open
// (it is its handles' backing file; the kernel sends RELEASE only after
// close returns, so a file just closed may count as open). Inode numbers
// stay stable for paths that survive. Only changed entries are invalidated
// in the kernel, from the notifier goroutine; SwitchView then writes the
// overlay snapshot and waits until the invalidations have been sent. It
// must not be called from inside a request handler, nor while holding a
// lock that request admission waits for (use SwitchViewQueued there).
func (m *Mount) SwitchView(root store.ID) error {
	return m.SwitchViewLinks(root, nil)
}

// SwitchViewLinks is SwitchView to a generation with hard-link groups
// (store.Generation.Links), shown as one inode each.
func (m *Mount) SwitchViewLinks(root store.ID, links [][]string) error {
	done, err := m.SwitchViewQueuedLinks(root, links)
	if done != nil {
		select {
		case <-done:
		case <-m.doneC:
		}
	}
	return err
}

// sendNote resolves the note's directory in go-fuse's tree; if the kernel
// never looked it up there is nothing to invalidate.
func (m *Mount) sendNote(nt note) {
	dir := m.rootNode.EmbeddedInode()
	for _, name := range nt.dir {
		if dir = dir.GetChild(name); dir == nil {
			return
		}
	}
	if nt.content && nt.name == "" {
		_ = dir.NotifyContent(0, 0) // the directory's cached listing
		return
	}
	if nt.content {
		if ch := dir.GetChild(nt.name); ch != nil {
			_ = ch.NotifyContent(0, 0)
		}
		return
	}
	_ = dir.NotifyEntry(nt.name)
}

var _ = (*fs.Inode).NotifyEntry

// switchView re-bases the table on newRoot. It holds the lock throughout
// (tree loads included): a switch is rare and must look atomic to requests.
// links are the new generation's link groups: files they name that show
// the new tree's entry become one inode (applyLinks).
func (o *overlay) switchView(newRoot store.ID, links [][]string, notes *[]note) (bool, error) {
	hashed := o.hashRacy() // file reads happen here, before the lock is taken
	o.mu.Lock()
	defer o.mu.Unlock()
	o.prehashed = hashed
	defer func() { o.prehashed = nil }()
	o.fsmSwitching(newRoot)
	o.walRebase() // the switch changes the table in bulk: the next frame needs a new base
	keep, err := o.reconcileDir(o.root, store.Entry{Kind: store.KindDir, ID: newRoot, Mtime: o.root.mtime}, nil, notes)
	if err != nil {
		return false, fmt.Errorf("switch view to %s: %w", newRoot.Short(), err)
	}
	if err := o.applyLinks(links, notes); err != nil {
		return false, fmt.Errorf("switch view to %s: link groups: %w", newRoot.Short(), err)
	}
	o.rootID = newRoot
	o.unsnapped = true
	o.sweepInos()
	return keep, nil
}

func addNote(notes *[]note, dir []string, name string, content bool) {
	if notes != nil {
		*notes = append(*notes, note{dir: dir, name: name, content: content})
	}
}

// changedSinceCapture reports whether c has changes the last capture did
// not see. Caller holds mu. It reads no file data: a racily clean upper
// file counts as unchanged only if hashRacy hashed it before the lock was
// taken, found the captured content, and nothing could have written it
// since (no open for writing in between, the same stat now).
func (o *overlay) changedSinceCapture(c *inode) bool {
	if c.seq > o.capSeq || c.isDir() && c.subSeq > o.capSeq {
		return true
	}
	if c.upper {
		var st syscall.Stat_t
		if err := syscall.Stat(o.upperPath(c.num), &st); err != nil || statOf(&st) != c.capStat || c.capID.IsZero() {
			return true
		}
		if c.capRacy {
			h, ok := o.prehashed[c]
			if !ok || h.err != nil || h.id != c.capID || h.stat != c.capStat || h.wopens != c.wopens {
				return true
			}
			if h.start-c.capStat.ctime > racyWindow.Nanoseconds() {
				// Hashed after the last change's timestamp tick: a later
				// write shows in the stat, so the memo is trusted again.
				c.capRacy = false
				delete(o.racy, c)
			}
		}
	}
	return false
}

// racyHash is what hashRacy found for one racily clean upper file.
type racyHash struct {
	id     store.ID
	err    error
	stat   upperStat // the file's stat before it was hashed
	start  int64     // when hashing began (ns since epoch)
	wopens uint64    // the inode's writable opens when it was chosen
}

// racyHashers bounds the files hashRacy hashes at once.
const racyHashers = 4

// hashRacy hashes the upper files whose capture memo is racy (capRacy),
// so that a view switch can tell them clean without reading files while
// it holds mu: candidates are chosen under mu, hashed without it, and
// changedSinceCapture checks under mu that nothing changed in between.
func (o *overlay) hashRacy() map[*inode]racyHash {
	type job struct {
		c    *inode
		path string
		h    racyHash
	}
	var jobs []*job
	o.mu.Lock()
	for c := range o.racy {
		if !c.upper || !c.capRacy || c.capID.IsZero() || c.seq > o.capSeq {
			if !c.upper || !c.capRacy {
				delete(o.racy, c)
			}
			continue
		}
		jobs = append(jobs, &job{c: c, path: o.upperPath(c.num), h: racyHash{wopens: c.wopens}})
	}
	o.mu.Unlock()
	if len(jobs) == 0 {
		return nil
	}
	var g errgroup.Group
	g.SetLimit(racyHashers)
	for _, j := range jobs {
		g.Go(func() error {
			var st syscall.Stat_t
			if err := syscall.Stat(j.path, &st); err != nil {
				j.h.err = err
				return nil
			}
			j.h.stat = statOf(&st)
			j.h.start = time.Now().UnixNano()
			failpoint.Hit("switch.hash-racy")
			j.h.id, j.h.err = hashFile(j.path)
			return nil
		})
	}
	_ = g.Wait() // the jobs record their errors
	out := make(map[*inode]racyHash, len(jobs))
	for _, j := range jobs {
		out[j.c] = j.h
	}
	return out
}

// sameType reports whether c can be re-based on e in place: the same file
// type and, for a device, the same number (the kernel fixes an inode's
// device number when it first looks it up, so another number takes a new
// inode).
func sameType(c *inode, e store.Entry) bool {
	return c.mode&syscall.S_IFMT == typeForKind(e.Kind) && uint64(c.rdev) == e.Rdev()
}

// reconcileDir makes d show e's tree plus the changes made after the last
// capture; it reports whether anything at or below d stays dirty. Caller
// holds mu.
func (o *overlay) reconcileDir(d *inode, e store.Entry, path []string, notes *[]note) (bool, error) {
	old, hadLower := d.lower, d.hasLower
	nsKept := d.seq > o.capSeq
	d.lower = store.Entry{Kind: store.KindDir, Mtime: e.Mtime, ID: e.ID}
	d.hasLower = true
	if hadLower && old.ID == e.ID && d.subSeq == 0 && d != o.root {
		// Clean below and the same tree in the new view: nothing below
		// can differ, so the loaded subtree (a warm-up loads thousands of
		// directories) is not walked. Only the entry's own mtime may move.
		if d.mtime != e.Mtime || d.mode != modeFor(&e) {
			addNote(notes, path[:max(len(path)-1, 0)], lastName(path), true)
			d.mtime = e.Mtime
			d.mode = modeFor(&e)
		}
		d.seq = 0
		d.capTree = e.ID
		return false, nil
	}
	if d.children == nil {
		// Never loaded: the kernel cannot have cached anything below.
		if !nsKept {
			d.seq = 0
			d.mtime = e.Mtime
			if d != o.root {
				d.mode = modeFor(&e)
			}
		}
		d.subSeq = d.seq
		return d.subSeq != 0, nil
	}
	t, err := o.getTree(e.ID)
	if err != nil {
		return false, err
	}
	var captured *store.Tree
	if nsKept {
		capID := d.capTree
		if capID.IsZero() || o.capSeq == 0 {
			capID = old.ID
		}
		if captured, err = o.getTree(capID); err != nil {
			return false, err
		}
	}
	inCaptured := func(name string) bool {
		if captured == nil {
			return false
		}
		_, ok := captured.Lookup(name)
		return ok
	}
	namesChanged := false
	var maxSeq uint64
	keepSeq := func(c *inode) {
		maxSeq = max(maxSeq, c.seq, c.subSeq, 1)
	}
	childPath := func(name string) []string {
		p := make([]string, len(path)+1)
		copy(p, path)
		p[len(path)] = name
		return p
	}
	for _, name := range sortedNames(d.children) {
		c := d.children[name]
		ne, inNew := t.Lookup(name)
		if nsKept && c.linkSeq > o.capSeq {
			keepSeq(c) // named here after the capture: keeps its own content
			continue
		}
		if inNew && sameType(c, ne) {
			var keep bool
			if c.isDir() {
				keep, err = o.reconcileDir(c, ne, childPath(name), notes)
				if err != nil {
					return false, err
				}
			} else {
				keep = o.reconcileLeaf(c, ne, path, name, notes)
			}
			if keep {
				keepSeq(c)
			}
			continue
		}
		if nsKept && (!inCaptured(name) || o.changedSinceCapture(c)) {
			keepSeq(c) // added or changed after the capture: stays on top
			continue
		}
		// The new view deleted or replaced it.
		o.unlinkQuiet(d, name, c)
		addNote(notes, path, name, false)
		namesChanged = true
		if inNew {
			o.linkLower(d, ne)
		}
	}
	for _, ne := range t.Entries {
		if d.children[ne.Name] != nil {
			continue
		}
		if nsKept && inCaptured(ne.Name) {
			continue // deleted after the capture
		}
		o.linkLower(d, ne)
		addNote(notes, path, ne.Name, false)
		namesChanged = true
	}
	if namesChanged {
		addNote(notes, path, "", true) // names changed here: drop the cached listing
	}
	if nsKept {
		d.subSeq = max(d.seq, maxSeq)
	} else {
		if (d.mtime != e.Mtime || d.mode != modeFor(&e)) && d != o.root {
			addNote(notes, path[:max(len(path)-1, 0)], lastName(path), true)
		}
		d.seq = 0
		if d != o.root {
			d.mtime = e.Mtime
			d.mode = modeFor(&e)
		}
		d.subSeq = maxSeq
		d.capTree = e.ID // the names now are e's: the reference for later switches
	}
	return d.subSeq != 0, nil
}

func lastName(path []string) string {
	if len(path) == 0 {
		return ""
	}
	return path[len(path)-1]
}

// reconcileLeaf re-bases a file or symlink on its new lower entry ne and
// reports whether it stays dirty. Caller holds mu.
func (o *overlay) reconcileLeaf(c *inode, ne store.Entry, dir []string, name string, notes *[]note) bool {
	ne.Name = ""
	upperOpen := c.upper && c.upperOpens > 0
	if upperOpen && len(c.links) <= 1 && c.isReg() && ne.Kind.IsRegular() && !o.changedSinceCapture(c) && c.capID != ne.ID {
		// Unchanged since the capture, still open (often only a RELEASE
		// not yet arrived), and the new view has other content — a merged
		// parent change. Keeping the old upper file would show, and later
		// publish, the pre-merge content: replace it with the new content
		// (atomically; open handles keep reading what they opened).
		c.lower, c.hasLower = ne, true
		if err := o.replaceOpenUpper(c, ne); err == nil {
			addNote(notes, dir, name, true)
		}
		return true
	}
	if len(c.links) > 1 || upperOpen || o.changedSinceCapture(c) {
		c.lower, c.hasLower = ne, true
		return true
	}
	var oldContent store.ID
	switch {
	case c.upper:
		oldContent = c.capID
	case c.target != nil:
		oldContent = store.ID{} // unknown: always invalidate
	default:
		oldContent = c.lower.ID
	}
	changed := oldContent != ne.ID || c.kind() != ne.Kind || c.mtime != ne.Mtime || c.mode != modeFor(&ne)
	c.lower, c.hasLower = ne, true
	if c.upper {
		// Unchanged since the capture (checked above): if the new view
		// has the captured bytes and times, the upper file stays as the
		// clean inode's backing file; otherwise it goes.
		same := c.isReg() && ne.Kind.IsRegular() && c.capID == ne.ID && c.capStat.mtime == ne.Mtime
		if !same || !o.retain(c, c.capStat.size) {
			o.dropUpper(c)
		}
	}
	c.target = nil
	c.mode = modeFor(&ne)
	c.mtime, c.ctime = ne.Mtime, ne.Mtime
	c.seq = 0
	if changed {
		addNote(notes, dir, name, true)
	}
	return false
}

// replaceOpenUpper puts ne's content into c's upper file and records it
// as captured (so the file is clean as soon as its last handle is
// released). While handles share the upper file (kernel passthrough
// requires every open of the inode to use that one backing file), the
// file is rewritten in place, so every handle sees the merged content;
// if that fails half-way the captured content is written back. Otherwise
// a new file is renamed over it. Caller holds mu.
func (o *overlay) replaceOpenUpper(c *inode, ne store.Entry) error {
	path := o.upperPath(c.num)
	if f := c.upperFile; f != nil {
		if err := rewriteFile(o.objects, f, ne.ID); err != nil {
			if rerr := rewriteFile(o.objects, f, c.capID); rerr != nil {
				o.touch(c) // torn: let the next capture see it rather than trust capStat
			}
			return err
		}
	} else {
		tmp, err := osfile.CreateTemp(o.upperDir(), "switch-")
		if err != nil {
			return err
		}
		defer func() {
			tmp.Close()
			os.Remove(tmp.Name())
		}()
		if err := rewriteFile(o.objects, tmp, ne.ID); err != nil {
			return err
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			return err
		}
	}
	mt := time.Unix(0, ne.Mtime)
	if err := os.Chtimes(path, mt, mt); err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return err
	}
	c.mode = modeFor(&ne)
	c.mtime, c.ctime = ne.Mtime, ne.Mtime
	c.capStat, c.capID, c.capRacy = statOf(&st), ne.ID, true
	o.markRacy(c)
	return nil
}

// rewriteFile replaces f's whole content with blob id and syncs it.
func rewriteFile(objects Objects, f *os.File, id store.ID) error {
	src, err := openBlob(objects, id)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := io.Copy(io.NewOffsetWriter(f, 0), src); err != nil {
		return err
	}
	return f.Sync()
}

// unlinkQuiet removes d/name without recording a change. Caller holds mu.
func (o *overlay) unlinkQuiet(d *inode, name string, c *inode) {
	detachName(d, name, c)
	o.maybeDropUpper(c)
}

// linkLower adds a clean inode for ne under d. Caller holds mu.
func (o *overlay) linkLower(d *inode, ne store.Entry) {
	c := o.newLowerInode(ne)
	c.links = []link{{dir: d, name: ne.Name}}
	o.nameInode(d, ne.Name, c)
	d.children[ne.Name] = c
	if c.isDir() {
		d.nlinkExtra++
	}
}
