package store

import (
	"fmt"

	"github.com/acyclicfs/acyclicfs/meta"
)

// Planes with bounded transactions (meta.Bounded: etcd's 128 operations
// and 1.5 MiB per Txn) cannot take an import's thousands of trees in one
// Update. On such a plane the store writes its immutable, content-
// addressed records — trees, base refs, generations, resolutions — in
// their own transactions, each within the plane's limits, before the
// transaction that publishes a head naming them; the head append (and
// everything about heads, windows and gates) stays one transaction. This
// is safe because those records are put-if-absent under the hash of their
// content: a record written early is the record the head's transaction
// would have written, and one left behind by a failure is unreferenced and
// swept by GC like any garbage. The local planes are unbounded and keep
// one transaction per call (docs/scale-out.md).

// record is one content-addressed record, put if absent.
type record struct {
	prefix meta.Key
	id     []byte
	enc    []byte
}

// txLimits returns the plane's transaction limits; ok is false for an
// unbounded plane.
func (s *Store) txLimits() (meta.TxLimits, bool) {
	b, ok := s.meta.(meta.Bounded)
	if !ok {
		return meta.TxLimits{}, false
	}
	return b.TxLimits(), true
}

// spans splits n writes into consecutive [start, end) spans within lim,
// cost(i) being write i's bytes beyond lim.PerWrite. A write bigger than
// lim.MaxBytes gets a span of its own (the plane refuses it).
func spans(lim meta.TxLimits, n int, cost func(i int) int) [][2]int {
	var out [][2]int
	for start := 0; start < n; {
		end, bytes := start, 0
		for end < n {
			c := cost(end) + lim.PerWrite
			if end > start && (end-start+1 > lim.MaxWrites || bytes+c > lim.MaxBytes) {
				break
			}
			bytes += c
			end++
		}
		out = append(out, [2]int{start, end})
		start = end
	}
	return out
}

// putRecordsBounded puts recs, each if absent, in order, in transactions
// within lim.
func (s *Store) putRecordsBounded(lim meta.TxLimits, recs []record) error {
	for _, sp := range spans(lim, len(recs), func(i int) int {
		return len(recs[i].prefix) + len(recs[i].id) + len(recs[i].enc)
	}) {
		chunk := recs[sp[0]:sp[1]]
		err := s.update(func(tx *stx) error {
			for _, r := range chunk {
				ok, err := tx.has(r.prefix, r.id)
				if err == nil && !ok {
					err = tx.put(r.prefix, r.id, r.enc)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("records %d-%d of %d: %w", sp[0], sp[1], len(recs), err)
		}
	}
	return nil
}

// refRecords returns refs as records.
func refRecords(refs map[ID][]byte) []record {
	out := make([]record, 0, len(refs))
	for id, enc := range refs {
		out = append(out, record{prefixBaseRefs, id[:], enc})
	}
	return out
}

// putTreesBounded is PutTrees' write on a bounded plane: the base refs
// the trees name, then the trees, bottom-up as given.
func (s *Store) putTreesBounded(lim meta.TxLimits, refs map[ID][]byte, encs [][]byte, ids []ID) error {
	recs := refRecords(refs)
	for i, enc := range encs {
		recs = append(recs, record{prefixTrees, ids[i][:], enc})
	}
	if err := s.putRecordsBounded(lim, recs); err != nil {
		return err
	}
	if len(refs) > 0 {
		s.bases.markStored(refs)
	}
	return nil
}

// writeBounded is WriteResolve on a bounded plane: refs and trees first,
// then the resolutions, each checked as putTx checks it, in transactions
// within lim.
func (pr *PreparedResolve) writeBounded(lim meta.TxLimits) error {
	if err := pr.s.putTreesBounded(lim, pr.refs, pr.encs, pr.tids); err != nil {
		return fmt.Errorf("resolve %d base refs: %w", len(pr.rs), err)
	}
	for _, sp := range spans(lim, len(pr.rs), func(int) int {
		// Reads of the ref and of the target tree beside the put.
		return 3*(len(prefixBaseResolved)+2*len(ID{})) + 2*lim.PerWrite
	}) {
		chunk := pr.rs[sp[0]:sp[1]]
		if err := pr.s.update(func(tx *stx) error { return pr.putResolutionsTx(tx, chunk) }); err != nil {
			return err
		}
	}
	return nil
}
