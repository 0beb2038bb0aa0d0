// Package rebasetest provides an in-memory object store implementing
// rebase.TreeReader and rebase.TreeWriter, and helpers that build and
// flatten trees from path maps, for tests of rebase and its callers.
package rebasetest

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/acyclicfs/acyclicfs/store"
)

// Mem is an in-memory content-addressed store of trees and blobs. It counts
// reads so tests can prove a merge or diff is O(changed paths).
type Mem struct {
	// mu protects every field below.
	mu        sync.Mutex
	trees     map[store.ID][]byte // encoded trees
	blobs     map[store.ID][]byte
	treeReads int
	blobReads int
	writes    int
}

// NewMem returns an empty store.
func NewMem() *Mem {
	return &Mem{trees: map[store.ID][]byte{}, blobs: map[store.ID][]byte{}}
}

// GetTree returns a decoded copy of the tree, or store.ErrNotFound.
func (m *Mem) GetTree(id store.ID) (*store.Tree, error) {
	m.mu.Lock()
	enc, ok := m.trees[id]
	m.treeReads++
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("tree %s: %w", id.Short(), store.ErrNotFound)
	}
	return store.DecodeTree(enc)
}

// ReadBlob returns a copy of the blob, or store.ErrNotFound.
func (m *Mem) ReadBlob(id store.ID) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blobReads++
	b, ok := m.blobs[id]
	if !ok {
		return nil, fmt.Errorf("blob %s: %w", id.Short(), store.ErrNotFound)
	}
	return append([]byte(nil), b...), nil
}

// PutTree stores t and returns its canonical ID.
func (m *Mem) PutTree(t *store.Tree) (store.ID, error) {
	enc, err := t.Encode()
	if err != nil {
		return store.ID{}, err
	}
	id := store.TreeID(enc)
	m.mu.Lock()
	m.trees[id] = enc
	m.writes++
	m.mu.Unlock()
	return id, nil
}

// WriteBlobBytes stores b and returns its canonical ID.
func (m *Mem) WriteBlobBytes(b []byte) (store.ID, error) {
	id := store.BlobID(b)
	m.mu.Lock()
	m.blobs[id] = append([]byte(nil), b...)
	m.writes++
	m.mu.Unlock()
	return id, nil
}

// Stats returns the number of GetTree and ReadBlob calls and writes so far.
func (m *Mem) Stats() (treeReads, blobReads, writes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.treeReads, m.blobReads, m.writes
}

// ResetStats zeroes the counters.
func (m *Mem) ResetStats() {
	m.mu.Lock()
	m.treeReads, m.blobReads, m.writes = 0, 0, 0
	m.mu.Unlock()
}

// Objects returns the number of stored trees and blobs.
func (m *Mem) Objects() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.trees) + len(m.blobs)
}

// File is one non-directory path of a Files map. Kind is KindFile, KindExec
// or KindSymlink (Data is then the target), KindDir for an empty
// directory (Data ignored), or a special kind (Data ignored; Rdev is a
// device's number). Mtime is copied into the entry. Mode is the entry's
// permission bits, 0 for its kind's default (store.DefaultPerm); for a
// regular file it sets the kind (store.Entry.SetPerm), and Flatten reports
// the kind that results.
type File struct {
	Kind  store.Kind
	Data  string
	Mtime int64
	Rdev  uint64
	Mode  uint32
}

// Files maps slash-separated paths to files. Intermediate directories are
// implied.
type Files map[string]File

// Text returns a Files of regular files from path → content.
func Text(m map[string]string) Files {
	fs := Files{}
	for p, c := range m {
		fs[p] = File{Kind: store.KindFile, Data: c}
	}
	return fs
}

type node struct {
	file     *File
	children map[string]*node
}

