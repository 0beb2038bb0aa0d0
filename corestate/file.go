package corestate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// recordPaths names the files of one (family, key) record.
type recordPaths struct {
	family, key string
	dir         string
	current     string // <hex>.json
	previous    string // <hex>.previous.json: the last good copy during rotation
	next        string // <hex>.next.json: the replacement being written
	lock        string // <hex>.lock
}

func newRecordPaths(root, family, key string) recordPaths {
	dir := filepath.Join(root, family)
	stem := hexKey(key)
	return recordPaths{
		family:   family,
		key:      key,
		dir:      dir,
		current:  filepath.Join(dir, stem+".json"),
		previous: filepath.Join(dir, stem+".previous.json"),
		next:     filepath.Join(dir, stem+".next.json"),
		lock:     filepath.Join(dir, stem+".lock"),
	}
}

// readFile reads path fully; a missing file is (nil, false, nil). With
// maxBytes > 0 a larger file is ErrTooLarge before any decoding, and a file
// that grows past the bound while being read is too.
func readFile(path string, maxBytes int64) ([]byte, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("corestate: open %s: %w", path, err)
	}
	defer f.Close()
	var r io.Reader = f
	if maxBytes > 0 {
		st, err := f.Stat()
		if err != nil {
			return nil, false, fmt.Errorf("corestate: stat %s: %w", path, err)
		}
		if st.Size() > maxBytes {
			return nil, false, fmt.Errorf("%w: %s is %d bytes, bound %d", ErrTooLarge, path, st.Size(), maxBytes)
		}
		r = io.LimitReader(f, maxBytes+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, false, fmt.Errorf("corestate: read %s: %w", path, err)
	}
	if maxBytes > 0 && int64(len(b)) > maxBytes {
		return nil, false, fmt.Errorf("%w: %s grew beyond bound %d", ErrTooLarge, path, maxBytes)
	}
	return b, true, nil
}

func readEnvelope(path string, maxBytes int64) (*envelope, error) {
	b, ok, err := readFile(path, maxBytes)
	if err != nil || !ok {
		return nil, err
	}
	e, err := decodeEnvelope(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &e, nil
}

// readRecoverable is the seed's read_recoverable: a good current wins; a
// missing or unparseable current falls back to previous, which is then
// promoted to current so the repair is durable. Both bad is ErrCorrupt
// (the current file's error). Must be called with the record lock held.
func (s *Store) readRecoverable(p recordPaths, maxBytes int64) (*envelope, error) {
	cur, curErr := readEnvelope(p.current, maxBytes)
	if curErr == nil && cur != nil {
		return cur, nil
	}
	if curErr != nil && errors.Is(curErr, ErrTooLarge) {
		return nil, curErr
	}
	prev, prevErr := readEnvelope(p.previous, maxBytes)
	if prevErr == nil && prev != nil {
		if err := s.promotePrevious(p); err != nil {
			return nil, err
		}
		return prev, nil
	}
	if curErr != nil {
		return nil, curErr
	}
	// Current absent: report a bad previous rather than pretending absence.
	return nil, prevErr
}

func (s *Store) promotePrevious(p recordPaths) error {
	b, err := os.ReadFile(p.previous)
	if err != nil {
		return fmt.Errorf("corestate: promote %s: %w", p.previous, err)
	}
	if err := s.writeSynced(p.current, b); err != nil {
		return err
	}
	return s.syncDir(p.dir)
}

// writeSynced creates or truncates path with b and fsyncs it.
func (s *Store) writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("corestate: create %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("corestate: write %s: %w", path, err)
	}
	if !s.opt.NoSync {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("corestate: fsync %s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("corestate: close %s: %w", path, err)
	}
	return nil
}

// writeJournaled is the seed's write_journaled: next is written and synced,
// current rotates to previous, next becomes current, the directory is
// synced, and only then previous is dropped. A crash at any point leaves a
// complete old or new record reachable through readRecoverable.
func (s *Store) writeJournaled(p recordPaths, e envelope) error {
	b, err := encodeEnvelope(e)
	if err != nil {
		return fmt.Errorf("corestate: encode %s/%q: %w", p.family, p.key, err)
	}
	if err := s.writeSynced(p.next, b); err != nil {
		return err
	}
	if err := hit("record.after-next"); err != nil {
		return err
	}
	if err := removeIfPresent(p.previous); err != nil {
		return err
	}
	if err := os.Rename(p.current, p.previous); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("corestate: rotate %s: %w", p.current, err)
	}
	if err := hit("record.after-rotate"); err != nil {
		return err
	}
	if err := os.Rename(p.next, p.current); err != nil {
		if _, statErr := os.Stat(p.current); errors.Is(statErr, os.ErrNotExist) {
			_ = os.Rename(p.previous, p.current)
		}
		return fmt.Errorf("corestate: install %s: %w", p.current, err)
	}
	if err := s.syncDir(p.dir); err != nil {
		return err
	}
	return removeIfPresent(p.previous)
}

// removeRecord deletes every file of a record durably (the lock file is
// handled by the lock's release).
func (s *Store) removeRecord(p recordPaths) error {
	for _, path := range []string{p.next, p.previous, p.current} {
		if err := removeIfPresent(path); err != nil {
			return err
		}
	}
	return s.syncDir(p.dir)
}

func removeIfPresent(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("corestate: remove %s: %w", path, err)
	}
	return nil
}

func (s *Store) syncDir(dir string) error {
	if s.opt.NoSync {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("corestate: open dir %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("corestate: fsync dir %s: %w", dir, err)
	}
	return nil
}

// recordExists reports whether any data file of the record is present; a
// lock file of an absent record is unlinked on release.
func recordExists(p recordPaths) bool {
	for _, path := range []string{p.current, p.previous, p.next} {
		if _, err := os.Lstat(path); err == nil {
			return true
		}
	}
	return false
}
