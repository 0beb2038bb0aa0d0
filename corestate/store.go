package corestate

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

const (
	defaultLockTimeout = 5 * time.Second
	defaultLockRetry   = 5 * time.Millisecond
	// maxKeyBytes keeps "<hex>.previous.json" within a 255-byte file name.
	maxKeyBytes    = 120
	maxFamilyBytes = 64
	// txFamily holds transaction journals. The underscore is outside the
	// family alphabet, so no caller family can collide with it.
	txFamily = "_transactions"
)

// Options tunes a Store. The zero value is the production default.
type Options struct {
	// LockTimeout bounds how long one record lock is waited for (default 5s).
	LockTimeout time.Duration
	// LockRetry is the polling interval while a lock is held (default 5ms).
	LockRetry time.Duration
	// NoSync skips fsync of files and directories. Only for tests: a crash
	// may then lose or tear records beyond what previous copies repair.
	NoSync bool
}

// Store is one journaled namespace below a root directory. It holds no
// open files or in-memory state between calls, so any number of Store
// values (in any number of processes) may share a root.
type Store struct {
	root string
	opt  Options
	pl   *plane // set by OpenPlane: records live on a metadata plane, not below root
}

// Open returns the store below root and recovers any transaction journal a
// crashed writer left behind. Directories are created lazily on the first
// mutation, so opening a fresh root writes nothing.
func Open(root string, opt Options) (*Store, error) {
	if root == "" {
		return nil, fmt.Errorf("%w: empty root", ErrInvalidKey)
	}
	if opt.LockTimeout <= 0 {
		opt.LockTimeout = defaultLockTimeout
	}
	if opt.LockRetry <= 0 {
		opt.LockRetry = defaultLockRetry
	}
	s := &Store{root: root, opt: opt}
	if _, err := s.Recover(); err != nil {
		return nil, fmt.Errorf("corestate: open %s: %w", root, err)
	}
	return s, nil
}

// Root returns the namespace root directory ("" for a store on a plane).
func (s *Store) Root() string { return s.root }

// OnPlane reports whether the store's records live on a metadata plane
// (OpenPlane) rather than in files.
func (s *Store) OnPlane() bool { return s.pl != nil }

func validFamily(family string) error {
	if family == "" || len(family) > maxFamilyBytes {
		return fmt.Errorf("%w: family %q", ErrInvalidKey, family)
	}
	for i := 0; i < len(family); i++ {
		c := family[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w: family %q", ErrInvalidKey, family)
		}
	}
	return nil
}

func validKey(key string) error {
	if key == "" || len(key) > maxKeyBytes {
		return fmt.Errorf("%w: key of %d bytes (want 1..%d)", ErrInvalidKey, len(key), maxKeyBytes)
	}
	return nil
}

func hexKey(key string) string { return hex.EncodeToString([]byte(key)) }

func (s *Store) paths(family, key string) (recordPaths, error) {
	if err := validFamily(family); err != nil {
		return recordPaths{}, err
	}
	if err := validKey(key); err != nil {
		return recordPaths{}, err
	}
	return newRecordPaths(s.root, family, key), nil
}

// withLock runs fn holding the record's lock. With create false and the
// family directory absent, fn runs unlocked with exists=false: nothing can
// exist there, and a read must not create directories.
func (s *Store) withLock(p recordPaths, create bool, fn func() error) error {
	if create {
		if err := os.MkdirAll(p.dir, 0o700); err != nil {
			return fmt.Errorf("corestate: create %s: %w", p.dir, err)
		}
	} else if _, err := os.Stat(p.dir); errors.Is(err, os.ErrNotExist) {
		return fn()
	}
	l, err := acquireLock(p.lock, s.opt.LockTimeout, s.opt.LockRetry)
	if err != nil {
		return err
	}
	defer func() { l.release(!recordExists(p)) }()
	return fn()
}

// lockMany locks records in the given (already sorted) order, releasing
// everything on failure.
func (s *Store) lockMany(ps []recordPaths) (release func(), err error) {
	held := make([]*fileLock, 0, len(ps))
	release = func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i].release(!recordExists(ps[i]))
		}
	}
	for _, p := range ps {
		if err := os.MkdirAll(p.dir, 0o700); err != nil {
			release()
			return nil, fmt.Errorf("corestate: create %s: %w", p.dir, err)
		}
		l, err := acquireLock(p.lock, s.opt.LockTimeout, s.opt.LockRetry)
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, l)
	}
	return release, nil
}

