package window

import (
	"context"
	"fmt"
	"sync"
)

// MemoryStore is a process-local Store for tests and single-process
// embedding. It validates every snapshot it stores and hands out deep
// copies, so callers never share lease maps with it. It has no lease gates:
// permits are recorded but not enforced.
type MemoryStore struct {
	mu sync.Mutex // protects states
	// states maps workspace name to its stored state.
	states map[string]memoryEntry
}

// memoryEntry is one stored state: a validated snapshot, or the decode
// error of raw bytes injected with SetRaw.
type memoryEntry struct {
	snap Snapshot
	err  error
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{states: make(map[string]memoryEntry)}
}

// Load implements Store.
func (m *MemoryStore) Load(ctx context.Context, workspace string) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.states[workspace]
	switch {
	case !ok:
		return IdleSnapshot(workspace), nil
	case e.err != nil:
		return Snapshot{}, fmt.Errorf("memory window store: workspace %q: %w", workspace, e.err)
	}
	return e.snap.Clone(), nil
}

// CompareAndSwap implements Store.
func (m *MemoryStore) CompareAndSwap(ctx context.Context, workspace string, expect uint64, next Snapshot) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkReplacement(workspace, expect, next); err != nil {
		return false, fmt.Errorf("memory window store: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var current uint64
	if e, ok := m.states[workspace]; ok {
		if e.err != nil {
			return false, fmt.Errorf("memory window store: workspace %q: %w", workspace, e.err)
		}
		current = e.snap.Revision
	}
	if current != expect {
		return false, nil
	}
	m.states[workspace] = memoryEntry{snap: next.Clone()}
	return true, nil
}

// SetRaw replaces a workspace's state with the decoding of raw, as if those
// bytes had been stored; undecodable bytes make every later access fail with
// ErrIncompatibleState. It exists for fault-injection tests.
func (m *MemoryStore) SetRaw(workspace string, raw []byte) {
	s, err := DecodeSnapshot(raw)
	if err == nil && s.Workspace != workspace {
		err = fmt.Errorf("%w: state of %q stored under %q", ErrIncompatibleState, s.Workspace, workspace)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states[workspace] = memoryEntry{snap: s, err: err}
}
