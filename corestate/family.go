package corestate

// Family is a typed view of one family of a Store: every record in it holds
// a T. It adds no state and no checks beyond the Store's.
type Family[T any] struct {
	store *Store
	name  string
}

// NewFamily returns the typed view of family name, validating the name.
func NewFamily[T any](s *Store, name string) (Family[T], error) {
	if err := validFamily(name); err != nil {
		return Family[T]{}, err
	}
	return Family[T]{store: s, name: name}, nil
}

// Name returns the family name.
func (f Family[T]) Name() string { return f.name }

// Load returns the record at key; found is false (and rev 0) when absent.
func (f Family[T]) Load(key string) (v T, rev uint64, found bool, err error) {
	rev, found, err = f.store.Load(f.name, key, &v)
	return v, rev, found, err
}

// LoadBounded is Load refusing records larger than maxBytes (ErrTooLarge).
func (f Family[T]) LoadBounded(key string, maxBytes int64) (v T, rev uint64, found bool, err error) {
	rev, found, err = f.store.LoadBounded(f.name, key, maxBytes, &v)
	return v, rev, found, err
}

// CompareAndSwap is Store.CompareAndSwap in this family.
func (f Family[T]) CompareAndSwap(key string, expectRev uint64, v T) (uint64, error) {
	return f.store.CompareAndSwap(f.name, key, expectRev, v)
}

// CompareAndDelete is Store.CompareAndDelete in this family.
func (f Family[T]) CompareAndDelete(key string, expectRev uint64) error {
	return f.store.CompareAndDelete(f.name, key, expectRev)
}

// Keys is Store.Keys for this family.
func (f Family[T]) Keys() ([]string, error) { return f.store.Keys(f.name) }

// Put returns the transaction write storing v at key if it is at expectRev.
func (f Family[T]) Put(key string, expectRev uint64, v T) Write {
	return Write{Family: f.name, Key: key, ExpectRev: expectRev, Value: v}
}

// Remove returns the transaction write deleting key if it is at expectRev.
func (f Family[T]) Remove(key string, expectRev uint64) Write {
	return Write{Family: f.name, Key: key, ExpectRev: expectRev, Delete: true}
}
