package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"lukechampine.com/blake3"
)

// The lazy overlay is a persistent treap keyed by path whose nodes are
// content-addressed and re-hashed on every load. In-place workspaces keep
// their shadow in it (path → stat fingerprint and content ID of what was
// written into the real directory), one root per generation: forking copies
// a root ID (O(1)) and each change stores O(log n) new nodes, sharing the
// rest with every other root.
//
// A node's priority is derived from its path, so the treap's shape, and with
// it the root ID, depends only on the set of (path, value) pairs and never on
// the order of the changes that produced it (history independence). Two
// roots are therefore equal exactly when their contents are.
//
// Nodes are never deleted: there is no GC sweep of the lazy-overlay bucket
// yet. OverlayNodes exists so that a future GC can mark what live roots
// reach.

var bucketLazyOverlay = []byte("lazy-overlay")

const (
	domainLazyOverlay = "acyclicfs lazy-overlay v1\x00"
	overlayNodeFormat = 1
)

// MaxOverlayPathLen is the longest path an overlay accepts, in bytes: as
// long as a base reference's path. A tree may be deeper than PATH_MAX (a
// mount builds it one component at a time), and the shadow records a
// fingerprint for every file materialization writes, at any depth.
const MaxOverlayPathLen = maxBaseRefPath

// MaxOverlayValueLen is the largest value an overlay accepts, in bytes.
// Shadow values (a stat fingerprint and a content ID) are far smaller; the
// bound keeps a damaged or hostile store from naming huge nodes.
const MaxOverlayValueLen = 64 << 10

// OverlayNode is one stored treap node. Left and Right are child node IDs;
// the zero ID is the empty treap. Priority must be OverlayPriority(Path).
type OverlayNode struct {
	Path     string
	Priority uint64
	Value    []byte
	Left     ID
	Right    ID
}

// OverlayPriority is the treap priority of path: the first 8 bytes of the
// BLAKE3 hash of the path, big-endian.
func OverlayPriority(path string) uint64 {
	h := blake3.Sum256([]byte(path))
	return binary.BigEndian.Uint64(h[:8])
}

// OverlayNodeID returns the address of an encoded overlay node.
func OverlayNodeID(encoded []byte) ID { return hashWithDomain(domainLazyOverlay, encoded) }

// validOverlayPath reports why path cannot be an overlay key, or "" if it can.
func validOverlayPath(path string) string {
	switch {
	case path == "":
		return "empty"
	case len(path) > MaxOverlayPathLen:
		return fmt.Sprintf("longer than %d bytes", MaxOverlayPathLen)
	case strings.IndexByte(path, 0) >= 0:
		return "contains NUL"
	}
	return ""
}

// Encode returns the canonical encoding: a version byte, uvarint(len path),
// path, the priority as 8 bytes big-endian, uvarint(len value), value, the
// 32-byte left and right child IDs. It fails (ErrCorrupt) on an invalid
// path, an oversized value or a priority that is not the path's, so every
// encoded node is canonical.
func (n *OverlayNode) Encode() ([]byte, error) {
	if why := validOverlayPath(n.Path); why != "" {
		return nil, fmt.Errorf("%w: overlay node: path %q %s", ErrCorrupt, n.Path, why)
	}
	if len(n.Value) > MaxOverlayValueLen {
		return nil, fmt.Errorf("%w: overlay node %q: value of %d bytes exceeds %d", ErrCorrupt, n.Path, len(n.Value), MaxOverlayValueLen)
	}
	if p := OverlayPriority(n.Path); n.Priority != p {
		return nil, fmt.Errorf("%w: overlay node %q: priority %#x is not the path's %#x", ErrCorrupt, n.Path, n.Priority, p)
	}
	buf := make([]byte, 0, 1+2+len(n.Path)+8+2+len(n.Value)+2*IDSize)
	buf = append(buf, overlayNodeFormat)
	buf = binary.AppendUvarint(buf, uint64(len(n.Path)))
	buf = append(buf, n.Path...)
	buf = binary.BigEndian.AppendUint64(buf, n.Priority)
	buf = binary.AppendUvarint(buf, uint64(len(n.Value)))
	buf = append(buf, n.Value...)
	buf = append(buf, n.Left[:]...)
	buf = append(buf, n.Right[:]...)
	return buf, nil
}

