package corestate

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
)

// Write is one record change inside a transaction.
type Write struct {
	Family, Key string
	// ExpectRev is the revision the record must have (0: must not exist).
	ExpectRev uint64
	// Value is JSON-encoded as the new value unless Delete is set.
	Value  any
	Delete bool
	// Assert only checks ExpectRev (under the record's lock, for the whole
	// commit) and writes nothing: a read-set fence for data the
	// transaction was computed from.
	Assert bool
}

// RecoveryReport lists what Recover did, by transaction id.
type RecoveryReport struct {
	// RolledBack are prepared transactions restored to their pre-images.
	RolledBack []string
	// RolledForward are committed transactions whose writes were completed.
	RolledForward []string
	// Busy are journals whose owner is still alive (their lock is held);
	// they were left alone.
	Busy []string
	// Diverged names records ("tx family/key") that changed after the crash
	// to something neither the pre-image nor the post-image; recovery left
	// them as they are rather than destroy a later writer's update.
	Diverged []string
}

const (
	journalVersion  = 1
	phasePrepared   = "prepared"
	phaseCommitted  = "committed"
	maxJournalBytes = 256 << 20
)

// journal is the durable transaction record. Keys and the id are hex so
// arbitrary bytes survive JSON (which would replace invalid UTF-8).
type journal struct {
	Version int            `json:"version"`
	ID      string         `json:"id"`
	Phase   string         `json:"phase"`
	Writes  []journalWrite `json:"writes"`
}

type journalWrite struct {
	Family string `json:"family"`
	Key    string `json:"key"`
	// Before is the pre-image (nil: absent); After the post-image (nil: delete).
	Before *envelope `json:"before"`
	After  *envelope `json:"after"`
}

func encodeJournal(j journal) ([]byte, error) { return json.Marshal(j) }

// decodeJournal parses and validates a journal file.
func decodeJournal(b []byte) (journal, error) {
	var j journal
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return journal{}, fmt.Errorf("%w: journal: %v", ErrCorrupt, err)
	}
	if trailing(dec) {
		return journal{}, fmt.Errorf("%w: journal: trailing data", ErrCorrupt)
	}
	if j.Version != journalVersion {
		return journal{}, fmt.Errorf("%w: journal version %d", ErrCorrupt, j.Version)
	}
	if j.Phase != phasePrepared && j.Phase != phaseCommitted {
		return journal{}, fmt.Errorf("%w: journal phase %q", ErrCorrupt, j.Phase)
	}
	id, err := hex.DecodeString(j.ID)
	if err != nil || validKey(string(id)) != nil {
		return journal{}, fmt.Errorf("%w: journal id %q", ErrCorrupt, j.ID)
	}
	seen := make(map[string]bool, len(j.Writes))
	for i := range j.Writes {
		w := &j.Writes[i]
		key, err := hex.DecodeString(w.Key)
		if err != nil || validFamily(w.Family) != nil || validKey(string(key)) != nil {
			return journal{}, fmt.Errorf("%w: journal write %d names %q/%q", ErrCorrupt, i, w.Family, w.Key)
		}
		id := w.Family + "/" + w.Key
		if seen[id] {
			return journal{}, fmt.Errorf("%w: journal writes %s twice", ErrCorrupt, id)
		}
		seen[id] = true
		for _, e := range []*envelope{w.Before, w.After} {
			if e == nil {
				continue
			}
			if e.Revision == 0 || len(e.Value) == 0 {
				return journal{}, fmt.Errorf("%w: journal write %d has an empty image", ErrCorrupt, i)
			}
			if e.Value, err = compactJSON(e.Value); err != nil {
				return journal{}, err
			}
		}
		if w.After != nil && w.After.Revision != revisionOf(w.Before)+1 {
			return journal{}, fmt.Errorf("%w: journal write %d revision does not follow its pre-image", ErrCorrupt, i)
		}
	}
	return j, nil
}

func (s *Store) journalPaths(txID string) recordPaths {
	return newRecordPaths(s.root, txFamily, txID)
}

func (s *Store) readJournal(p recordPaths) (*journal, error) {
	e, err := s.readRecoverable(p, maxJournalBytes)
	if err != nil || e == nil {
		return nil, err
	}
	j, err := decodeJournal(e.Value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.current, err)
	}
	return &j, nil
}

func (s *Store) writeJournal(p recordPaths, j journal, rev uint64) error {
	b, err := encodeJournal(j)
	if err != nil {
		return fmt.Errorf("corestate: encode journal %q: %w", j.ID, err)
	}
	return s.writeJournaled(p, envelope{Revision: rev, Value: b})
}

