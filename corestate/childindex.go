package corestate

import (
	"encoding/hex"
	"fmt"
	"slices"
)

// perChildBytes bounds one encoded child in a bucket: a quoted hex key of at
// most maxKeyBytes plus a separator. A bucket of n children is therefore at
// most n*perChildBytes plus the brackets and the envelope around it.
const (
	perChildBytes  = 2*maxKeyBytes + 3
	bucketOverhead = 64
)

// ChildIndex is a parent → children index kept as records, for trees of
// records (nested contexts) that must be walked in bounded work without
// scanning a family. Two families hold it: "<name>-children" maps a parent
// key to its sorted child keys, "<name>-child-counts" to their number. The
// count is read first so an oversized child list is refused before its
// bucket is read, and the bucket read itself is bounded by that count.
//
// Index changes are returned as transaction writes, so they commit
// atomically with the records they describe (the seed's children index
// inside a context transaction) and roll back with them.
type ChildIndex struct {
	store           *Store
	buckets, counts string
}

// NewChildIndex returns the index named name (a family-name prefix).
func NewChildIndex(s *Store, name string) (ChildIndex, error) {
	ix := ChildIndex{store: s, buckets: name + "-children", counts: name + "-child-counts"}
	if err := validFamily(ix.counts); err != nil {
		return ChildIndex{}, err
	}
	return ix, nil
}

type bucketState struct {
	children            []string
	bucketRev, countRev uint64
}

// load reads parent's count and then its bucket bounded by that count.
// With limit >= 0 a count above limit is ErrTraversalLimit before the bucket
// is opened.
func (ix ChildIndex) load(parent string, limit int) (bucketState, error) {
	var n uint64
	countRev, _, err := ix.store.Load(ix.counts, parent, &n)
	if err != nil {
		return bucketState{}, err
	}
	if limit >= 0 && n > uint64(limit) {
		return bucketState{}, fmt.Errorf("%w: %q has %d children, %d allowed", ErrTraversalLimit, parent, n, limit)
	}
	if n > 1<<40 {
		return bucketState{}, fmt.Errorf("%w: child count %d of %q", ErrCorrupt, n, parent)
	}
	var encoded []string
	bucketRev, _, err := ix.store.LoadBounded(ix.buckets, parent, int64(n)*perChildBytes+bucketOverhead, &encoded)
	if err != nil {
		return bucketState{}, err
	}
	if uint64(len(encoded)) != n {
		return bucketState{}, fmt.Errorf("%w: %q lists %d children but counts %d", ErrCorrupt, parent, len(encoded), n)
	}
	st := bucketState{bucketRev: bucketRev, countRev: countRev, children: make([]string, len(encoded))}
	for i, h := range encoded {
		b, err := hex.DecodeString(h)
		if err != nil || validKey(string(b)) != nil {
			return bucketState{}, fmt.Errorf("%w: child %q of %q", ErrCorrupt, h, parent)
		}
		st.children[i] = string(b)
	}
	return st, nil
}

func (ix ChildIndex) writes(parent string, st bucketState, children []string) []Write {
	if len(children) == 0 {
		var ws []Write
		if st.bucketRev != 0 {
			ws = append(ws, Write{Family: ix.buckets, Key: parent, ExpectRev: st.bucketRev, Delete: true})
		}
		if st.countRev != 0 {
			ws = append(ws, Write{Family: ix.counts, Key: parent, ExpectRev: st.countRev, Delete: true})
		}
		return ws
	}
	encoded := make([]string, len(children))
	for i, c := range children {
		encoded[i] = hex.EncodeToString([]byte(c))
	}
	return []Write{
		{Family: ix.buckets, Key: parent, ExpectRev: st.bucketRev, Value: encoded},
		{Family: ix.counts, Key: parent, ExpectRev: st.countRev, Value: len(children)},
	}
}

// Move returns the writes moving child from parent from to parent to (""
// for none). They expect the revisions read now: add them to the Commit
// that changes the child's own record, and on ErrConflict reread and retry.
// A move that changes nothing returns no writes.
func (ix ChildIndex) Move(child, from, to string) ([]Write, error) {
	if err := validKey(child); err != nil {
		return nil, err
	}
	if from == to {
		return nil, nil
	}
	var out []Write
	for _, parent := range []string{from, to} {
		if parent == "" {
			continue
		}
		st, err := ix.load(parent, -1)
		if err != nil {
			return nil, fmt.Errorf("corestate: index %s: %w", ix.buckets, err)
		}
		i, present := slices.BinarySearch(st.children, child)
		next := slices.Clone(st.children)
		switch {
		case parent == from && present:
			next = slices.Delete(next, i, i+1)
		case parent == to && !present:
			next = slices.Insert(next, i, child)
		default:
			continue
		}
		out = append(out, ix.writes(parent, st, next)...)
	}
	return out, nil
}

// Children returns parent's children (sorted) if there are at most limit,
// ErrTraversalLimit otherwise.
func (ix ChildIndex) Children(parent string, limit int) ([]string, error) {
	st, err := ix.load(parent, max(limit, 0))
	if err != nil {
		return nil, fmt.Errorf("corestate: index %s: %w", ix.buckets, err)
	}
	return st.children, nil
}

// Subtree is the result of a bounded walk.
type Subtree struct {
	// Nodes are the root and its descendants, root first, then depth-first.
	Nodes []string
	// Fences assert the revisions of every index record the walk read.
	// Include them in the Commit acting on Nodes so a concurrent change to
	// the tree fails that Commit with ErrConflict instead of being missed.
	Fences []Write
}

// Subtree walks root's descendants reading only their index records — never
// other records, so an unrelated corrupt record cannot fail it — and stops
// with ErrTraversalLimit as soon as the tree is known to exceed limit nodes
// (root included). A node reached twice means the index is not a tree:
// ErrCorrupt.
func (ix ChildIndex) Subtree(root string, limit int) (Subtree, error) {
	if err := validKey(root); err != nil {
		return Subtree{}, err
	}
	var out Subtree
	seen := map[string]bool{}
	pending := []string{root}
	for len(pending) > 0 {
		node := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		if seen[node] {
			return Subtree{}, fmt.Errorf("corestate: index %s: %w: %q reached twice", ix.buckets, ErrCorrupt, node)
		}
		seen[node] = true
		out.Nodes = append(out.Nodes, node)
		if len(out.Nodes) > limit {
			return Subtree{}, fmt.Errorf("corestate: index %s: %w: more than %d nodes", ix.buckets, ErrTraversalLimit, limit)
		}
		remaining := max(limit-len(out.Nodes)-len(pending), 0)
		st, err := ix.load(node, remaining)
		if err != nil {
			return Subtree{}, fmt.Errorf("corestate: index %s: %w", ix.buckets, err)
		}
		out.Fences = append(out.Fences,
			Write{Family: ix.buckets, Key: node, ExpectRev: st.bucketRev, Assert: true},
			Write{Family: ix.counts, Key: node, ExpectRev: st.countRev, Assert: true})
		for i := len(st.children) - 1; i >= 0; i-- {
			pending = append(pending, st.children[i])
		}
	}
	return out, nil
}