// DecodeOverlayNode parses a canonical overlay node encoding; anything
// non-canonical is ErrCorrupt. The result does not alias b.
func DecodeOverlayNode(b []byte) (OverlayNode, error) {
	var n OverlayNode
	orig := b
	if len(b) == 0 || b[0] != overlayNodeFormat {
		return n, fmt.Errorf("%w: overlay node: bad format byte", ErrCorrupt)
	}
	b = b[1:]
	pl, k := binary.Uvarint(b)
	if k <= 0 || pl > MaxOverlayPathLen || pl > uint64(len(b)-k) {
		return n, fmt.Errorf("%w: overlay node: bad path length", ErrCorrupt)
	}
	b = b[k:]
	n.Path = string(b[:pl])
	b = b[pl:]
	if len(b) < 8 {
		return n, fmt.Errorf("%w: overlay node: truncated priority", ErrCorrupt)
	}
	n.Priority = binary.BigEndian.Uint64(b)
	b = b[8:]
	vl, k := binary.Uvarint(b)
	if k <= 0 || vl > MaxOverlayValueLen || vl > uint64(len(b)-k) {
		return n, fmt.Errorf("%w: overlay node: bad value length", ErrCorrupt)
	}
	b = b[k:]
	n.Value = bytes.Clone(b[:vl])
	if n.Value == nil {
		n.Value = []byte{}
	}
	b = b[vl:]
	if len(b) != 2*IDSize {
		return n, fmt.Errorf("%w: overlay node: %d bytes of child ids, want %d", ErrCorrupt, len(b), 2*IDSize)
	}
	copy(n.Left[:], b[:IDSize])
	copy(n.Right[:], b[IDSize:])
	// Re-encode to enforce the rest of canonical form: a valid path, the
	// path's priority, minimal varints.
	re, err := n.Encode()
	if err != nil {
		return OverlayNode{}, err
	}
	if !bytes.Equal(re, orig) {
		return OverlayNode{}, fmt.Errorf("%w: overlay node: non-canonical encoding", ErrCorrupt)
	}
	return n, nil
}

// overlayAbove reports whether a node (pa, a) sits above a node (pb, b) in
// the treap: higher priority first, ties broken by the smaller path, so the
// order is total and the shape unique.
func overlayAbove(pa uint64, a string, pb uint64, b string) bool {
	return pa > pb || (pa == pb && a < b)
}

// loadOverlayNode reads node id in tx and verifies it against its
// address.
func loadOverlayNode(tx *stx, id ID) (OverlayNode, error) {
	v, err := tx.get(prefixLazyOverlay, id[:])
	if err != nil {
		return OverlayNode{}, fmt.Errorf("overlay node %s: %w", id.Short(), err)
	}
	if v == nil {
		return OverlayNode{}, fmt.Errorf("overlay node %s: %w", id.Short(), ErrNotFound)
	}
	if got := OverlayNodeID(v); got != id {
		return OverlayNode{}, fmt.Errorf("%w: overlay node %s: content hashes to %s", ErrCorrupt, id.Short(), got.Short())
	}
	n, err := DecodeOverlayNode(v)
	if err != nil {
		return OverlayNode{}, fmt.Errorf("overlay node %s: %w", id.Short(), err)
	}
	return n, nil
}

// checkOverlayChild rejects a child that breaks the treap's order: a left
// child must sort before its parent, a right child after, and both must sit
// below it. Content addressing alone cannot rule this out for nodes that
// were stored by something other than OverlayApply.
func checkOverlayChild(parent, child *OverlayNode, left bool) error {
	ordered := child.Path > parent.Path
	if left {
		ordered = child.Path < parent.Path
	}
	if !ordered || !overlayAbove(parent.Priority, parent.Path, child.Priority, child.Path) {
		return fmt.Errorf("%w: overlay node %q: child %q out of treap order", ErrCorrupt, parent.Path, child.Path)
	}
	return nil
}

