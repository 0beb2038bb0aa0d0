package meta

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Memory is a process-local Store for tests and single-process embedding.
// Write transactions run one at a time and buffer their writes until they
// commit; read transactions share the committed map. It hands out copies,
// so a caller that breaks the "do not modify" rule cannot corrupt it.
type Memory struct {
	mu   sync.RWMutex      // write-held by an Update, read-held by a View; protects data
	data map[string][]byte // committed values by key
	n    notifier
}

var (
	_ Store   = (*Memory)(nil)
	_ Watcher = (*Memory)(nil)
)

// Watch implements Watcher: in-process, Rev counts this Memory's commits.
func (m *Memory) Watch(ctx context.Context, prefix Key) (<-chan Event, error) {
	return m.n.watch(ctx, prefix)
}

// Revision implements Watcher.
func (m *Memory) Revision(ctx context.Context) (int64, error) { return m.n.revision(ctx) }

// NewMemory returns an empty store.
func NewMemory() *Memory { return &Memory{data: map[string][]byte{}} }

// View implements Store.
func (m *Memory) View(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return fn(&memTx{m: m})
}

// Update implements Store.
func (m *Memory) Update(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	tx := &memTx{m: m, writable: true, pending: map[string][]byte{}}
	if err := fn(tx); err != nil {
		return err
	}
	w := m.n.begin()
	for k, v := range tx.pending {
		if v == nil {
			delete(m.data, k)
		} else {
			m.data[k] = v
		}
		m.n.wrote(&w, Key(k), false)
	}
	m.n.commit(&w)
	return nil
}

// memTx reads pending writes first, then the committed map.
type memTx struct {
	m        *Memory
	writable bool
	pending  map[string][]byte // key -> new value, nil for a deletion
}

func (t *memTx) lookup(k string) ([]byte, bool) {
	if v, ok := t.pending[k]; ok {
		return v, v != nil
	}
	v, ok := t.m.data[k]
	return v, ok
}

func (t *memTx) Get(k Key) ([]byte, bool, error) {
	if _, _, err := ParseKey(k); err != nil {
		return nil, false, err
	}
	v, ok := t.lookup(string(k))
	if !ok {
		return nil, false, nil
	}
	return append([]byte{}, v...), true, nil
}

func (t *memTx) write(k Key, v []byte) error {
	if _, _, err := ParseKey(k); err != nil {
		return err
	}
	if !t.writable {
		return fmt.Errorf("write %q: %w", k, ErrReadOnly)
	}
	t.pending[string(k)] = v
	return nil
}

func (t *memTx) Put(k Key, v []byte) error { return t.write(k, append([]byte{}, v...)) }

func (t *memTx) Delete(k Key) error { return t.write(k, nil) }

func (t *memTx) DeletePrefix(prefix Key) error {
	if _, _, err := ParsePrefix(prefix); err != nil {
		return err
	}
	if !t.writable {
		return fmt.Errorf("delete prefix %q: %w", prefix, ErrReadOnly)
	}
	for _, k := range t.keys(string(prefix)) {
		t.pending[k] = nil
	}
	return nil
}

// keys returns the live keys starting with prefix, sorted.
func (t *memTx) keys(prefix string) []string {
	var out []string
	for k := range t.m.data {
		if strings.HasPrefix(k, prefix) {
			if v, ok := t.pending[k]; !ok || v != nil {
				out = append(out, k)
			}
		}
	}
	for k, v := range t.pending {
		if _, committed := t.m.data[k]; !committed && v != nil && strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (t *memTx) Scan(prefix Key, o ScanOptions, fn func(Key, []byte) error) error {
	if _, _, err := ParsePrefix(prefix); err != nil {
		return err
	}
	keys := t.keys(string(prefix))
	if o.Reverse {
		for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
			keys[i], keys[j] = keys[j], keys[i]
		}
	}
	if o.Limit > 0 && len(keys) > o.Limit {
		keys = keys[:o.Limit]
	}
	for _, k := range keys {
		v, _ := t.lookup(k)
		if err := fn(Key(k), append([]byte{}, v...)); err != nil {
			return err
		}
	}
	return nil
}
