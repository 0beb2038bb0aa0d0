package store

import (
	"slices"
	"sync"
)

// treeCache keeps decoded trees by ID for GetTree. A stored tree never
// changes (its ID is its content's hash, verified when it was first
// decoded), yet the same trees are decoded again and again: a lease end
// in place loads the root and every changed directory in the capture,
// the preservation, the publish, the plan and the detection (each load
// hashes the encoding to verify it and allocates every name). Callers get
// a copy they may change. GC empties the cache (a swept tree must read as
// missing); Check reads the database, never the cache. Base references
// expanded from DIR are not cached here (DIR can change).
type treeCache struct {
	mu      sync.Mutex
	m       map[ID]*Tree
	entries int // total entries held, bounded by treeCacheEntries
}

// treeCacheEntries bounds the entries the cache holds (about 100 bytes
// each): past it, arbitrary trees are dropped.
const treeCacheEntries = 1 << 18

func (c *treeCache) get(id ID) *Tree {
	c.mu.Lock()
	t := c.m[id]
	c.mu.Unlock()
	if t == nil {
		return nil
	}
	return &Tree{Entries: slices.Clone(t.Entries)}
}

func (c *treeCache) put(id ID, t *Tree) {
	if len(t.Entries) > treeCacheEntries/16 {
		return // a huge listing would push out everything else
	}
	cp := &Tree{Entries: slices.Clone(t.Entries)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[ID]*Tree{}
	}
	if _, ok := c.m[id]; ok {
		return
	}
	for k, old := range c.m {
		if c.entries+len(cp.Entries) <= treeCacheEntries {
			break
		}
		delete(c.m, k)
		c.entries -= len(old.Entries)
	}
	c.m[id] = cp
	c.entries += len(cp.Entries)
}

func (c *treeCache) reset() {
	c.mu.Lock()
	c.m, c.entries = nil, 0
	c.mu.Unlock()
}
