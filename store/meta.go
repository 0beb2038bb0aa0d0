package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Small durable key/value records for upper layers (conflict records,
// mount records), one bucket per namespace under the meta bucket.

func checkMetaNames(ns, key string) error {
	if ns == "" {
		return fmt.Errorf("%w: empty metadata namespace", ErrInvalidName)
	}
	if key == "" || len(key) > bolt.MaxKeySize {
		return fmt.Errorf("%w: metadata key %q in %q", ErrInvalidName, key, ns)
	}
	return nil
}

// PutMeta stores value under (ns, key), replacing any previous value.
func (s *Store) PutMeta(ns, key string, value []byte) error {
	if err := checkMetaNames(ns, key); err != nil {
		return err
	}
	err := s.update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketMeta).CreateBucketIfNotExists([]byte(ns))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), value)
	})
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
	err := s.view(func(tx *bolt.Tx) error {
		var v []byte
		if b := tx.Bucket(bucketMeta).Bucket([]byte(ns)); b != nil {
			v = b.Get([]byte(key))
		}
		if v == nil {
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
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta).Bucket([]byte(ns))
		if b == nil {
			return nil
		}
		return b.Delete([]byte(key))
	})
	if err != nil {
		return fmt.Errorf("delete meta %s/%s: %w", ns, key, err)
	}
	return nil
}

// ListMeta returns every record of namespace ns (empty if none).
func (s *Store) ListMeta(ns string) (map[string][]byte, error) {
	if ns == "" {
		return nil, fmt.Errorf("%w: empty metadata namespace", ErrInvalidName)
	}
	out := map[string][]byte{}
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta).Bucket([]byte(ns))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte{}, v...)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list meta %s: %w", ns, err)
	}
	return out, nil
}