func decodeInto(p recordPaths, e *envelope, v any) error {
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(e.Value, v); err != nil {
		var target *json.InvalidUnmarshalError
		if errors.As(err, &target) {
			// The caller passed a non-pointer; the record is fine.
			return fmt.Errorf("corestate: load %s/%q: %w", p.family, p.key, err)
		}
		return fmt.Errorf("%w: %s/%q does not match %T: %v", ErrCorrupt, p.family, p.key, v, err)
	}
	return nil
}

// Load decodes the record into v (which may be nil to fetch only the
// revision). A torn current record is repaired from its previous copy;
// both unreadable is ErrCorrupt.
func (s *Store) Load(family, key string, v any) (rev uint64, found bool, err error) {
	return s.LoadBounded(family, key, 0, v)
}

// LoadBounded is Load refusing, with ErrTooLarge and before decoding, any
// record file larger than maxBytes. maxBytes <= 0 means unbounded.
func (s *Store) LoadBounded(family, key string, maxBytes int64, v any) (rev uint64, found bool, err error) {
	raw, rev, found, err := s.loadRaw(family, key, maxBytes)
	if err != nil || !found {
		return 0, false, err
	}
	p := recordPaths{family: family, key: key}
	if err := decodeInto(p, &envelope{Revision: rev, Value: raw}, v); err != nil {
		return 0, false, err
	}
	return rev, true, nil
}

// LoadRaw returns the record's compact JSON value and revision.
func (s *Store) LoadRaw(family, key string) (value json.RawMessage, rev uint64, found bool, err error) {
	return s.loadRaw(family, key, 0)
}

