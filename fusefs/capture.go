package fusefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
	"github.com/acyclicfs/acyclicfs/store"
)

// A capture runs in two phases. Under the lock it walks only directories
// whose subtree changed (subSeq != 0) and records a plan: finished entries
// for clean things, and work items for dirty file contents and new
// symlinks. Without the lock it hashes and stores those and writes the new
// trees bottom-up. Clean subtrees keep their IDs and are never read, so
// the cost is O(dirty).

type planDir struct {
	in      *inode
	entries []store.Entry
	subdirs map[int]*planDir // index into entries → subdirectory to build
	files   map[int]*inode   // index into entries → upper file to store
	links   map[int][]byte   // index into entries → symlink target to store
}

// Capture writes the view as a new root tree: dirty files' contents as
// blobs and new trees for changed directories, reusing clean subtree IDs.
// The mount keeps serving and the overlay is left as it is; changed
// reports whether the root differs from the pinned one.
func (m *Mount) Capture() (store.ID, bool, error) {
	id, _, changed, err := m.ov.capture()
	return id, changed, err
}

// CaptureLinks is Capture that also returns the view's hard-link groups
// (store.Generation.Links).
func (m *Mount) CaptureLinks() (store.ID, [][]string, bool, error) {
	return m.ov.capture()
}

// CaptureDeferred is Capture without storing the new trees: they are
// returned for the caller to store in the transaction that publishes the
// generation naming them (one metadata commit per capture instead of
// two), and done must be called once they are stored (not if they never
// are). The blobs are durable when it returns. Without a Batcher the trees
// are stored at once and none are returned.
func (m *Mount) CaptureDeferred() (root store.ID, changed bool, trees []*store.Tree, done func(), err error) {
	root, _, changed, trees, done, err = m.ov.captureDeferred()
	return root, changed, trees, done, err
}

// CaptureDeferredLinks is CaptureDeferred that also returns the view's
// hard-link groups (store.Generation.Links) as of the capture; changed
// also reports groups that differ from the pinned generation's.
func (m *Mount) CaptureDeferredLinks() (root store.ID, links [][]string, changed bool, trees []*store.Tree, done func(), err error) {
	return m.ov.captureDeferred()
}

// RecoverCapture captures a StateDir left behind by a crashed daemon
// without mounting it: the overlay snapshot is replayed on root (or on the
// root it records, if that differs) and captured.
func RecoverCapture(stateDir string, objects Objects, root store.ID) (store.ID, bool, error) {
	id, _, changed, _, err := RecoverCaptureLinks(stateDir, objects, root, nil)
	return id, changed, err
}

// RecoverCaptureReport is RecoverCapture that also says what the state
// directory held that recovery could not keep (none: nil).
func RecoverCaptureReport(stateDir string, objects Objects, root store.ID) (store.ID, bool, []string, error) {
	id, _, changed, lost, err := RecoverCaptureLinks(stateDir, objects, root, nil)
	return id, changed, lost, err
}

// RecoverCaptureLinks is RecoverCaptureReport of a pinned generation with
// link groups (store.Generation.Links): it returns the captured groups
// too, and changed also reports groups that differ from links.
func RecoverCaptureLinks(stateDir string, objects Objects, root store.ID, links [][]string) (store.ID, [][]string, bool, []string, error) {
	id, got, changed, lost, _, err := RecoverCaptureAttributed(stateDir, objects, root, links)
	return id, got, changed, lost, err
}

// ResetState removes the overlay state (after its capture was published).
func ResetState(stateDir string) error {
	for _, p := range []string{filepath.Join(stateDir, snapName), filepath.Join(stateDir, snapName+".tmp"),
		filepath.Join(stateDir, walName), filepath.Join(stateDir, walName+".tmp")} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("reset state: %w", err)
		}
	}
	for _, d := range []string{"upper", "upper-trash", "locks"} {
		if err := os.RemoveAll(filepath.Join(stateDir, d)); err != nil {
			return fmt.Errorf("reset state: %w", err)
		}
	}
	if err := osfile.Sync(stateDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reset state: %w", err)
	}
	return nil
}

