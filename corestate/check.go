package corestate

import (
	"errors"
	"fmt"
	"os"
)

// Check verifies every record and journal below the root without repairing
// anything: each record must have a decodable current or previous copy, and
// each pending journal must decode. It takes each record's lock in turn, so
// it is safe (if not a consistent snapshot) while others write. All problems
// are returned joined; corrupt ones match ErrCorrupt.
//
// On a plane, Check decodes every record of the families named in
// PlaneOptions.Families.
func (s *Store) Check() error {
	if s.pl != nil {
		return s.pl.check()
	}
	entries, err := os.ReadDir(s.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("corestate: check %s: %w", s.root, err)
	}
	var errs []error
	for _, e := range entries {
		family := e.Name()
		if !e.IsDir() || (family != txFamily && validFamily(family) != nil) {
			continue
		}
		keys, err := s.keysIn(family)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, key := range keys {
			if err := s.checkRecord(newRecordPaths(s.root, family, key)); err != nil {
				errs = append(errs, fmt.Errorf("corestate: check %s/%q: %w", family, key, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (s *Store) checkRecord(p recordPaths) error {
	return s.withLock(p, false, func() error {
		e, err := readEnvelope(p.current, 0)
		if err != nil || e == nil {
			prev, prevErr := readEnvelope(p.previous, 0)
			if prevErr != nil || prev == nil {
				if err == nil {
					err = prevErr
				}
				if err == nil {
					return nil // vanished since listing
				}
				return err
			}
			e = prev
		}
		if p.family == txFamily {
			if _, err := decodeJournal(e.Value); err != nil {
				return err
			}
		}
		return nil
	})
}
