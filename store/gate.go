package store

import (
	"encoding/json"
	"fmt"

	"github.com/acyclicfs/acyclicfs/meta"
)

// Lease gates fence publications. A gate belongs to one lease; every open
// or renewal bumps its epoch and hands out a Permit for that epoch. A head
// append that carries a permit commits only if, inside the same bbolt
// metadata transaction (meta.Tx), the gate is open, at the permit's epoch, and unexpired at the
// store's clock. Closing, renewing or expiring a lease therefore linearizes
// exactly against publication: a fenced writer can never publish.
//
// On etcd the fencing token of a publication is the revision its permit
// was granted at: the gate key's mod revision, which the head append reads
// (CheckPermitTx) and so compares in the Txn that appends the head
// (etcdmeta's read set: "mod_revision(gate) == granted"). A renewal, a
// fence or the end of the granting process's session (the gate is bound
// to its etcd lease, see putGate) changes or deletes the key, the compare
// fails, and the append runs again to find ErrFenced.

var bucketGates = []byte("gates")

// spaceGates holds one gateRecord per gate id (bucket gates).
var spaceGates = meta.NewSpace(string(bucketGates))

// Permit authorizes head publications on behalf of one lease epoch.
type Permit struct {
	Gate  string `json:"gate"`
	Epoch uint64 `json:"epoch"`
}

// gateRecord is the stored state of one gate.
type gateRecord struct {
	Epoch     uint64 `json:"epoch"`
	ExpiresAt int64  `json:"expires_at_ms"`
	Open      bool   `json:"open"`
}

func loadGate(tx meta.Tx, gate string) (gateRecord, bool, error) {
	var g gateRecord
	if gate == "" || len(gate) > meta.MaxPartSize {
		return g, false, nil // no such gate can have been opened
	}
	v, ok, err := tx.Get(spaceGates.Key([]byte(gate)))
	if err != nil || !ok {
		return g, false, err
	}
	if err := json.Unmarshal(v, &g); err != nil {
		return g, false, fmt.Errorf("%w: gate %q: %v", ErrCorrupt, gate, err)
	}
	return g, true, nil
}

// putGate stores a gate. On a plane with sessions (meta.SessionTx: etcd)
// the record is bound to this process's session, so a process that dies or
// pauses past the session's TTL loses its gates, and every permit of them
// is fenced (an unknown gate fences like a closed one) whatever the
// clocks say. Elsewhere the expiry in the record, checked against the
// store clock, is all there is.
func putGate(tx meta.Tx, gate string, g gateRecord) error {
	v, err := json.Marshal(g)
	if err != nil {
		return err
	}
	k := spaceGates.Key([]byte(gate))
	if st, ok := planeTx(tx).(meta.SessionTx); ok {
		return st.PutSession(k, v)
	}
	return tx.Put(k, v)
}

// planeTx returns the plane's own transaction under the store's wrapper.
func planeTx(tx meta.Tx) meta.Tx {
	if st, ok := tx.(*stx); ok {
		return st.Tx
	}
	return tx
}

// OpenGateTx opens (or re-opens) the gate for a lease with a new epoch and
// returns the permit for it. Any older permit of the gate is fenced.
func OpenGateTx(tx meta.Tx, gate string, expiresAtMs int64) (Permit, error) {
	if gate == "" {
		return Permit{}, fmt.Errorf("open gate: empty gate id")
	}
	g, _, err := loadGate(tx, gate)
	if err != nil {
		return Permit{}, err
	}
	g.Epoch++
	g.ExpiresAt = expiresAtMs
	g.Open = true
	if err := putGate(tx, gate, g); err != nil {
		return Permit{}, fmt.Errorf("open gate %q: %w", gate, err)
	}
	return Permit{Gate: gate, Epoch: g.Epoch}, nil
}

// RenewGateTx is OpenGateTx for an existing open gate: the old permit is
// fenced and a new one returned. Renewing a closed or unknown gate fails with
// ErrFenced.
func RenewGateTx(tx meta.Tx, gate string, expiresAtMs int64) (Permit, error) {
	g, ok, err := loadGate(tx, gate)
	if err != nil {
		return Permit{}, err
	}
	if !ok || !g.Open {
		return Permit{}, fmt.Errorf("renew gate %q: %w", gate, ErrFenced)
	}
	return OpenGateTx(tx, gate, expiresAtMs)
}

// FenceGateTx closes the gate; every permit of it stops working. Fencing an
// unknown or closed gate is a no-op.
func FenceGateTx(tx meta.Tx, gate string) error {
	g, ok, err := loadGate(tx, gate)
	if err != nil || !ok || !g.Open {
		return err
	}
	g.Open = false
	return putGate(tx, gate, g)
}

// DeleteGateTx forgets a closed gate entirely (garbage collection of old
// leases). An open gate is fenced first.
func DeleteGateTx(tx meta.Tx, gate string) error {
	return tx.Delete(spaceGates.Key([]byte(gate)))
}

// CheckPermitTx returns nil if p is the current epoch of an open gate that
// has not expired at nowMs, and an error wrapping ErrFenced otherwise.
func CheckPermitTx(tx meta.Tx, p Permit, nowMs int64) error {
	g, ok, err := loadGate(tx, p.Gate)
	if err != nil {
		return err
	}
	switch {
	case !ok:
		return fmt.Errorf("gate %q unknown: %w", p.Gate, ErrFenced)
	case !g.Open:
		return fmt.Errorf("gate %q closed: %w", p.Gate, ErrFenced)
	case g.Epoch != p.Epoch:
		return fmt.Errorf("gate %q epoch %d superseded by %d: %w", p.Gate, p.Epoch, g.Epoch, ErrFenced)
	case nowMs >= g.ExpiresAt:
		return fmt.Errorf("gate %q expired at %d (now %d): %w", p.Gate, g.ExpiresAt, nowMs, ErrFenced)
	}
	return nil
}

// PruneGates deletes every gate that is closed or expired at the store
// clock: no permit of such a gate can pass CheckPermitTx again (an unknown
// gate is fenced just like a closed one), so forgetting it changes no
// outcome. Windows open one gate per lease; gc calls this so they do not
// accumulate. It returns how many gates were deleted.
func (s *Store) PruneGates() (int, error) {
	if s.readOnly {
		return 0, fmt.Errorf("prune gates: %w", ErrReadOnly)
	}
	now := s.Now()
	n := 0
	err := s.updateMeta(func(tx meta.Tx) error {
		var dead []meta.Key
		err := tx.Scan(spaceGates.Prefix(nil), meta.ScanOptions{}, func(k meta.Key, v []byte) error {
			var g gateRecord
			if err := json.Unmarshal(v, &g); err != nil {
				return fmt.Errorf("%w: gate %q: %v", ErrCorrupt, spaceGates.Leaf(k), err)
			}
			if !g.Open || now >= g.ExpiresAt {
				dead = append(dead, append(meta.Key(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range dead {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		n = len(dead)
		return nil
	})
	return n, err
}