func (s *Store) loadRaw(family, key string, maxBytes int64) (json.RawMessage, uint64, bool, error) {
	if s.pl != nil {
		return s.pl.loadRaw(family, key, maxBytes)
	}
	p, err := s.paths(family, key)
	if err != nil {
		return nil, 0, false, err
	}
	var e *envelope
	err = s.withLock(p, false, func() error {
		var err error
		e, err = s.readRecoverable(p, maxBytes)
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

func marshalValue(family, key string, v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("corestate: encode %s/%q: %w", family, key, err)
	}
	return compactJSON(b)
}

func revisionOf(e *envelope) uint64 {
	if e == nil {
		return 0
	}
	return e.Revision
}

// CompareAndSwap replaces the record with v if its revision is expectRev
// (0: the record must not exist) and returns the new revision, expectRev+1.
// A mismatch is a *ConflictError matching ErrConflict.
func (s *Store) CompareAndSwap(family, key string, expectRev uint64, v any) (newRev uint64, err error) {
	p, err := s.paths(family, key)
	if err != nil {
		return 0, err
	}
	value, err := marshalValue(family, key, v)
	if err != nil {
		return 0, err
	}
	if s.pl != nil {
		if err := s.pl.compareAndSwap(family, key, expectRev, value); err != nil {
			return 0, fmt.Errorf("corestate: compare-and-swap %s/%q: %w", family, key, err)
		}
		return expectRev + 1, nil
	}
	err = s.withLock(p, true, func() error {
		cur, err := s.readRecoverable(p, 0)
		if err != nil {
			return err
		}
		if got := revisionOf(cur); got != expectRev {
			return &ConflictError{Family: family, Key: key, Expected: expectRev, Actual: got}
		}
		newRev = expectRev + 1
		return s.writeJournaled(p, envelope{Revision: newRev, Value: value})
	})
	if err != nil {
		return 0, fmt.Errorf("corestate: compare-and-swap %s/%q: %w", family, key, err)
	}
	return newRev, nil
}

// CompareAndDelete removes the record if its revision is expectRev. An
// absent record with expectRev 0 is a successful no-op.
func (s *Store) CompareAndDelete(family, key string, expectRev uint64) error {
	if s.pl != nil {
		if err := s.pl.compareAndDelete(family, key, expectRev); err != nil {
			return fmt.Errorf("corestate: compare-and-delete %s/%q: %w", family, key, err)
		}
		return nil
	}
	p, err := s.paths(family, key)
	if err != nil {
		return err
	}
	err = s.withLock(p, false, func() error {
		cur, err := s.readRecoverable(p, 0)
		if err != nil {
			return err
		}
		if got := revisionOf(cur); got != expectRev {
			return &ConflictError{Family: family, Key: key, Expected: expectRev, Actual: got}
		}
		if cur == nil {
			return nil
		}
		return s.removeRecord(p)
	})
	if err != nil {
		return fmt.Errorf("corestate: compare-and-delete %s/%q: %w", family, key, err)
	}
	return nil
}

// Update runs a read-modify-write under the record lock. fn receives the
// current compact JSON value (nil when absent) and returns the replacement
// JSON, or del=true to remove the record, or (nil, false, nil) to leave it
// unchanged. An error from fn aborts without change and is returned wrapped.
// On a plane fn runs inside one plane transaction and, on an optimistic
// plane (etcd), may run more than once: it must have no other effects.
func (s *Store) Update(family, key string, fn func(cur []byte) (next []byte, del bool, err error)) error {
	if s.pl != nil {
		if err := s.pl.update(family, key, fn); err != nil {
			return fmt.Errorf("corestate: update %s/%q: %w", family, key, err)
		}
		return nil
	}
	p, err := s.paths(family, key)
	if err != nil {
		return err
	}
	err = s.withLock(p, true, func() error {
		cur, err := s.readRecoverable(p, 0)
		if err != nil {
			return err
		}
		next, del, err := applyUpdate(cur, fn)
		switch {
		case err != nil:
			return err
		case del:
			return s.removeRecord(p)
		case next != nil:
			return s.writeJournaled(p, *next)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("corestate: update %s/%q: %w", family, key, err)
	}
	return nil
}

// Keys lists the keys of a family's records, sorted bytewise. Only canonical
// record names count: next, lock and foreign files are skipped, while a
// record that survives only as its previous copy is listed (reading it
// promotes the copy).
func (s *Store) Keys(family string) ([]string, error) {
	if s.pl != nil {
		return s.pl.keys(family)
	}
	if err := validFamily(family); err != nil {
		return nil, err
	}
	return s.keysIn(family)
}

func (s *Store) keysIn(dirName string) ([]string, error) {
	dir := s.root + string(os.PathSeparator) + dirName
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("corestate: list %s: %w", dir, err)
	}
	set := make(map[string]struct{})
	for _, e := range entries {
		if k, ok := keyFromName(e.Name()); ok {
			set[k] = struct{}{}
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, nil
}

// keyFromName maps "<hex>.json" and "<hex>.previous.json" to their key.
func keyFromName(name string) (string, bool) {
	stem, ok := strings.CutSuffix(name, ".json")
	if !ok {
		return "", false
	}
	stem = strings.TrimSuffix(stem, ".previous")
	if strings.HasSuffix(stem, ".next") || stem == "" {
		return "", false
	}
	b, err := hex.DecodeString(stem)
	if err != nil || len(b) > maxKeyBytes || hex.EncodeToString(b) != stem {
		return "", false
	}
	return string(b), true
}

// applyUpdate runs an Update's fn on the current record cur (nil if
// absent) and says what to do: del to remove the record (never for an
// absent one), next to write it (the next revision), neither to leave it.
// Both backends (files and a plane) update through it.
func applyUpdate(cur *envelope, fn func(cur []byte) (next []byte, del bool, err error)) (next *envelope, del bool, err error) {
	var curValue []byte
	if cur != nil {
		curValue = append([]byte(nil), cur.Value...)
	}
	raw, del, err := fn(curValue)
	switch {
	case err != nil:
		return nil, false, err
	case del:
		return nil, cur != nil, nil
	case raw == nil:
		return nil, false, nil
	}
	value, err := compactJSON(raw)
	if err != nil {
		return nil, false, errors.New("corestate: update function returned invalid JSON")
	}
	return &envelope{Revision: revisionOf(cur) + 1, Value: value}, false, nil
}
