package blobs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Mem is an in-memory Store, for tests of the layers above the plane.
// Nothing it holds survives the process. Content is stored dense: its IDs
// are Sum's, also for files PutFile reads.
type Mem struct {
	mu      sync.Mutex
	objects map[ID]memObject
}

type memObject struct {
	b   []byte
	mod time.Time
}

var _ Store = (*Mem)(nil)

// NewMem returns an empty in-memory plane.
func NewMem() *Mem { return &Mem{objects: make(map[ID]memObject)} }

// Put stores what r yields.
func (m *Mem) Put(r io.Reader) (ID, int64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return ID{}, int64(len(b)), fmt.Errorf("write blob: %w", err)
	}
	id := Sum(b)
	m.publish(map[ID][]byte{id: b})
	return id, int64(len(b)), nil
}

// PutBytes stores p.
func (m *Mem) PutBytes(p []byte) (ID, error) {
	id, _, err := m.Put(bytes.NewReader(p))
	return id, err
}

// PutFile stores the content of the file at path.
func (m *Mem) PutFile(path string) (ID, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return ID{}, 0, fmt.Errorf("write blob from %s: %w", path, err)
	}
	return m.Put(bytes.NewReader(b))
}

func (m *Mem) publish(objs map[ID][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for id, b := range objs {
		if _, ok := m.objects[id]; !ok {
			m.objects[id] = memObject{b: b, mod: now}
		}
	}
}

func (m *Mem) get(id ID) ([]byte, error) {
	m.mu.Lock()
	o, ok := m.objects[id]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("blob %s: %w", id.Short(), ErrNotFound)
	}
	if !Matches(o.b, id) {
		return nil, fmt.Errorf("%w: blob %s: content hashes to %s", ErrCorrupt, id.Short(), Sum(o.b).Short())
	}
	return o.b, nil
}

// Open opens object id, verified.
func (m *Mem) Open(id ID) (io.ReadCloser, error) {
	b, err := m.get(id)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Read returns object id's content, verified.
func (m *Mem) Read(id ID) ([]byte, error) {
	b, err := m.get(id)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

// Stat returns object id's size.
func (m *Mem) Stat(id ID) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[id]
	if !ok {
		return Info{}, fmt.Errorf("blob %s: %w", id.Short(), ErrNotFound)
	}
	return Info{ID: id, Size: int64(len(o.b)), ModTime: o.mod}, nil
}

// List calls fn for every object.
func (m *Mem) List(fn func(Info) error) error {
	m.mu.Lock()
	infos := make([]Info, 0, len(m.objects))
	for id, o := range m.objects {
		infos = append(infos, Info{ID: id, Size: int64(len(o.b)), ModTime: o.mod})
	}
	m.mu.Unlock()
	for _, in := range infos {
		if err := fn(in); err != nil {
			return err
		}
	}
	return nil
}

// Delete removes object id.
func (m *Mem) Delete(id ID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, id)
	return nil
}

// Corrupt replaces object id's content by b without changing its ID (a
// test hook for verification).
func (m *Mem) Corrupt(id ID, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[id] = memObject{b: b, mod: time.Now()}
}

// NewBatch starts a batch; its objects appear together at Commit.
func (m *Mem) NewBatch() Batch { return &memBatch{m: m, pending: make(map[ID][]byte)} }

type memBatch struct {
	m       *Mem
	mu      sync.Mutex
	pending map[ID][]byte
}

func (b *memBatch) Put(r io.Reader) (ID, int64, error) {
	p, err := io.ReadAll(r)
	if err != nil {
		return ID{}, int64(len(p)), fmt.Errorf("write blob: %w", err)
	}
	id := Sum(p)
	b.mu.Lock()
	b.pending[id] = p
	b.mu.Unlock()
	return id, int64(len(p)), nil
}

func (b *memBatch) PutBytes(p []byte) (ID, error) {
	id, _, err := b.Put(bytes.NewReader(p))
	return id, err
}

func (b *memBatch) PutFile(path string) (ID, int64, error) {
	p, err := os.ReadFile(path)
	if err != nil {
		return ID{}, 0, fmt.Errorf("write blob from %s: %w", path, err)
	}
	return b.Put(bytes.NewReader(p))
}

func (b *memBatch) Commit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m.publish(b.pending)
	b.pending = make(map[ID][]byte)
	return nil
}

func (b *memBatch) Abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = make(map[ID][]byte)
}
