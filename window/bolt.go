package window

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/store"
	bolt "go.etcd.io/bbolt"
)

// BucketName is the bbolt bucket holding one encoded Snapshot per workspace
// name. It lives in the same bbolt file as the heads and lease gates so one
// transaction covers both.
const BucketName = "windows"

// BoltStore is a durable Store in a bbolt file shared with store's heads and
// lease gates. In the same transaction as each window compare-and-swap it
// opens the gate of every added lease (at the lease's expiry, checking the
// permit the coordinator recorded), renews the gate of every renewed lease
// (a new epoch fences the old permit), and fences the gate of every removed
// (closed or expired) lease. Because gates carry their expiry and
// store.CheckPermitTx compares it with the store clock, an expired lease is
// fenced even before any sweep removes it.
type BoltStore struct {
	db    *bolt.DB
	clock Clock
}

var _ Store = (*BoltStore)(nil)

// NewBoltStore returns a store over db. clock is the store clock CheckPermit
// measures expiry against; it must be the clock the head append uses.
func NewBoltStore(db *bolt.DB, clock Clock) *BoltStore {
	return &BoltStore{db: db, clock: clock}
}

// DB returns the underlying bbolt handle.
func (b *BoltStore) DB() *bolt.DB { return b.db }

// Load implements Store.
func (b *BoltStore) Load(ctx context.Context, workspace string) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	var s Snapshot
	err := b.db.View(func(tx *bolt.Tx) error {
		var err error
		s, _, err = loadTx(tx, workspace)
		return err
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("bolt window store: %w", err)
	}
	return s, nil
}

// loadTx reads a workspace's snapshot inside tx; present is false (and the
// snapshot idle) when nothing is stored.
func loadTx(tx *bolt.Tx, workspace string) (s Snapshot, present bool, err error) {
	bk := tx.Bucket([]byte(BucketName))
	if bk == nil {
		return IdleSnapshot(workspace), false, nil
	}
	raw := bk.Get([]byte(workspace))
	if raw == nil {
		return IdleSnapshot(workspace), false, nil
	}
	s, err = DecodeSnapshot(raw)
	if err != nil {
		return Snapshot{}, true, fmt.Errorf("workspace %q: %w", workspace, err)
	}
	if s.Workspace != workspace {
		return Snapshot{}, true, fmt.Errorf("%w: state of %q stored under %q", ErrIncompatibleState, s.Workspace, workspace)
	}
	return s, true, nil
}

// CompareAndSwap implements Store, with the lease gates in the same
// transaction.
func (b *BoltStore) CompareAndSwap(ctx context.Context, workspace string, expect uint64, next Snapshot) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkReplacement(workspace, expect, next); err != nil {
		return false, fmt.Errorf("bolt window store: %w", err)
	}
	enc, err := EncodeSnapshot(next)
	if err != nil {
		return false, fmt.Errorf("bolt window store: %w", err)
	}
	// A lost race is decided by a read-only transaction first: bbolt
	// commits (and fsyncs) even an empty write transaction, and losers of a
	// contended window would otherwise each pay for one.
	// Only the revision is decoded here; the write transaction below
	// decodes and validates the whole current state.
	var current struct {
		Version  uint32 `json:"version"`
		Revision uint64 `json:"revision"`
	}
	_ = b.db.View(func(tx *bolt.Tx) error {
		current.Version = StateVersion
		if bk := tx.Bucket([]byte(BucketName)); bk != nil {
			if raw := bk.Get([]byte(workspace)); raw != nil && json.Unmarshal(raw, &current) != nil {
				current.Version = 0
			}
		}
		return nil
	})
	// Undecodable or foreign-version state goes on to the full check,
	// which reports it.
	if current.Version == StateVersion && current.Revision != expect {
		return false, nil
	}
	err = b.db.Update(func(tx *bolt.Tx) error {
		cur, _, err := loadTx(tx, workspace)
		if err != nil {
			return err
		}
		if cur.Revision != expect {
			return errLostRace // roll back: nothing to write
		}
		if err := syncGates(tx, cur.Phase.Leases, next.Phase.Leases); err != nil {
			return err
		}
		bk, err := tx.CreateBucketIfNotExists([]byte(BucketName))
		if err != nil {
			return err
		}
		if err := bk.Put([]byte(workspace), enc); err != nil {
			return err
		}
		return nil
	})
	if errors.Is(err, errLostRace) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("bolt window store: workspace %q: %w", workspace, err)
	}
	return true, nil
}

// errLostRace rolls back a write transaction that found another revision.
var errLostRace = errors.New("window revision moved")

// syncGates makes the gates match the transition from before to after. Any
// permit the gate store would hand out that differs from the recorded one
// means gate and window state disagree; the transaction is rolled back.
func syncGates(tx *bolt.Tx, before, after map[LeaseID]LeaseRecord) error {
	for id, rec := range after {
		old, had := before[id]
		var (
			p   store.Permit
			err error
		)
		switch {
		case !had:
			p, err = store.OpenGateTx(tx, rec.Permit.Gate, rec.ExpiresAtMillis)
		case old.Permit == rec.Permit && old.ExpiresAtMillis == rec.ExpiresAtMillis:
			continue
		case old.Permit.Gate != rec.Permit.Gate:
			return fmt.Errorf("%w: lease %s changed gate %q to %q", ErrIncompatibleState, id, old.Permit.Gate, rec.Permit.Gate)
		default:
			p, err = store.RenewGateTx(tx, rec.Permit.Gate, rec.ExpiresAtMillis)
		}
		if err != nil {
			return fmt.Errorf("lease %s gate: %w", id, err)
		}
		if p != rec.Permit {
			return fmt.Errorf("%w: lease %s gate handed out %q/%d, window recorded %q/%d",
				ErrIncompatibleState, id, p.Gate, p.Epoch, rec.Permit.Gate, rec.Permit.Epoch)
		}
	}
	for id, old := range before {
		if _, kept := after[id]; kept {
			continue
		}
		if err := store.FenceGateTx(tx, old.Permit.Gate); err != nil {
			return fmt.Errorf("lease %s gate: %w", id, err)
		}
	}
	return nil
}

// CheckPermit reports whether p would be admitted by a head append now: nil
// if its gate is open, at p's epoch and unexpired at the store clock, an
// error wrapping store.ErrFenced otherwise.
func (b *BoltStore) CheckPermit(p store.Permit) error {
	return b.db.View(func(tx *bolt.Tx) error {
		return store.CheckPermitTx(tx, p, b.clock.NowMillis())
	})
}