// Build writes the tree described by fs and returns its root ID. An empty
// map builds (and writes) the empty tree. It fails on a path that is both a
// file and a directory or has an invalid name.
func (m *Mem) Build(fs Files) (store.ID, error) {
	root := &node{children: map[string]*node{}}
	for p, f := range fs {
		n := root
		parts := strings.Split(p, "/")
		for i, name := range parts {
			if !store.ValidName(name) {
				return store.ID{}, fmt.Errorf("rebasetest: invalid path %q", p)
			}
			if n.file != nil {
				return store.ID{}, fmt.Errorf("rebasetest: %q is under a file", p)
			}
			c := n.children[name]
			if c == nil {
				c = &node{children: map[string]*node{}}
				n.children[name] = c
			}
			if i == len(parts)-1 {
				if len(c.children) > 0 && f.Kind != store.KindDir {
					return store.ID{}, fmt.Errorf("rebasetest: %q is a file and a directory", p)
				}
				if f.Kind != store.KindDir {
					f := f
					c.file = &f
				}
			}
			n = c
		}
	}
	return m.write(root)
}

// MustBuild is Build for tests and benchmarks; it panics on error.
func (m *Mem) MustBuild(fs Files) store.ID {
	id, err := m.Build(fs)
	if err != nil {
		panic(err)
	}
	return id
}

func (m *Mem) write(n *node) (store.ID, error) {
	t := &store.Tree{}
	for name, c := range n.children {
		e := store.Entry{Name: name}
		if c.file != nil && c.file.Kind.IsSpecial() {
			e = store.SpecialEntry(name, c.file.Kind, c.file.Rdev, c.file.Mtime)
		} else if c.file != nil {
			e.Kind, e.Mtime = c.file.Kind, c.file.Mtime
			id, err := m.WriteBlobBytes([]byte(c.file.Data))
			if err != nil {
				return store.ID{}, err
			}
			e.ID, e.Size = id, int64(len(c.file.Data))
		} else {
			id, err := m.write(c)
			if err != nil {
				return store.ID{}, err
			}
			e.Kind, e.ID = store.KindDir, id
		}
		if c.file != nil && c.file.Mode != 0 {
			e.SetPerm(c.file.Mode)
		}
		t.Entries = append(t.Entries, e)
	}
	t.Sort()
	return m.PutTree(t)
}

// Flatten reads the tree at root (zero = empty) back into a Files map;
// empty directories appear as KindDir entries.
func (m *Mem) Flatten(root store.ID) (Files, error) {
	fs := Files{}
	if root.IsZero() {
		return fs, nil
	}
	err := m.flatten("", root, fs)
	return fs, err
}

func (m *Mem) flatten(prefix string, id store.ID, fs Files) error {
	t, err := m.GetTree(id)
	if err != nil {
		return err
	}
	for _, e := range t.Entries {
		p := e.Name
		if prefix != "" {
			p = prefix + "/" + e.Name
		}
		if e.Kind == store.KindDir {
			sub, err := m.GetTree(e.ID)
			if err != nil {
				return err
			}
			if len(sub.Entries) == 0 {
				fs[p] = File{Kind: store.KindDir, Mtime: e.Mtime, Mode: modeOf(&e)}
				continue
			}
			if err := m.flatten(p, e.ID, fs); err != nil {
				return err
			}
			continue
		}
		if e.Kind.IsSpecial() {
			fs[p] = File{Kind: e.Kind, Mtime: e.Mtime, Rdev: e.Rdev(), Mode: modeOf(&e)}
			continue
		}
		m.mu.Lock()
		data, ok := m.blobs[e.ID]
		m.mu.Unlock()
		if !ok {
			return fmt.Errorf("rebasetest: blob of %q: %w", p, store.ErrNotFound)
		}
		fs[p] = File{Kind: e.Kind, Data: string(data), Mtime: e.Mtime, Mode: modeOf(&e)}
	}
	return nil
}

// modeOf is e's Mode as a File records it: 0 for the kind's default.
func modeOf(e *store.Entry) uint32 {
	if e.HasPerm() {
		return e.Perm()
	}
	return 0
}

// Paths returns the sorted paths of fs.
func (fs Files) Paths() []string {
	out := make([]string, 0, len(fs))
	for p := range fs {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
