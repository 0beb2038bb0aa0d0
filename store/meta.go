package store

import (
	"fmt"

	"github.com/acyclicfs/acyclicfs/meta"
)

// Small durable key/value records for upper layers (conflict records,
// mount records), one metadata-plane namespace meta/<ns> each (a bucket
// per namespace under the meta bucket).

func metaSpace(ns string) meta.Space { return meta.NewSpace(string(bucketMeta), ns) }

func checkMetaNames(ns, key string) error {
	if ns == "" || len(ns) > meta.MaxPartSize {
		return fmt.Errorf("%w: metadata namespace %q", ErrInvalidName, ns)
	}
	if key == "" || len(key) > meta.MaxPartSize {
		return fmt.Errorf("%w: metadata key %q in %q", ErrInvalidName, key, ns)
	}
	return nil
}

// PutMeta stores value under (ns, key), replacing any previous value.
func (s *Store) PutMeta(ns, key string, value []byte) error {
	if err := checkMetaNames(ns, key); err != nil {
		return err
	}
	err := s.updateMeta(func(tx meta.Tx) error { return tx.Put(metaSpace(ns).Key([]byte(key)), value) })
	if err != nil {
		return fmt.Errorf("put meta %s/%s: %w", ns, key, err)
	}
	return nil
}

// GetMeta returns the value under (ns, key) or ErrNotFound.
func (s *Store) GetMeta(ns, key string) ([]byte, error) {
	if err := checkMetaNames(ns, key); err != nil {
		return nil, err
	}
	var out []byte
	err := s.viewMeta(func(tx meta.Tx) error {
		v, ok, err := tx.Get(metaSpace(ns).Key([]byte(key)))
		if err != nil {
			return fmt.Errorf("meta %s/%s: %w", ns, key, err)
		}
		if !ok {
			return fmt.Errorf("meta %s/%s: %w", ns, key, ErrNotFound)
		}
		out = append([]byte{}, v...)
		return nil
	})
	return out, err
}

// DeleteMeta removes (ns, key); deleting a missing key is not an error.
func (s *Store) DeleteMeta(ns, key string) error {
	if err := checkMetaNames(ns, key); err != nil {
		return err
	}
	err := s.updateMeta(func(tx meta.Tx) error { return tx.Delete(metaSpace(ns).Key([]byte(key))) })
	if err != nil {
		return fmt.Errorf("delete meta %s/%s: %w", ns, key, err)
	}
	return nil
}

// ListMeta returns every record of namespace ns (empty if none).
func (s *Store) ListMeta(ns string) (map[string][]byte, error) {
	if ns == "" || len(ns) > meta.MaxPartSize {
		return nil, fmt.Errorf("%w: metadata namespace %q", ErrInvalidName, ns)
	}
	out := map[string][]byte{}
	sp := metaSpace(ns)
	err := s.viewMeta(func(tx meta.Tx) error {
		return tx.Scan(sp.Prefix(nil), meta.ScanOptions{}, func(k meta.Key, v []byte) error {
			out[string(sp.Leaf(k))] = append([]byte{}, v...)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list meta %s: %w", ns, err)
	}
	return out, nil
}

// MetaRecord is one (namespace, key, value) of PutMetas.
type MetaRecord struct {
	NS, Key string
	Value   []byte
}

// PutMetas stores recs in one transaction: all or none.
func (s *Store) PutMetas(recs []MetaRecord) error {
	for _, r := range recs {
		if err := checkMetaNames(r.NS, r.Key); err != nil {
			return err
		}
	}
	err := s.updateMeta(func(tx meta.Tx) error {
		for _, r := range recs {
			if err := tx.Put(metaSpace(r.NS).Key([]byte(r.Key)), r.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put %d metadata records: %w", len(recs), err)
	}
	return nil
}
