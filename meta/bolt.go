package meta

import (
	"bytes"
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bolt is the local Store: a bbolt file in which a key's namespace is a
// bucket path and its leaf a key in the innermost bucket, so "heads/ws"
// NUL seq is key seq in bucket ws inside bucket heads — the layout
// meta.db had before this package existed. bbolt runs one write
// transaction at a time and never re-runs a closure, so it needs no
// revisions: serial writers are serializable by construction.
//
// A name in a bucket is either a key or a nested bucket: a leaf equal to a
// nested namespace's segment (or the reverse) fails to write with a bbolt
// error. Top-level buckets are created on first write and never removed;
// DeletePrefix of a whole nested namespace drops its bucket.
type Bolt struct {
	db *bolt.DB
	n  notifier
}

var (
	_ Store   = (*Bolt)(nil)
	_ Watcher = (*Bolt)(nil)
)

// Watch implements Watcher within this process: commits made through this
// Bolt are reported (Rev counts them since it was made); another process
// writing the same file is not seen.
func (b *Bolt) Watch(ctx context.Context, prefix Key) (<-chan Event, error) {
	return b.n.watch(ctx, prefix)
}

// Revision implements Watcher.
func (b *Bolt) Revision(ctx context.Context) (int64, error) { return b.n.revision(ctx) }

// NewBolt returns the plane over an open bbolt file; the caller keeps
// owning db.
func NewBolt(db *bolt.DB) *Bolt { return &Bolt{db: db} }

// BoltOptions configure OpenBolt.
type BoltOptions struct {
	NoSync   bool // skip fsync (tests only: a crash loses data)
	ReadOnly bool
}

// OpenBolt opens (creating if needed) a bbolt file of its own as a plane;
// Close closes it.
func OpenBolt(path string, o BoltOptions) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: o.NoSync, ReadOnly: o.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("open metadata %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// Close closes the bbolt file.
func (b *Bolt) Close() error { return b.db.Close() }

// View implements Store.
func (b *Bolt) View(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.db.View(func(tx *bolt.Tx) error { return fn(BoltTx(tx)) })
}

// Update implements Store.
func (b *Bolt) Update(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := b.n.begin()
	err := b.db.Update(func(tx *bolt.Tx) error { return fn(watchedTx{boltTx{tx: tx}, &b.n, &w}) })
	if err == nil {
		b.n.commit(&w)
	}
	return err
}

// watchedTx is a write transaction of Bolt that tells the notifier what it
// writes.
type watchedTx struct {
	boltTx
	n *notifier
	w *txWatch
}

func (t watchedTx) Put(k Key, v []byte) error {
	if err := t.boltTx.Put(k, v); err != nil {
		return err
	}
	t.n.wrote(t.w, k, false)
	return nil
}

func (t watchedTx) Delete(k Key) error {
	if err := t.boltTx.Delete(k); err != nil {
		return err
	}
	t.n.wrote(t.w, k, false)
	return nil
}

func (t watchedTx) DeletePrefix(prefix Key) error {
	if err := t.boltTx.DeletePrefix(prefix); err != nil {
		return err
	}
	t.n.wrote(t.w, prefix, true)
	return nil
}

// BoltTx returns tx as a metadata transaction, for the owner of a bbolt
// file that keeps other buckets in it too and writes both in one
// transaction (the store publishes a generation and appends its head
// together).
func BoltTx(tx *bolt.Tx) Tx { return boltTx{tx: tx} }

type boltTx struct{ tx *bolt.Tx }

// bucket returns the bucket of the namespace segs, creating it if create;
// nil (and no error) if it does not exist and create is false.
func (t boltTx) bucket(segs [][]byte, create bool) (*bolt.Bucket, error) {
	if create && !t.tx.Writable() {
		return nil, ErrReadOnly
	}
	b := t.tx.Bucket(segs[0])
	if b == nil && create {
		var err error
		if b, err = t.tx.CreateBucket(segs[0]); err != nil {
			return nil, fmt.Errorf("create bucket %q: %w", segs[0], err)
		}
	}
	for _, s := range segs[1:] {
		if b == nil {
			return nil, nil
		}
		nb := b.Bucket(s)
		if nb == nil && create {
			var err error
			if nb, err = b.CreateBucket(s); err != nil {
				return nil, fmt.Errorf("create bucket %q: %w", s, err)
			}
		}
		b = nb
	}
	return b, nil
}

// split parses a key (or, if prefix, a scan prefix) into the bucket path
// and leaf; segs is scratch space for the path.
func split(k []byte, prefix bool, segs [][]byte) ([][]byte, []byte, error) {
	segs, leaf, err := parseRaw(k, segs)
	if err == nil && !prefix && len(leaf) == 0 {
		err = fmt.Errorf("%w: %q: empty leaf", ErrInvalidKey, k)
	}
	return segs, leaf, err
}

func (t boltTx) Get(k Key) ([]byte, bool, error) {
	var buf [4][]byte
	segs, leaf, err := split(k, false, buf[:0])
	if err != nil {
		return nil, false, err
	}
	b, _ := t.bucket(segs, false)
	if b == nil {
		return nil, false, nil
	}
	v := b.Get(leaf)
	return v, v != nil, nil
}

func (t boltTx) Put(k Key, v []byte) error {
	var buf [4][]byte
	segs, leaf, err := split(k, false, buf[:0])
	if err != nil {
		return err
	}
	b, err := t.bucket(segs, true)
	if err != nil {
		return fmt.Errorf("put %q: %w", k, err)
	}
	if v == nil {
		v = []byte{} // bbolt would read a nil value back as missing
	}
	if err := b.Put(leaf, v); err != nil {
		return fmt.Errorf("put %q: %w", k, err)
	}
	return nil
}

func (t boltTx) Delete(k Key) error {
	var buf [4][]byte
	segs, leaf, err := split(k, false, buf[:0])
	if err != nil {
		return err
	}
	if !t.tx.Writable() {
		return fmt.Errorf("delete %q: %w", k, ErrReadOnly)
	}
	b, _ := t.bucket(segs, false)
	if b == nil {
		return nil
	}
	if err := b.Delete(leaf); err != nil {
		return fmt.Errorf("delete %q: %w", k, err)
	}
	return nil
}

func (t boltTx) DeletePrefix(prefix Key) error {
	var buf [4][]byte
	segs, lp, err := split(prefix, true, buf[:0])
	if err != nil {
		return err
	}
	if !t.tx.Writable() {
		return fmt.Errorf("delete prefix %q: %w", prefix, ErrReadOnly)
	}
	b, _ := t.bucket(segs, false)
	if b == nil {
		return nil
	}
	var dead [][]byte
	nested := false
	c := b.Cursor()
	for k, v := c.Seek(lp); k != nil && bytes.HasPrefix(k, lp); k, v = c.Next() {
		if v == nil {
			nested = true
			continue
		}
		dead = append(dead, k)
	}
	if len(lp) == 0 && len(segs) > 1 && !nested {
		// The whole namespace: drop its bucket, as the layout always did.
		parent, _ := t.bucket(segs[:len(segs)-1], false)
		if err := parent.DeleteBucket([]byte(segs[len(segs)-1])); err != nil {
			return fmt.Errorf("delete prefix %q: %w", prefix, err)
		}
		return nil
	}
	for _, k := range dead {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("delete prefix %q: %w", prefix, err)
		}
	}
	return nil
}

func (t boltTx) Scan(prefix Key, o ScanOptions, fn func(Key, []byte) error) error {
	var buf [4][]byte
	segs, lp, err := split(prefix, true, buf[:0])
	if err != nil {
		return err
	}
	b, _ := t.bucket(segs, false)
	if b == nil {
		return nil
	}
	space := prefix[:len(prefix)-len(lp)]
	kbuf := make(Key, 0, len(space)+64)
	c := b.Cursor()
	var k, v []byte
	next := c.Next
	switch {
	case !o.Reverse:
		k, v = c.Seek(lp)
	default:
		next = c.Prev
		end := prefixEnd(lp)
		if end != nil {
			k, _ = c.Seek(end)
		}
		if end == nil || k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
	}
	n := 0
	for ; k != nil && bytes.HasPrefix(k, lp); k, v = next() {
		if v == nil {
			continue // a nested namespace's bucket
		}
		if o.Limit > 0 && n >= o.Limit {
			break
		}
		n++
		kbuf = append(append(kbuf[:0], space...), k...)
		if err := fn(kbuf, v); err != nil {
			return err
		}
	}
	return nil
}

// prefixEnd returns the least key greater than every key starting with p,
// or nil if there is none (p empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte{}, p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
