package corestate

import (
	gocontext "context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/acyclicfs/acyclicfs/meta"
)

// planeSpace is the first namespace segment of every corestate record on a
// metadata plane: a family's records live in namespace "corestate/<family>"
// under their raw key as the leaf.
const planeSpace = "corestate"

// defaultPlaneTimeout bounds one operation on the plane when PlaneOptions
// do not say otherwise.
const defaultPlaneTimeout = 30 * time.Second

// PlaneOptions tune a Store opened on a metadata plane.
type PlaneOptions struct {
	// Families lists the families this store holds; Check verifies every
	// record of them, and any other family is refused with ErrInvalidKey
	// (so a node-local family can never be written to the shared plane
	// by mistake). Empty: every valid family is accepted and Check
	// verifies nothing.
	Families []string
	// Timeout bounds each operation (one plane transaction), so an
	// unreachable plane fails a call instead of hanging it (default 30s).
	Timeout time.Duration
}

// plane is the backend of a Store opened with OpenPlane.
type plane struct {
	m        meta.Store
	opt      PlaneOptions
	families map[string]bool // nil: any family
	limits   *meta.TxLimits  // nil: the plane is unbounded
}

// OpenPlane returns a Store whose records live on the metadata plane p
// rather than in files: the same API, envelopes and revision semantics,
// each record the envelope JSON under meta key "corestate/<family>" NUL
// key. A compare-and-swap and a Commit are each one meta.Update, so no
// journal is needed and Recover, PendingTransactions have nothing to do.
// The caller keeps ownership of p.
func OpenPlane(p meta.Store, opt PlaneOptions) (*Store, error) {
	if p == nil {
		return nil, errors.New("corestate: open plane: no metadata plane")
	}
	if opt.Timeout <= 0 {
		opt.Timeout = defaultPlaneTimeout
	}
	pl := &plane{m: p, opt: opt}
	if len(opt.Families) > 0 {
		pl.families = make(map[string]bool, len(opt.Families))
		for _, f := range opt.Families {
			if err := validFamily(f); err != nil {
				return nil, fmt.Errorf("corestate: open plane: %w", err)
			}
			pl.families[f] = true
		}
	}
	if b, ok := p.(meta.Bounded); ok {
		l := b.TxLimits()
		pl.limits = &l
	}
	return &Store{pl: pl}, nil
}

func (p *plane) ctx() (gocontext.Context, gocontext.CancelFunc) {
	return gocontext.WithTimeout(gocontext.Background(), p.opt.Timeout)
}

func (p *plane) checkFamily(family string) error {
	if err := validFamily(family); err != nil {
		return err
	}
	if p.families != nil && !p.families[family] {
		return fmt.Errorf("%w: family %q is not kept on this plane", ErrInvalidKey, family)
	}
	return nil
}

func (p *plane) key(family, key string) (meta.Key, error) {
	if err := p.checkFamily(family); err != nil {
		return nil, err
	}
	if err := validKey(key); err != nil {
		return nil, err
	}
	return meta.NewSpace(planeSpace, family).Key([]byte(key)), nil
}

// get reads one record in tx. A record over maxBytes (> 0) is ErrTooLarge.
func getEnvelope(tx meta.Tx, k meta.Key, maxBytes int64) (*envelope, error) {
	b, found, err := tx.Get(k)
	if err != nil || !found {
		return nil, err
	}
	if maxBytes > 0 && int64(len(b)) > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), maxBytes)
	}
	e, err := decodeEnvelope(b)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

func putEnvelope(tx meta.Tx, k meta.Key, e envelope) error {
	b, err := encodeEnvelope(e)
	if err != nil {
		return err
	}
	return tx.Put(k, b)
}

