package store

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/acyclicfs/acyclicfs/meta"
)

// The store's own namespaces on the metadata plane. Each is one top-level
// bucket of meta.db under its old name (docs/format.md), so stores made
// before the plane read unchanged.
var (
	spaceFormat        = meta.NewSpace(string(bucketFormat))
	spaceTrees         = meta.NewSpace(string(bucketTrees))
	spaceBases         = meta.NewSpace(string(bucketBases))
	spaceBaseRefs      = meta.NewSpace(string(bucketBaseRefs))
	spaceBaseResolved  = meta.NewSpace(string(bucketBaseResolved))
	spaceLazyOverlay   = meta.NewSpace(string(bucketLazyOverlay))
	prefixFormat       = spaceFormat.Prefix(nil)
	prefixTrees        = spaceTrees.Prefix(nil)
	prefixGenerations  = spaceGenerations.Prefix(nil)
	prefixBaseRefs     = spaceBaseRefs.Prefix(nil)
	prefixBaseResolved = spaceBaseResolved.Prefix(nil)
	prefixBases        = spaceBases.Prefix(nil)
	prefixLazyOverlay  = spaceLazyOverlay.Prefix(nil)
)

// stx is a metadata transaction as the store runs it: the plane's Tx, a
// scratch buffer for the keys of reads (tree and generation reads are hot;
// a fresh key each would be an allocation per read), and what to do once
// the transaction commits.
//
// The store's view and update take one from stxPool, so that a read costs
// no allocation beyond the caller's closure and the plane's own.
type stx struct {
	meta.Tx
	key     [96]byte
	commits []func()
	fn      func(*stx) error    // the store-level closure of this transaction
	run     func(meta.Tx) error // t.call, bound once when t is made
}

var stxPool = sync.Pool{New: func() any {
	t := &stx{}
	t.run = t.call
	return t
}}

// call runs t.fn on the plane's tx; a plane that runs the closure again
// starts it afresh.
func (t *stx) call(tx meta.Tx) error {
	t.Tx = tx
	clear(t.commits)
	t.commits = t.commits[:0]
	return t.fn(t)
}

// release returns t to the pool with nothing of its transaction kept.
func (t *stx) release() {
	clear(t.commits)
	t.Tx, t.fn, t.commits = nil, nil, t.commits[:0]
	stxPool.Put(t)
}

// get reads the record id in the namespace whose scan prefix is prefix.
// The key is built in scratch space: Tx.Get keeps no key.
func (t *stx) get(prefix meta.Key, id []byte) ([]byte, error) {
	k := append(append(t.key[:0], prefix...), id...)
	v, ok, err := t.Get(k)
	if err != nil || !ok {
		return nil, err
	}
	return v, nil
}

// has reports whether record id exists in prefix's namespace.
func (t *stx) has(prefix meta.Key, id []byte) (bool, error) {
	k := append(append(t.key[:0], prefix...), id...)
	_, ok, err := t.Get(k)
	return ok, err
}

// put writes record id in prefix's namespace under a key of its own (a
// plane may keep the key until the transaction ends).
func (t *stx) put(prefix meta.Key, id []byte, v []byte) error {
	k := make(meta.Key, 0, len(prefix)+len(id))
	return t.Put(append(append(k, prefix...), id...), v)
}

// onCommit runs fn after the transaction committed (never if it did not;
// a plane that runs the closure again forgets the earlier run's).
func (t *stx) onCommit(fn func()) { t.commits = append(t.commits, fn) }

// view runs fn in a read transaction of the metadata plane. A panic inside
// bbolt (it panics on some kinds of page corruption) becomes an error
// wrapping ErrCorrupt.
func (s *Store) view(fn func(tx *stx) error) (err error) {
	// A corrupt page id can point outside the mapping; make that fault a
	// recoverable panic instead of killing the process.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverCorrupt(&err)
	t := stxPool.Get().(*stx)
	t.fn = fn
	err = s.meta.View(context.Background(), t.run)
	t.release() // not after a panic: that t is dropped
	return err
}

// update runs fn in a write transaction of the metadata plane, then the
// transaction's onCommit functions; see view for panics.
func (s *Store) update(fn func(tx *stx) error) (err error) {
	if s.readOnly {
		return fmt.Errorf("store %s: %w", s.dir, ErrReadOnly)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverCorrupt(&err)
	t := stxPool.Get().(*stx)
	t.fn = fn
	err = s.meta.Update(context.Background(), t.run)
	if err == nil {
		for _, f := range t.commits {
			f()
		}
	}
	t.release()
	return err
}

// viewMeta is view for code that sees only the plane's Tx.
func (s *Store) viewMeta(fn func(tx meta.Tx) error) error {
	return s.view(func(tx *stx) error { return fn(tx) })
}

// updateMeta is update for code that sees only the plane's Tx.
func (s *Store) updateMeta(fn func(tx meta.Tx) error) error {
	return s.update(func(tx *stx) error { return fn(tx) })
}

func recoverCorrupt(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: metadata: bbolt panicked: %v", ErrCorrupt, r)
	}
}