// OverlayApply stores the overlay that is root with puts set and deletes
// removed, in one transaction, and returns its root ID. Unchanged subtrees
// keep their nodes. Deleting an absent path is a no-op; a path both put and
// deleted, an empty path, a path with a NUL or longer than
// MaxOverlayPathLen, or a value longer than MaxOverlayValueLen is an error
// wrapping ErrInvalidName. A missing root wraps ErrNotFound, a damaged one
// ErrCorrupt.
func (s *Store) OverlayApply(root ID, puts map[string][]byte, deletes []string) (ID, error) {
	for p, v := range puts {
		if why := validOverlayPath(p); why != "" {
			return ID{}, fmt.Errorf("overlay apply: path %q %s: %w", p, why, ErrInvalidName)
		}
		if len(v) > MaxOverlayValueLen {
			return ID{}, fmt.Errorf("overlay apply: value for %q is %d bytes, limit %d: %w", p, len(v), MaxOverlayValueLen, ErrInvalidName)
		}
	}
	for _, p := range deletes {
		if why := validOverlayPath(p); why != "" {
			return ID{}, fmt.Errorf("overlay apply: path %q %s: %w", p, why, ErrInvalidName)
		}
		if _, ok := puts[p]; ok {
			return ID{}, fmt.Errorf("overlay apply: path %q both put and deleted: %w", p, ErrInvalidName)
		}
	}
	if len(puts) == 0 && len(deletes) == 0 {
		// Nothing to write; still prove the root is there and intact.
		err := s.view(func(tx *stx) error {
			if root.IsZero() {
				return nil
			}
			_, err := loadOverlayNode(tx, root)
			return err
		})
		if err != nil {
			return ID{}, fmt.Errorf("overlay apply: %w", err)
		}
		return root, nil
	}
	var out ID
	run := s.update
	lim, bounded := s.txLimits()
	var recs []record
	if bounded {
		// The new nodes are content-addressed: built in a read
		// transaction, then written in bounded ones (bounded.go).
		run = s.view
	}
	err := run(func(tx *stx) error {
		w := &overlayWork{tx: tx}
		if bounded {
			recs = recs[:0]
			w.collect = &recs
		}
		ref := overlayRef{id: root}
		var err error
		// The result does not depend on the order of changes; the map's
		// random order only affects which error a damaged store reports.
		for _, p := range deletes {
			if ref, _, err = w.delete(ref, p, OverlayPriority(p)); err != nil {
				return err
			}
		}
		for p, v := range puts {
			if ref, _, err = w.put(ref, p, OverlayPriority(p), v); err != nil {
				return err
			}
		}
		out, err = w.finish(ref)
		return err
	})
	if err == nil && bounded {
		err = s.putRecordsBounded(lim, recs)
	}
	if err != nil {
		return ID{}, fmt.Errorf("overlay apply to %s: %w", root.Short(), err)
	}
	return out, nil
}

// overlayRef is a treap in the middle of an OverlayApply: either a stored
// node not yet loaded (n == nil; the zero id is the empty treap) or a
// working node.
type overlayRef struct {
	id ID
	n  *overlayWorkNode
}

func (r overlayRef) empty() bool { return r.n == nil && r.id.IsZero() }

// overlayWorkNode is a loaded node, changed in place while dirty. It is
// reachable from exactly one parent, so changing it in place is safe.
type overlayWorkNode struct {
	id          ID // the stored address; stale once dirty
	path        string
	prio        uint64
	value       []byte
	left, right overlayRef
	dirty       bool
}

// overlayWork carries one OverlayApply's transaction. Intermediate shapes
// are never hashed or stored: finish encodes only the final dirty nodes.
type overlayWork struct {
	tx *stx
	// collect, if set, receives the new nodes instead of tx (a bounded
	// plane: they are written afterwards in transactions it accepts).
	collect *[]record
}

// load returns the working node for r, loading and verifying it if needed.
// parent (nil for the root) is used to check treap order.
func (w *overlayWork) load(r overlayRef, parent *overlayWorkNode, left bool) (*overlayWorkNode, error) {
	if r.n != nil {
		return r.n, nil
	}
	on, err := loadOverlayNode(w.tx, r.id)
	if err != nil {
		return nil, err
	}
	if parent != nil {
		pn := OverlayNode{Path: parent.path, Priority: parent.prio}
		if err := checkOverlayChild(&pn, &on, left); err != nil {
			return nil, err
		}
	}
	return &overlayWorkNode{
		id: r.id, path: on.Path, prio: on.Priority, value: on.Value,
		left: overlayRef{id: on.Left}, right: overlayRef{id: on.Right},
	}, nil
}

// child loads n's left or right child and remembers it in n.
func (w *overlayWork) child(n *overlayWorkNode, left bool) (overlayRef, error) {
	r := n.right
	if left {
		r = n.left
	}
	if r.empty() || r.n != nil {
		return r, nil
	}
	c, err := w.load(r, n, left)
	if err != nil {
		return overlayRef{}, err
	}
	r.n = c
	if left {
		n.left = r
	} else {
		n.right = r
	}
	return r, nil
}

