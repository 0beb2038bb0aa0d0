package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"

	"golang.org/x/sync/errgroup"

	"github.com/acyclicfs/acyclicfs/store"
)

// ImportStats counts what an import read.
type ImportStats struct {
	Files    int   // regular files, symlinks and special files in the result
	Hashed   int   // files whose content was read (the rest matched the previous tree's size+mtime)
	Bytes    int64 // bytes hashed
	Skipped  int   // files left out (a device number a tree cannot hold)
	Dirs     int
	Warnings []string
}

// importNode is one directory being imported.
type importNode struct {
	path    string
	prev    store.ID // previous tree at this path (zero if none)
	entries []store.Entry
	subdirs []*importNode
	subIdx  []int // index into entries for each subdir
	hl      *linkScan
}

// linkScan collects the names of files (any kind but a directory) with
// several links, by device and inode, as paths relative to the imported
// directory.
type linkScan struct {
	top   string
	names map[[2]uint64][]string
	order [][2]uint64
}

func (l *linkScan) add(p string, st *syscall.Stat_t) {
	if st == nil || st.Nlink < 2 {
		return
	}
	rel, err := filepath.Rel(l.top, p)
	if err != nil {
		return
	}
	k := [2]uint64{st.Dev, st.Ino}
	if _, ok := l.names[k]; !ok {
		l.order = append(l.order, k)
	}
	l.names[k] = append(l.names[k], filepath.ToSlash(rel))
}

func (l *linkScan) groups() [][]string {
	var out [][]string
	for _, k := range l.order {
		out = append(out, l.names[k])
	}
	return store.NormalizeLinks(out)
}

type fileJob struct {
	path  string
	entry *store.Entry
}

// importDir snapshots the real directory dir as a tree. prevRoot, if not
// zero, is the previous tree of the same directory: a file whose kind, size
// and mtime match its previous entry keeps that entry's content ID without
// being read (a stat scan, like git's index). Files with several names
// inside dir are returned as link groups (store.Generation.Links).
func (m *Manager) importDir(ctx context.Context, dir string, prevRoot store.ID) (store.ID, [][]string, ImportStats, error) {
	var stats ImportStats
	fi, err := os.Stat(dir)
	if err != nil {
		return store.ID{}, nil, stats, fmt.Errorf("%w: %s: %w", ErrInvalidInput, dir, err)
	}
	if !fi.IsDir() {
		return store.ID{}, nil, stats, fmt.Errorf("%w: %s is not a directory", ErrInvalidInput, dir)
	}
	root := &importNode{path: dir, prev: prevRoot, hl: &linkScan{top: dir, names: map[[2]uint64][]string{}}}
	var jobs []fileJob
	if err := m.scanDir(ctx, root, &jobs, &stats); err != nil {
		return store.ID{}, nil, stats, err
	}
	batch := m.st.NewBlobBatch()
	progress := func(done int) { m.opt.Progress("import", done, len(jobs)) }
	if err := hashFiles(ctx, batch, jobs, &stats, progress); err != nil {
		return store.ID{}, nil, stats, err
	}
	if err := batch.Commit(); err != nil {
		return store.ID{}, nil, stats, fmt.Errorf("sync imported blobs: %w", err)
	}
	id, err := m.putImportedTrees(root)
	if err != nil {
		return store.ID{}, nil, stats, err
	}
	// A file rewritten between the scan and the hash may differ from its
	// other names now: fitting splits such a group by content.
	links, err := m.fitLinks(id, root.hl.groups())
	if err != nil {
		return store.ID{}, nil, stats, fmt.Errorf("link groups of %s: %w", dir, err)
	}
	return id, links, stats, nil
}

