package workspace

import (
	"fmt"
	"io"
	"sync"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
)

// treeBuffer is the store as one merge sees it: trees the merge writes
// are kept in memory (and served back to it) and stored together by
// flush, in one transaction. A merge builds a new tree for every directory
// on the way to each changed path, and the git-aware merge rebuilds every
// object fan-out directory it touches: stored one by one, that was one
// bbolt commit — an fdatasync — per tree, ~540 for one rebase of the Go
// tree's repository. Blobs go to the store at once (they are durable
// before any tree names them). Safe for concurrent use.
type treeBuffer struct {
	st *store.Store

	mu    sync.Mutex // protects trees and order
	trees map[store.ID]*store.Tree
	order []store.ID
}

var _ rebase.TreeReader = (*treeBuffer)(nil)
var _ rebase.TreeWriter = (*treeBuffer)(nil)

func newTreeBuffer(st *store.Store) *treeBuffer {
	return &treeBuffer{st: st, trees: map[store.ID]*store.Tree{}}
}

// GetTree returns a buffered tree, else the store's.
func (b *treeBuffer) GetTree(id store.ID) (*store.Tree, error) {
	b.mu.Lock()
	t, ok := b.trees[id]
	b.mu.Unlock()
	if ok {
		return t, nil
	}
	return b.st.GetTree(id)
}

// PutTree buffers t and returns its ID (as the store would: the hash of
// its canonical encoding).
func (b *treeBuffer) PutTree(t *store.Tree) (store.ID, error) {
	enc, err := t.Encode()
	if err != nil {
		return store.ID{}, fmt.Errorf("put tree: %w", err)
	}
	id := store.TreeID(enc)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.trees[id]; !ok {
		b.trees[id] = t
		b.order = append(b.order, id)
	}
	return id, nil
}

func (b *treeBuffer) ReadBlob(id store.ID) ([]byte, error)      { return b.st.ReadBlob(id) }
func (b *treeBuffer) WriteBlobBytes(p []byte) (store.ID, error) { return b.st.WriteBlobBytes(p) }
func (b *treeBuffer) OpenBlob(id store.ID) (io.ReadCloser, error) {
	return b.st.OpenBlob(id)
}
func (b *treeBuffer) WriteBlob(r io.Reader) (store.ID, int64, error) { return b.st.WriteBlob(r) }

// BlobPath lets the git-aware merge hard-link blob files.
func (b *treeBuffer) BlobPath(id store.ID) string { return b.st.BlobPath(id) }

// flush stores every buffered tree in one transaction.
func (b *treeBuffer) flush() error {
	b.mu.Lock()
	ts := make([]*store.Tree, len(b.order))
	for i, id := range b.order {
		ts[i] = b.trees[id]
	}
	b.mu.Unlock()
	if len(ts) == 0 {
		return nil
	}
	if _, err := b.st.PutTrees(ts); err != nil {
		return fmt.Errorf("store merged trees: %w", err)
	}
	return nil
}

// merge3 is rebase.Merge3 over the store with every workspace merge's
// options (mergeOptions): the merged trees are stored in one transaction
// at the end.
func (m *Manager) merge3(base, ours, theirs store.ID, opt rebase.Options) (rebase.Result, error) {
	buf := newTreeBuffer(m.st)
	mr, err := rebase.Merge3(buf, buf, base, ours, theirs, m.mergeOptions(opt, ours, buf))
	if err != nil {
		return mr, err
	}
	return mr, buf.flush()
}