func (p *plane) loadRaw(family, key string, maxBytes int64) (json.RawMessage, uint64, bool, error) {
	k, err := p.key(family, key)
	if err != nil {
		return nil, 0, false, err
	}
	ctx, cancel := p.ctx()
	defer cancel()
	var e *envelope
	err = p.m.View(ctx, func(tx meta.Tx) error {
		var err error
		e, err = getEnvelope(tx, k, maxBytes)
		return err
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("corestate: load %s/%q: %w", family, key, err)
	}
	if e == nil {
		return nil, 0, false, nil
	}
	return e.Value, e.Revision, true, nil
}

// onRecord runs fn in one plane transaction on the record family/key:
// its key and current envelope (nil when absent). On an optimistic plane
// (etcd) fn may run more than once, each time on the then-current record.
func (p *plane) onRecord(family, key string, fn func(tx meta.Tx, k meta.Key, cur *envelope) error) error {
	k, err := p.key(family, key)
	if err != nil {
		return err
	}
	ctx, cancel := p.ctx()
	defer cancel()
	return p.m.Update(ctx, func(tx meta.Tx) error {
		cur, err := getEnvelope(tx, k, 0)
		if err != nil {
			return err
		}
		return fn(tx, k, cur)
	})
}

func (p *plane) compareAndSwap(family, key string, expectRev uint64, value json.RawMessage) error {
	return p.onRecord(family, key, func(tx meta.Tx, k meta.Key, cur *envelope) error {
		if got := revisionOf(cur); got != expectRev {
			return &ConflictError{Family: family, Key: key, Expected: expectRev, Actual: got}
		}
		return putEnvelope(tx, k, envelope{Revision: expectRev + 1, Value: value})
	})
}

func (p *plane) compareAndDelete(family, key string, expectRev uint64) error {
	return p.onRecord(family, key, func(tx meta.Tx, k meta.Key, cur *envelope) error {
		if got := revisionOf(cur); got != expectRev {
			return &ConflictError{Family: family, Key: key, Expected: expectRev, Actual: got}
		}
		if cur == nil {
			return nil
		}
		return tx.Delete(k)
	})
}

// update is Store.Update in one plane transaction; fn may run more than
// once (onRecord).
func (p *plane) update(family, key string, fn func(cur []byte) (next []byte, del bool, err error)) error {
	return p.onRecord(family, key, func(tx meta.Tx, k meta.Key, cur *envelope) error {
		next, del, err := applyUpdate(cur, fn)
		switch {
		case err != nil:
			return err
		case del:
			return tx.Delete(k)
		case next != nil:
			return putEnvelope(tx, k, *next)
		}
		return nil
	})
}

func (p *plane) keys(family string) ([]string, error) {
	if err := p.checkFamily(family); err != nil {
		return nil, err
	}
	sp := meta.NewSpace(planeSpace, family)
	ctx, cancel := p.ctx()
	defer cancel()
	var keys []string
	err := p.m.View(ctx, func(tx meta.Tx) error {
		keys = keys[:0]
		return tx.Scan(sp.Prefix(nil), meta.ScanOptions{}, func(k meta.Key, _ []byte) error {
			keys = append(keys, string(sp.Leaf(k)))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("corestate: list %s: %w", family, err)
	}
	return keys, nil
}

// commit applies the sorted, merged write set ws in one plane transaction:
// every expectation is read and compared inside it, so a mismatch commits
// nothing and a concurrent writer of any record read makes the plane re-run
// or refuse it.
func (p *plane) commit(ws []Write, values []json.RawMessage) error {
	keys := make([]meta.Key, len(ws))
	size := 0
	for i, w := range ws {
		k, err := p.key(w.Family, w.Key)
		if err != nil {
			return err
		}
		keys[i] = k
		size += len(k) + len(values[i]) + 64 // the envelope around the value
	}
	if p.limits != nil {
		// Every record is read (one compare each) and most are written;
		// bound both by the plane's write limit, and the bytes by its
		// byte limit, so an oversized transaction is refused up front
		// with nothing changed rather than by the plane mid-way.
		if len(ws) > p.limits.MaxWrites || size+len(ws)*p.limits.PerWrite > p.limits.MaxBytes {
			return fmt.Errorf("%w: transaction of %d records (%d bytes) exceeds the metadata plane's limit of %d records, %d bytes",
				ErrTooLarge, len(ws), size+len(ws)*p.limits.PerWrite, p.limits.MaxWrites, p.limits.MaxBytes)
		}
	}
	ctx, cancel := p.ctx()
	defer cancel()
	return p.m.Update(ctx, func(tx meta.Tx) error {
		curs := make([]*envelope, len(ws))
		for i, w := range ws {
			cur, err := getEnvelope(tx, keys[i], 0)
			if err != nil {
				return fmt.Errorf("%s/%q: %w", w.Family, w.Key, err)
			}
			if got := revisionOf(cur); got != w.ExpectRev {
				return &ConflictError{Family: w.Family, Key: w.Key, Expected: w.ExpectRev, Actual: got}
			}
			curs[i] = cur
		}
		for i, w := range ws {
			switch {
			case w.Assert:
			case w.Delete:
				if curs[i] != nil {
					if err := tx.Delete(keys[i]); err != nil {
						return err
					}
				}
			default:
				if err := putEnvelope(tx, keys[i], envelope{Revision: w.ExpectRev + 1, Value: values[i]}); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// check decodes every record of the store's families.
func (p *plane) check() error {
	families := make([]string, 0, len(p.families))
	for f := range p.families {
		families = append(families, f)
	}
	slices.Sort(families)
	ctx, cancel := p.ctx()
	defer cancel()
	var errs []error
	for _, family := range families {
		sp := meta.NewSpace(planeSpace, family)
		err := p.m.View(ctx, func(tx meta.Tx) error {
			return tx.Scan(sp.Prefix(nil), meta.ScanOptions{}, func(k meta.Key, v []byte) error {
				if _, err := decodeEnvelope(v); err != nil {
					errs = append(errs, fmt.Errorf("corestate: check %s/%q: %w", family, sp.Leaf(k), err))
				}
				return nil
			})
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("corestate: check %s: %w", family, err))
		}
	}
	return errors.Join(errs...)
}