// put sets path to value in r and reports whether anything changed.
func (w *overlayWork) put(r overlayRef, path string, prio uint64, value []byte) (overlayRef, bool, error) {
	if r.empty() {
		return overlayRef{n: &overlayWorkNode{path: path, prio: prio, value: bytes.Clone(value), dirty: true}}, true, nil
	}
	n, err := w.load(r, nil, false)
	if err != nil {
		return r, false, err
	}
	r.n = n
	switch {
	case path == n.path:
		if bytes.Equal(n.value, value) {
			return r, false, nil
		}
		n.value = bytes.Clone(value)
		n.dirty = true
		return r, true, nil
	case overlayAbove(prio, path, n.prio, n.path):
		// path belongs above n, so it is not in r (it would have been
		// met on the way down): split r around it.
		l, rr, err := w.split(r, path)
		if err != nil {
			return r, false, err
		}
		return overlayRef{n: &overlayWorkNode{path: path, prio: prio, value: bytes.Clone(value), left: l, right: rr, dirty: true}}, true, nil
	}
	left := path < n.path
	c, err := w.child(n, left)
	if err != nil {
		return r, false, err
	}
	c, changed, err := w.put(c, path, prio, value)
	if err != nil || !changed {
		return r, false, err
	}
	n.setChild(left, c)
	return r, true, nil
}

func (n *overlayWorkNode) setChild(left bool, c overlayRef) {
	if left {
		n.left = c
	} else {
		n.right = c
	}
	n.dirty = true
}

// split divides r, which does not contain path, into the nodes before and
// after path. A side that comes back whole is unchanged.
func (w *overlayWork) split(r overlayRef, path string) (before, after overlayRef, err error) {
	if r.empty() {
		return r, r, nil
	}
	n, err := w.load(r, nil, false)
	if err != nil {
		return r, r, err
	}
	r.n = n
	if n.path < path {
		c, err := w.child(n, false)
		if err != nil {
			return r, r, err
		}
		l, rr, err := w.split(c, path)
		if err != nil {
			return r, r, err
		}
		if !rr.empty() {
			n.setChild(false, l)
		}
		return r, rr, nil
	}
	c, err := w.child(n, true)
	if err != nil {
		return r, r, err
	}
	l, rr, err := w.split(c, path)
	if err != nil {
		return r, r, err
	}
	if !l.empty() {
		n.setChild(true, rr)
	}
	return l, r, nil
}

// delete removes path from r and reports whether it was there.
func (w *overlayWork) delete(r overlayRef, path string, prio uint64) (overlayRef, bool, error) {
	if r.empty() {
		return r, false, nil
	}
	n, err := w.load(r, nil, false)
	if err != nil {
		return r, false, err
	}
	r.n = n
	switch {
	case path == n.path:
		l, err := w.child(n, true)
		if err != nil {
			return r, false, err
		}
		rr, err := w.child(n, false)
		if err != nil {
			return r, false, err
		}
		m, err := w.merge(l, rr)
		return m, err == nil, err
	case overlayAbove(prio, path, n.prio, n.path):
		return r, false, nil // path would sit above n: it is not in r
	}
	left := path < n.path
	c, err := w.child(n, left)
	if err != nil {
		return r, false, err
	}
	c, changed, err := w.delete(c, path, prio)
	if err != nil || !changed {
		return r, false, err
	}
	n.setChild(left, c)
	return r, true, nil
}

// merge joins a and b, every path of a sorting before every path of b.
// Both are loaded (they come from child).
func (w *overlayWork) merge(a, b overlayRef) (overlayRef, error) {
	if a.empty() {
		return b, nil
	}
	if b.empty() {
		return a, nil
	}
	na, nb := a.n, b.n
	if overlayAbove(na.prio, na.path, nb.prio, nb.path) {
		c, err := w.child(na, false)
		if err != nil {
			return a, err
		}
		m, err := w.merge(c, b)
		if err != nil {
			return a, err
		}
		na.setChild(false, m)
		return a, nil
	}
	c, err := w.child(nb, true)
	if err != nil {
		return b, err
	}
	m, err := w.merge(a, c)
	if err != nil {
		return b, err
	}
	nb.setChild(true, m)
	return b, nil
}