// Commit applies writes atomically: either every expectation holds and all
// writes become durable, or ErrConflict (a *ConflictError) is returned and
// nothing changes. Locks are taken journal first, then records sorted by
// (family, key), so concurrent commits cannot deadlock. The journal is
// written "prepared" before any record changes and "committed" after the
// last one; a crash in between is repaired by Recover (which Open runs).
// txID must be unique among pending transactions.
func (s *Store) Commit(txID string, writes []Write) error {
	if err := validKey(txID); err != nil {
		return fmt.Errorf("corestate: commit: transaction id: %w", err)
	}
	if len(writes) == 0 {
		return nil
	}
	ws := append([]Write(nil), writes...)
	sort.Slice(ws, func(i, k int) bool {
		if ws[i].Family != ws[k].Family {
			return ws[i].Family < ws[k].Family
		}
		return ws[i].Key < ws[k].Key
	})
	ws, err := mergeAssertions(ws)
	if err != nil {
		return fmt.Errorf("corestate: commit %q: %w", txID, err)
	}
	ps := make([]recordPaths, len(ws))
	values := make([]json.RawMessage, len(ws))
	for i, w := range ws {
		if s.pl == nil {
			p, err := s.paths(w.Family, w.Key)
			if err != nil {
				return fmt.Errorf("corestate: commit %q: %w", txID, err)
			}
			ps[i] = p
		}
		if !w.Delete && !w.Assert {
			if values[i], err = marshalValue(w.Family, w.Key, w.Value); err != nil {
				return fmt.Errorf("corestate: commit %q: %w", txID, err)
			}
		}
	}
	if s.pl != nil {
		if err := s.pl.commit(ws, values); err != nil {
			return fmt.Errorf("corestate: commit %q: %w", txID, err)
		}
		return nil
	}
	if err := s.commit(txID, ws, ps, values); err != nil {
		return fmt.Errorf("corestate: commit %q: %w", txID, err)
	}
	return nil
}

// mergeAssertions drops an Assert on a record that the sorted write set
// also changes with the same expectation (the change fences it already).
// Any other repeat of a record is ErrInvalidTransaction.
func mergeAssertions(ws []Write) ([]Write, error) {
	out := ws[:0:0]
	for _, w := range ws {
		if n := len(out); n > 0 && out[n-1].Family == w.Family && out[n-1].Key == w.Key {
			prev := &out[n-1]
			if (prev.Assert || w.Assert) && prev.ExpectRev == w.ExpectRev {
				if prev.Assert {
					*prev = w
				}
				continue
			}
			return nil, fmt.Errorf("%w: %s/%q written twice", ErrInvalidTransaction, w.Family, w.Key)
		}
		out = append(out, w)
	}
	return out, nil
}

