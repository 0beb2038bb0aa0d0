package window

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
)

// Namespace is the metadata-plane namespace holding one encoded Snapshot
// per workspace name (the bucket "windows" of meta.db). It lives on the
// same plane as the heads and lease gates so one transaction covers both.
const Namespace = "windows"

var windowsSpace = meta.NewSpace(Namespace)

// MetaStore is a durable Store on the metadata plane shared with store's
// heads and lease gates. In the same transaction as each window
// compare-and-swap it opens the gate of every added lease (at the lease's
// expiry, checking the permit the coordinator recorded), renews the gate of
// every renewed lease (a new epoch fences the old permit), and fences the
// gate of every removed (closed or expired) lease. Because gates carry
// their expiry and store.CheckPermitTx compares it with the store clock, an
// expired lease is fenced even before any sweep removes it.
type MetaStore struct {
	plane meta.Store
	clock Clock
}

var _ Store = (*MetaStore)(nil)

// NewMetaStore returns a store on plane (store.Store.Meta). clock is the
// store clock CheckPermit measures expiry against; it must be the clock the
// head append uses.
func NewMetaStore(plane meta.Store, clock Clock) *MetaStore {
	return &MetaStore{plane: plane, clock: clock}
}

// Load implements Store.
func (m *MetaStore) Load(ctx context.Context, workspace string) (Snapshot, error) {
	var s Snapshot
	err := m.plane.View(ctx, func(tx meta.Tx) error {
		var err error
		s, _, err = loadTx(tx, workspace)
		return err
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("window store: %w", err)
	}
	return s, nil
}

// windowKey is workspace's key; ok is false for a name no snapshot can be
// stored under (empty or over meta.MaxPartSize), which is therefore idle.
func windowKey(workspace string) (meta.Key, bool) {
	if workspace == "" || len(workspace) > meta.MaxPartSize {
		return nil, false
	}
	return windowsSpace.Key([]byte(workspace)), true
}

// loadTx reads a workspace's snapshot inside tx; present is false (and the
// snapshot idle) when nothing is stored.
func loadTx(tx meta.Tx, workspace string) (s Snapshot, present bool, err error) {
	k, ok := windowKey(workspace)
	if !ok {
		return IdleSnapshot(workspace), false, nil
	}
	raw, found, err := tx.Get(k)
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("workspace %q: %w", workspace, err)
	}
	if !found {
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
func (m *MetaStore) CompareAndSwap(ctx context.Context, workspace string, expect uint64, next Snapshot) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkReplacement(workspace, expect, next); err != nil {
		return false, fmt.Errorf("window store: %w", err)
	}
	k, ok := windowKey(workspace)
	if !ok {
		return false, fmt.Errorf("window store: workspace name %q cannot be stored: %w", workspace, meta.ErrInvalidKey)
	}
	enc, err := EncodeSnapshot(next)
	if err != nil {
		return false, fmt.Errorf("window store: %w", err)
	}
	// A lost race is decided by a read-only transaction first: the local
	// plane (bbolt) commits and fsyncs even an empty write transaction, and
	// losers of a contended window would otherwise each pay for one.
	// Only the revision is decoded here; the write transaction below
	// decodes and validates the whole current state.
	var current struct {
		Version  uint32 `json:"version"`
		Revision uint64 `json:"revision"`
	}
	_ = m.plane.View(ctx, func(tx meta.Tx) error {
		current.Version = StateVersion
		if raw, found, err := tx.Get(k); err != nil || (found && json.Unmarshal(raw, &current) != nil) {
			current.Version = 0
		}
		return nil
	})
	// Undecodable or foreign-version state goes on to the full check,
	// which reports it.
	if current.Version == StateVersion && current.Revision != expect {
		return false, nil
	}
	err = m.plane.Update(ctx, func(tx meta.Tx) error {
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
		return tx.Put(k, enc)
	})
	if errors.Is(err, errLostRace) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("window store: workspace %q: %w", workspace, err)
	}
	return true, nil
}

// errLostRace rolls back a write transaction that found another revision.
var errLostRace = errors.New("window revision moved")

// syncGates makes the gates match the transition from before to after. Any
// permit the gate store would hand out that differs from the recorded one
// means gate and window state disagree; the transaction is rolled back.
func syncGates(tx meta.Tx, before, after map[LeaseID]LeaseRecord) error {
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
func (m *MetaStore) CheckPermit(p store.Permit) error {
	return m.plane.View(context.Background(), func(tx meta.Tx) error {
		return store.CheckPermitTx(tx, p, m.clock.NowMillis())
	})
}