// finish stores every dirty node reachable from r, children first, and
// returns r's ID.
func (w *overlayWork) finish(r overlayRef) (ID, error) {
	if r.n == nil {
		return r.id, nil
	}
	if !r.n.dirty {
		return r.n.id, nil
	}
	n := r.n
	l, err := w.finish(n.left)
	if err != nil {
		return ID{}, err
	}
	rr, err := w.finish(n.right)
	if err != nil {
		return ID{}, err
	}
	on := OverlayNode{Path: n.path, Priority: n.prio, Value: n.value, Left: l, Right: rr}
	enc, err := on.Encode()
	if err != nil {
		return ID{}, err
	}
	id := OverlayNodeID(enc)
	if w.collect != nil {
		*w.collect = append(*w.collect, record{prefixLazyOverlay, id[:], enc})
		n.id, n.dirty = id, false
		return id, nil
	}
	ok, err := w.tx.has(prefixLazyOverlay, id[:])
	if err == nil && !ok {
		err = w.tx.put(prefixLazyOverlay, id[:], enc)
	}
	if err != nil {
		return ID{}, err
	}
	n.id, n.dirty = id, false
	return id, nil
}

// OverlayGet returns the value of path in the overlay root. Every node on
// the way is verified against its address and the treap order.
func (s *Store) OverlayGet(root ID, path string) ([]byte, bool, error) {
	var (
		val   []byte
		found bool
	)
	err := s.view(func(tx *stx) error {
		prio := OverlayPriority(path)
		var parent *OverlayNode
		left := false
		for id := root; !id.IsZero(); {
			n, err := loadOverlayNode(tx, id)
			if err != nil {
				return err
			}
			if parent != nil {
				if err := checkOverlayChild(parent, &n, left); err != nil {
					return err
				}
			}
			switch {
			case n.Path == path:
				val, found = n.Value, true
				return nil
			case overlayAbove(prio, path, n.Priority, n.Path):
				return nil
			}
			left = path < n.Path
			id = n.Right
			if left {
				id = n.Left
			}
			parent = &n
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("overlay get %q in %s: %w", path, root.Short(), err)
	}
	return val, found, nil
}

// OverlayWalk calls fn for every path of the overlay root in byte order,
// inside one read transaction: fn must not write to the store. An error
// from fn stops the walk and is returned as is. Every node is verified
// against its address and the treap order (ErrCorrupt).
func (s *Store) OverlayWalk(root ID, fn func(path string, value []byte) error) error {
	var fnErr error
	err := s.view(func(tx *stx) error {
		v := overlayVisitor{tx: tx, inorder: func(n *OverlayNode) error {
			if err := fn(n.Path, n.Value); err != nil {
				fnErr = err
				return err
			}
			return nil
		}}
		return v.visit(root, nil, false)
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("overlay walk %s: %w", root.Short(), err)
	}
	return nil
}

// OverlayLen returns the number of paths in the overlay root.
func (s *Store) OverlayLen(root ID) (int, error) {
	n := 0
	err := s.OverlayWalk(root, func(string, []byte) error { n++; return nil })
	return n, err
}

// OverlayNodes calls fn with the ID of every node reachable from root
// (parents before children), for GC marking. Each node is verified. An
// error from fn stops the visit and is returned as is; fn must not write
// to the store.
func (s *Store) OverlayNodes(root ID, fn func(ID) error) error {
	var fnErr error
	err := s.view(func(tx *stx) error {
		v := overlayVisitor{tx: tx, node: func(id ID, _ *OverlayNode) error {
			if err := fn(id); err != nil {
				fnErr = err
				return err
			}
			return nil
		}}
		return v.visit(root, nil, false)
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("overlay nodes %s: %w", root.Short(), err)
	}
	return nil
}

// overlayVisitor walks a stored treap depth first, calling node (if set)
// before a node's children and inorder (if set) between them. Checking each child
// against its parent, and in-order paths against the previous one, proves
// the whole treap well formed.
type overlayVisitor struct {
	tx      *stx
	node    func(ID, *OverlayNode) error
	inorder func(*OverlayNode) error
	prev    string
	started bool
}

func (v *overlayVisitor) visit(id ID, parent *OverlayNode, left bool) error {
	if id.IsZero() {
		return nil
	}
	n, err := loadOverlayNode(v.tx, id)
	if err != nil {
		return err
	}
	if parent != nil {
		if err := checkOverlayChild(parent, &n, left); err != nil {
			return err
		}
	}
	if v.node != nil {
		if err := v.node(id, &n); err != nil {
			return err
		}
	}
	if err := v.visit(n.Left, &n, true); err != nil {
		return err
	}
	if v.started && n.Path <= v.prev {
		return fmt.Errorf("%w: overlay node %q after %q: out of order", ErrCorrupt, n.Path, v.prev)
	}
	v.prev, v.started = n.Path, true
	if v.inorder != nil {
		if err := v.inorder(&n); err != nil {
			return err
		}
	}
	return v.visit(n.Right, &n, false)
}