func (s *Store) commit(txID string, ws []Write, ps []recordPaths, values []json.RawMessage) (err error) {
	jp := s.journalPaths(txID)
	if err := os.MkdirAll(jp.dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", jp.dir, err)
	}
	jl, err := acquireLock(jp.lock, s.opt.LockTimeout, s.opt.LockRetry)
	if err != nil {
		return err
	}
	defer func() { jl.release(!recordExists(jp)) }()
	if pending, err := s.readJournal(jp); err != nil {
		return err
	} else if pending != nil {
		return fmt.Errorf("%w: transaction id already pending", ErrConflict)
	}
	release, err := s.lockMany(ps)
	if err != nil {
		return err
	}
	defer release()

	j := journal{Version: journalVersion, ID: hex.EncodeToString([]byte(txID)), Phase: phasePrepared}
	var applied []recordPaths // parallel to j.Writes
	for i, w := range ws {
		cur, err := s.readRecoverable(ps[i], 0)
		if err != nil {
			return err
		}
		if got := revisionOf(cur); got != w.ExpectRev {
			return &ConflictError{Family: w.Family, Key: w.Key, Expected: w.ExpectRev, Actual: got}
		}
		if w.Assert {
			continue
		}
		jw := journalWrite{Family: w.Family, Key: hexKey(w.Key), Before: cur}
		if !w.Delete {
			jw.After = &envelope{Revision: w.ExpectRev + 1, Value: values[i]}
		}
		j.Writes = append(j.Writes, jw)
		applied = append(applied, ps[i])
	}
	if len(j.Writes) == 0 {
		return nil // assertions only: they held, nothing to write
	}

	if err := s.writeJournal(jp, j, 1); err != nil {
		// The journal never became "prepared" with any record touched; a
		// partial journal file is harmless but is removed when possible.
		if !isInjected(err) {
			_ = s.removeRecord(jp)
		}
		return err
	}
	defer func() {
		// A real failure after prepare is repaired now, while the locks are
		// still held, so no reader sees a half-applied set. An injected
		// crash leaves the disk as it is for Recover to find.
		if err != nil && !isInjected(err) {
			if _, rerr := s.resolve(jp, &j, applied, nil); rerr != nil {
				err = errors.Join(err, fmt.Errorf("in-place recovery failed, journal left for Recover: %w", rerr))
			}
		}
	}()
	if err := hit("tx.after-prepare"); err != nil {
		return err
	}
	for i := range j.Writes {
		if err := s.applyImage(applied[i], j.Writes[i].After); err != nil {
			return err
		}
		if err := hit("tx.after-apply-" + strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	// j stays "prepared" in memory until the committed journal is durable,
	// so a failure writing it rolls back in place: the caller's error then
	// really means "not applied".
	committed := j
	committed.Phase = phaseCommitted
	if err := s.writeJournal(jp, committed, 2); err != nil {
		return err
	}
	j = committed
	if err := hit("tx.after-commit"); err != nil {
		return err
	}
	// Past the commit point the transaction has happened. A journal that
	// cannot be removed is rolled forward (a no-op) by the next Recover, so
	// it is not reported as a failure of this Commit.
	_ = s.removeRecord(jp)
	return nil
}

func isInjected(err error) bool {
	var c injectedCrash
	return errors.As(err, &c)
}

// applyImage makes the record equal to img (nil: absent).
func (s *Store) applyImage(p recordPaths, img *envelope) error {
	if img == nil {
		return s.removeRecord(p)
	}
	return s.writeJournaled(p, *img)
}

// resolve finishes a journal whose record locks are held: prepared rolls
// back, committed rolls forward, then the journal is removed. A record that
// matches neither image was changed by someone after the crash and is left
// alone (reported in Diverged).
func (s *Store) resolve(jp recordPaths, j *journal, ps []recordPaths, rep *RecoveryReport) (rolledBack bool, err error) {
	rolledBack = j.Phase == phasePrepared
	for i, w := range j.Writes {
		cur, err := s.readRecoverable(ps[i], 0)
		if err != nil {
			return rolledBack, err
		}
		from, to := w.After, w.Before
		if !rolledBack {
			from, to = w.Before, w.After
		}
		switch {
		case sameEnvelope(cur, to):
			continue
		case sameEnvelope(cur, from):
			if err := s.applyImage(ps[i], to); err != nil {
				return rolledBack, err
			}
		default:
			if rep != nil {
				key, _ := hex.DecodeString(w.Key)
				id, _ := hex.DecodeString(j.ID)
				rep.Diverged = append(rep.Diverged, fmt.Sprintf("%s %s/%q", id, w.Family, key))
			}
		}
	}
	return rolledBack, s.removeRecord(jp)
}

// PendingTransactions lists the ids of transaction journals on disk: those
// in flight in a live process and those a crash left for Recover.
// A store on a plane has none: its transactions are the plane's.
func (s *Store) PendingTransactions() ([]string, error) {
	if s.pl != nil {
		return nil, nil
	}
	return s.keysIn(txFamily)
}

// Recover resolves every transaction journal whose owner is gone: prepared
// ones roll back to their pre-images, committed ones roll forward. A journal
// whose lock is held belongs to a live Commit and is reported as Busy.
// Recover is idempotent and safe to run concurrently with other operations;
// Open runs it. A journal that cannot be decoded is ErrCorrupt and stops
// recovery, because guessing would violate the transaction's atomicity.
//
// A store on a plane has nothing to recover: every Commit is one plane
// transaction.
func (s *Store) Recover() (RecoveryReport, error) {
	var rep RecoveryReport
	if s.pl != nil {
		return rep, nil
	}
	ids, err := s.PendingTransactions()
	if err != nil {
		return rep, err
	}
	for _, id := range ids {
		if err := s.recoverOne(id, &rep); err != nil {
			return rep, fmt.Errorf("corestate: recover transaction %q: %w", id, err)
		}
	}
	return rep, nil
}

func (s *Store) recoverOne(id string, rep *RecoveryReport) error {
	jp := s.journalPaths(id)
	jl, err := acquireLock(jp.lock, 0, 0)
	if errors.Is(err, ErrLockTimeout) {
		rep.Busy = append(rep.Busy, id)
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { jl.release(!recordExists(jp)) }()
	j, err := s.readJournal(jp)
	if err != nil {
		return err
	}
	if j == nil {
		// Finished (or never prepared) between listing and locking; only
		// a stray next file may remain.
		return s.removeRecord(jp)
	}
	ps := make([]recordPaths, len(j.Writes))
	for i, w := range j.Writes {
		key, _ := hex.DecodeString(w.Key)
		ps[i] = newRecordPaths(s.root, w.Family, string(key))
	}
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		pa, pb := ps[order[a]], ps[order[b]]
		if pa.family != pb.family {
			return pa.family < pb.family
		}
		return pa.key < pb.key
	})
	sorted := make([]recordPaths, len(ps))
	for i, k := range order {
		sorted[i] = ps[k]
	}
	release, err := s.lockMany(sorted)
	if err != nil {
		return err
	}
	defer release()
	back, err := s.resolve(jp, j, ps, rep)
	if err != nil {
		return err
	}
	if back {
		rep.RolledBack = append(rep.RolledBack, id)
	} else {
		rep.RolledForward = append(rep.RolledForward, id)
	}
	return nil
}