func (o *overlay) capture() (store.ID, [][]string, bool, error) {
	id, links, changed, trees, done, err := o.captureDeferred()
	if err != nil {
		return store.ID{}, nil, false, err
	}
	if len(trees) > 0 {
		if _, err := o.objects.(Batcher).PutTrees(trees); err != nil {
			return store.ID{}, nil, false, fmt.Errorf("capture: put trees: %w", err)
		}
	}
	done()
	return id, links, changed, nil
}

// captureDeferred builds the capture and makes its blobs durable; the
// trees (batch mode) and the memo updates wait for the caller (done).
func (o *overlay) captureDeferred() (store.ID, [][]string, bool, []*store.Tree, func(), error) {
	o.mu.Lock()
	seq := o.seq
	if o.root.subSeq == 0 {
		id, links := o.rootID, o.lowerLinks
		o.mu.Unlock()
		return id, links, false, nil, o.captured(seq, nil), nil
	}
	plan := o.planDir(o.root)
	old, oldLinks := o.rootID, o.lowerLinks
	links := o.linkGroups()
	o.mu.Unlock()

	o.capturing.Add(1)
	defer o.capturing.Add(-1)
	o.captureFiles.Store(0)
	o.captureBytes.Store(0)
	cw := o.newCaptureWriter()
	id, err := o.build(plan, cw)
	if err == nil {
		err = cw.finishBlobs()
	}
	if err != nil {
		cw.abort()
		return store.ID{}, nil, false, nil, nil, err
	}
	return id, links, id != old || !store.EqualLinks(links, oldLinks), cw.trees, o.captured(seq, cw.memos), nil
}

// captured returns the completion of a capture of the overlay at seq: its
// memo updates, then the capture's sequence number.
func (o *overlay) captured(seq uint64, memos []func()) func() {
	return sync.OnceFunc(func() {
		for _, f := range memos {
			f()
		}
		o.mu.Lock()
		o.capSeq = seq
		o.unsnapped = true
		// The next frame records the new capture sequence number (every
		// frame carries it; the root's record makes one) and the tree IDs
		// the memos set (build marks those directories): a frame of the
		// changed directories' attributes, where a snapshot would encode
		// every entry of every changed directory (the root's 1,000
		// subdirectories in a tree of 100,000 files: 143 KB).
		o.walMark(o.root, walFull)
		o.mu.Unlock()
	})
}

// planDir records d's entries. Caller holds mu; d.subSeq != 0 and d is loaded.
func (o *overlay) planDir(d *inode) *planDir {
	p := &planDir{in: d, subdirs: map[int]*planDir{}, files: map[int]*inode{}, links: map[int][]byte{}}
	names := sortedNames(d.children)
	p.entries = make([]store.Entry, len(names))
	for i, name := range names {
		c := d.children[name]
		e := c.lower
		e.Name = name
		switch {
		case c.isDir():
			e = store.Entry{Name: name, Kind: store.KindDir, Mtime: c.mtime, ID: c.lower.ID}
			e.SetPerm(c.mode)
			if c.subSeq != 0 && c.children != nil {
				p.subdirs[i] = o.planDir(c)
			}
		case c.isSymlink():
			if c.target != nil {
				p.links[i] = c.target
				e = store.Entry{Name: name, Kind: store.KindSymlink, Size: int64(len(c.target)), Mtime: c.mtime}
			} else if c.seq != 0 {
				e.Mtime = c.mtime
			}
		case c.isSpecial():
			e = store.SpecialEntry(name, c.kind(), uint64(c.rdev), c.mtime)
			e.SetPerm(c.mode)
		default:
			if c.upper {
				p.files[i] = c
				e = store.Entry{Name: name, Kind: c.kind()}
			} else if c.seq != 0 {
				e.Kind, e.Mtime = c.kind(), c.mtime
			}
			// The inode's mode, not the lower entry's: a chmod is a change
			// (and the log does not keep a lower entry's mode).
			e.SetPerm(c.mode)
		}
		p.entries[i] = e
	}
	return p
}

