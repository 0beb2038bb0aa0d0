package fusefs

import (
	"fmt"
	"sync"

	"github.com/acyclicfs/acyclicfs/store"
)

// Batch writes many blobs and makes them durable together (one sync
// instead of an fsync per file). Blobs written through it may be named
// only after Commit returns.
type Batch interface {
	WriteBlobFile(path string) (store.ID, int64, error)
	WriteBlobBytes(b []byte) (store.ID, error)
	Commit() error
	// Abort drops (deletes) every blob not yet committed.
	Abort()
}

// Batcher is implemented by Objects that can batch a capture's writes:
// its blobs through one Batch and its trees in one transaction.
type Batcher interface {
	NewBatch() Batch
	PutTrees(ts []*store.Tree) ([]store.ID, error)
}

// captureWriter is where one capture writes. With a Batcher, blobs go into
// one batch and trees are collected with their IDs computed locally, then
// stored in one transaction after the batch is durable (trees must never
// name a blob that a crash could lose).
type captureWriter struct {
	objects Objects
	batch   Batch
	b       Batcher
	trees   []*store.Tree // collected trees (batch mode); only build appends, single goroutine

	memoMu sync.Mutex // protects memos
	// memos are memo updates (capTree, capID) to apply once what they name
	// is durable; storeFiles' goroutines append.
	memos []func()
}

// memo records a memo update; it runs at once unless writes are batched,
// else after finish made the batch durable (a failed capture must not
// leave memos naming blobs or trees that were never stored).
func (cw *captureWriter) memo(f func()) {
	if cw.b == nil {
		f()
		return
	}
	cw.memoMu.Lock()
	cw.memos = append(cw.memos, f)
	cw.memoMu.Unlock()
}

func (o *overlay) newCaptureWriter() *captureWriter {
	cw := &captureWriter{objects: o.objects}
	if b, ok := o.objects.(Batcher); ok {
		cw.b, cw.batch = b, b.NewBatch()
	}
	return cw
}

func (cw *captureWriter) writeBlobFile(path string) (store.ID, int64, error) {
	if cw.batch != nil {
		return cw.batch.WriteBlobFile(path)
	}
	return cw.objects.WriteBlobFile(path)
}

func (cw *captureWriter) writeBlobBytes(b []byte) (store.ID, error) {
	if cw.batch != nil {
		return cw.batch.WriteBlobBytes(b)
	}
	return cw.objects.WriteBlobBytes(b)
}

func (cw *captureWriter) putTree(t *store.Tree) (store.ID, error) {
	if cw.b == nil {
		return cw.objects.PutTree(t)
	}
	enc, err := t.Encode()
	if err != nil {
		return store.ID{}, err
	}
	cw.trees = append(cw.trees, t)
	return store.TreeID(enc), nil
}

// finishBlobs makes a batched capture's blobs durable. Its trees (they
// must never name a blob a crash could lose) and memo updates are stored
// and applied after it, by the caller.
func (cw *captureWriter) finishBlobs() error {
	if cw.b == nil {
		return nil
	}
	if err := cw.batch.Commit(); err != nil {
		return fmt.Errorf("capture: sync blobs: %w", err)
	}
	return nil
}

// abort drops what a failed capture wrote into its batch: the temporary
// files of blobs not yet committed would otherwise hold their space until
// the store is next opened by a new process (on a full disk, each retry
// would leave more).
func (cw *captureWriter) abort() {
	if cw.batch != nil {
		cw.batch.Abort()
	}
}
