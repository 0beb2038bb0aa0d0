package meta

import "context"

// Store is the metadata plane: small durable records under flat keys, read
// and written in serializable transactions.
type Store interface {
	// View runs fn in a read-only transaction over one consistent
	// snapshot. Writes inside it fail with ErrReadOnly.
	View(ctx context.Context, fn func(tx Tx) error) error
	// Update runs fn in a read-write transaction: its reads and writes
	// commit atomically, or, if fn returns an error (which Update
	// returns) or panics (the panic goes on, or becomes an error), not at
	// all. An implementation may run fn more than once
	// (an optimistic one, on a conflict), so fn must have no side effects
	// beyond tx and must not keep anything it read past a failed run.
	Update(ctx context.Context, fn func(tx Tx) error) error
}

// Tx is one transaction. Its methods fail with ErrInvalidKey for a key that
// ParseKey (a prefix that ParsePrefix) rejects. Byte slices it returns are
// valid only until fn returns (until the callback returns, in Scan) and
// must not be modified; a value passed to Put must not be modified before
// the transaction ends.
type Tx interface {
	// Get returns the value stored under k; found is false if there is
	// none.
	Get(k Key) (v []byte, found bool, err error)
	// Put stores v under k, replacing any previous value. An empty v is a
	// stored, empty value.
	Put(k Key, v []byte) error
	// Delete removes k; removing a missing key is not an error.
	Delete(k Key) error
	// DeletePrefix removes every key starting with prefix (a scan prefix:
	// Space.Prefix).
	DeletePrefix(prefix Key) error
	// Scan calls fn for the keys starting with prefix (Space.Prefix) in
	// key order, or reverse key order with o.Reverse, at most o.Limit of
	// them if o.Limit > 0. An error from fn stops the scan and is
	// returned. A scan sees the transaction's own writes.
	Scan(prefix Key, o ScanOptions, fn func(k Key, v []byte) error) error
}

// ScanOptions shape a Scan.
type ScanOptions struct {
	Reverse bool // newest (greatest key) first
	Limit   int  // at most this many keys; <= 0: all
}

// Bounded is implemented by a plane whose transactions have a size limit
// (etcd: operations per Txn and bytes per request). A caller that writes
// many independent records — the store's content-addressed trees and
// generations — splits them into transactions within these limits; the
// local planes are unbounded and do not implement it.
type Bounded interface {
	TxLimits() TxLimits
}

// TxLimits bound one Update on a Bounded plane: a transaction that reads
// the keys it writes and puts at most MaxWrites keys (in at most a few
// namespaces), whose sum over the writes of len(key) + len(value) +
// PerWrite is at most MaxBytes, commits without ErrTooLarge. A single
// record over MaxBytes cannot be stored at all.
type TxLimits struct {
	MaxWrites int
	MaxBytes  int
	PerWrite  int
}

// SessionTx is implemented by the transactions of a plane that can bind
// records to the life of the writing process (etcd: a lease the process
// keeps alive). Lease gates are written this way, so that a process that
// dies, or pauses past the session's time to live, loses its gates by
// itself and every permit it holds is fenced whatever the clocks say. On
// a plane without sessions (Memory, Bolt) callers use Put, and expiry
// stays clock-based.
type SessionTx interface {
	Tx
	// PutSession is Put, with the record bound to this process's
	// session: it is deleted when the session ends. A later Put or
	// PutSession of the key replaces the binding.
	PutSession(k Key, v []byte) error
}