func (m *Manager) scanDir(ctx context.Context, n *importNode, jobs *[]fileJob, stats *ImportStats) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("import %s: %w", n.path, err)
	}
	stats.Dirs++
	var prev *store.Tree
	if !n.prev.IsZero() {
		t, err := m.st.GetTree(n.prev)
		if err != nil {
			return fmt.Errorf("previous tree of %s: %w", n.path, err)
		}
		prev = t
	}
	f, err := os.Open(n.path)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", n.path, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("read directory %s: %w", n.path, err)
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(n.path, name)
		if !store.ValidName(name) {
			m.warn(stats, fmt.Sprintf("skipped %q: name cannot be stored", p))
			continue
		}
		li, err := os.Lstat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // vanished while scanning
			}
			return fmt.Errorf("stat %s: %w", p, err)
		}
		e := store.Entry{Name: name, Mtime: li.ModTime().UnixNano()}
		mode := li.Mode()
		switch {
		case mode.IsDir():
			e.Kind = store.KindDir
			e.SetPerm(statPerm(li))
			child := &importNode{path: p, hl: n.hl}
			if prev != nil {
				if pe, ok := prev.Lookup(name); ok && pe.Kind == store.KindDir {
					child.prev = pe.ID
				}
			}
			n.entries = append(n.entries, e)
			n.subdirs = append(n.subdirs, child)
			n.subIdx = append(n.subIdx, len(n.entries)-1)
			continue
		case mode.IsRegular():
			e.Kind = store.KindFile
			e.SetPerm(statPerm(li)) // KindExec with an execute bit
			e.Size = li.Size()
			st, _ := li.Sys().(*syscall.Stat_t)
			n.hl.add(p, st)
		case mode&fs.ModeSymlink != 0:
			e.Kind = store.KindSymlink
			e.Size = li.Size()
			st, _ := li.Sys().(*syscall.Stat_t)
			n.hl.add(p, st)
		default:
			st, _ := li.Sys().(*syscall.Stat_t)
			k, ok := store.Kind(0), false
			if st != nil {
				k, ok = store.SpecialKindOfMode(st.Mode)
			}
			if !ok || k.IsDevice() && st.Rdev > store.MaxRdev {
				m.warn(stats, fmt.Sprintf("skipped %s %s", specialKind(mode), p))
				stats.Skipped++
				continue
			}
			// A FIFO, socket or device: the entry is all there is.
			n.hl.add(p, st)
			stats.Files++
			n.entries = append(n.entries, store.SpecialEntry(name, k, st.Rdev, e.Mtime).WithPerm(st.Mode))
			continue
		}
		stats.Files++
		n.entries = append(n.entries, e)
		if prev != nil {
			if pe, ok := prev.Lookup(name); ok && pe.Kind == e.Kind && pe.Size == e.Size && pe.Mtime == e.Mtime {
				n.entries[len(n.entries)-1].ID = pe.ID
				continue
			}
		}
		*jobs = append(*jobs, fileJob{path: p})
	}
	// Bind jobs to entry pointers only now: appends above may have moved the
	// slice. Jobs of this directory are the trailing ones whose entry is nil.
	for i := len(*jobs) - 1; i >= 0 && (*jobs)[i].entry == nil; i-- {
		name := filepath.Base((*jobs)[i].path)
		idx := sort.Search(len(n.entries), func(k int) bool { return n.entries[k].Name >= name })
		(*jobs)[i].entry = &n.entries[idx]
	}
	for _, c := range n.subdirs {
		if err := m.scanDir(ctx, c, jobs, stats); err != nil {
			return err
		}
	}
	return nil
}

func specialKind(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "fifo"
	case mode&fs.ModeSocket != 0:
		return "socket"
	case mode&fs.ModeCharDevice != 0:
		return "character device"
	case mode&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

func (m *Manager) warn(stats *ImportStats, msg string) {
	stats.Warnings = append(stats.Warnings, msg)
	m.opt.Warn(msg)
}

// hashFiles stores every job's content, in parallel: hashing is CPU-bound
// and the disk is rarely the limit on a warm cache. A cancelled ctx stops
// it between files (a file is stored whole or not at all).
func hashFiles(ctx context.Context, batch *store.BlobBatch, jobs []fileJob, stats *ImportStats, progress func(done int)) error {
	workers := runtime.GOMAXPROCS(0)
	if workers < 2 {
		workers = 2
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	var mu sync.Mutex // protects the stats counters
	for _, j := range jobs {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			var id store.ID
			var n int64
			var err error
			if j.entry.Kind == store.KindSymlink {
				var target string
				target, err = os.Readlink(j.path)
				if err == nil {
					id, err = batch.WriteBlobBytes([]byte(target))
					n = int64(len(target))
				}
			} else {
				id, n, err = batch.WriteBlobFile(j.path)
			}
			if err != nil {
				return fmt.Errorf("import %s: %w", j.path, err)
			}
			mu.Lock()
			j.entry.ID = id
			j.entry.Size = n
			stats.Hashed++
			stats.Bytes += n
			progress(stats.Hashed)
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	if err == nil {
		err = ctx.Err() // cancelled before the first file
	}
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("store is full: %w", err)
	}
	return err
}

// putImportedTrees writes trees bottom-up and returns the root's ID.
func (m *Manager) putImportedTrees(root *importNode) (store.ID, error) {
	var order []*importNode // post-order: children before parents
	var walk func(n *importNode)
	walk = func(n *importNode) {
		for _, c := range n.subdirs {
			walk(c)
		}
		order = append(order, n)
	}
	walk(root)
	ids := make(map[*importNode]store.ID, len(order))
	trees := make([]*store.Tree, 0, len(order))
	for _, n := range order {
		for i, c := range n.subdirs {
			// Directory mtimes are not part of a tree: they change with every
			// create and unlink and would break "unchanged subtree, same ID".
			n.entries[n.subIdx[i]].ID = ids[c]
			n.entries[n.subIdx[i]].Mtime = 0
		}
		t := &store.Tree{Entries: n.entries}
		enc, err := t.Encode()
		if err != nil {
			return store.ID{}, fmt.Errorf("encode tree for %s: %w", n.path, err)
		}
		ids[n] = store.TreeID(enc)
		trees = append(trees, t)
	}
	if _, err := m.st.PutTrees(trees); err != nil {
		return store.ID{}, fmt.Errorf("store trees: %w", err)
	}
	return ids[root], nil
}

// statPerm is the permission bits (07777, set-uid, set-gid and sticky
// included) of an lstat result.
func statPerm(fi fs.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Mode & store.PermMask
	}
	return uint32(fi.Mode().Perm())
}