// build stores p's dirty contents and subtrees, then p's tree.
func (o *overlay) build(p *planDir, cw *captureWriter) (store.ID, error) {
	for i, sub := range p.subdirs {
		id, err := o.build(sub, cw)
		if err != nil {
			return store.ID{}, err
		}
		p.entries[i].ID = id
		cw.memo(func() {
			o.mu.Lock()
			sub.in.capTree = id
			o.walMark(sub.in, walFull)
			o.mu.Unlock()
		})
	}
	for i, target := range p.links {
		id, err := cw.writeBlobBytes(target)
		if err != nil {
			return store.ID{}, fmt.Errorf("capture symlink %q: %w", p.entries[i].Name, err)
		}
		p.entries[i].ID = id
	}
	if err := o.storeFiles(p, cw); err != nil {
		return store.ID{}, err
	}
	t := &store.Tree{Entries: p.entries}
	id, err := cw.putTree(t)
	if err != nil {
		return store.ID{}, fmt.Errorf("capture: put tree: %w", err)
	}
	if p.in == o.root {
		cw.memo(func() {
			o.mu.Lock()
			o.root.capTree = id
			o.walMark(o.root, walFull)
			o.mu.Unlock()
		})
	}
	return id, nil
}

// storeFiles hashes p's dirty files (in parallel: BLAKE3 and the store's
// writes are the cost), skipping any whose upper file is unchanged since
// it was last captured. Every file is tried; the first error is returned.
func (o *overlay) storeFiles(p *planDir, cw *captureWriter) error {
	var g errgroup.Group
	g.SetLimit(captureWorkers)
	for i, c := range p.files {
		g.Go(func() error { return o.storeFile(c, &p.entries[i], cw) })
	}
	return g.Wait()
}

// captureWorkers is how many files a capture hashes and stores at once.
const captureWorkers = 4

// racyWindow bounds the file system's timestamp granularity (kernel
// timestamps are clock-tick coarse).
const racyWindow = 100 * time.Millisecond

func (o *overlay) storeFile(c *inode, e *store.Entry, cw *captureWriter) error {
	path := o.upperPath(c.num)
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fmt.Errorf("capture %q: %w", e.Name, err)
	}
	us := statOf(&st)
	e.Mtime = us.mtime
	o.mu.Lock()
	memo, memoID, racy := c.capStat, c.capID, c.capRacy
	o.mu.Unlock()
	if memo == us && !memoID.IsZero() {
		if !racy {
			e.ID, e.Size = memoID, us.size
			return nil
		}
		// Racily clean: hashed where it lies, no copy. The same content
		// is the blob already stored; writing it again would take its
		// size in temporary space, which a full disk does not have.
		start := time.Now().UnixNano()
		if id, err := hashFile(path); err == nil && id == memoID {
			e.ID, e.Size = memoID, us.size
			if start-us.ctime > racyWindow.Nanoseconds() {
				// Hashed after the last change's timestamp tick: a later
				// write shows in the stat (as hashRacy does).
				cw.memo(func() {
					o.mu.Lock()
					if c.capStat == us && c.capID == memoID {
						c.capRacy = false
						delete(o.racy, c)
					}
					o.mu.Unlock()
				})
			}
			return nil
		}
	}
	id, size, err := cw.writeBlobFile(path)
	if err != nil {
		return fmt.Errorf("capture %q: %w", e.Name, err)
	}
	o.captureFiles.Add(1)
	o.captureBytes.Add(size)
	e.ID, e.Size = id, size
	// If the file changed so recently that another write could land in the
	// same coarse timestamp tick without changing its size, the stat does
	// not identify the content: it is marked racy and the memo is only
	// trusted after re-hashing (as git does for racily clean entries).
	racy = time.Now().UnixNano()-us.ctime <= racyWindow.Nanoseconds()
	if size == us.size { // else it changed while hashing: do not memoise
		cw.memo(func() {
			o.mu.Lock()
			c.capStat, c.capID, c.capRacy = us, id, racy
			if racy {
				o.markRacy(c)
			}
			o.mu.Unlock()
		})
	}
	return nil
}

// hashFile returns the blob ID of a file's content without storing it
// (the ID a capture would give it: sparse if it has holes).
func hashFile(path string) (store.ID, error) {
	id, _, err := store.FileBlobID(path)
	return id, err
}
