package store

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/acyclicfs/acyclicfs/meta"
)

func emptyTreeEncoding() []byte { return []byte{treeFormat} }

var emptyTreeID = TreeID(emptyTreeEncoding())

// EmptyTreeID returns the ID of the tree with no entries. Every store has it.
func EmptyTreeID() ID { return emptyTreeID }

// PutTree stores t, which must be canonical (sorted, valid names; Encode
// enforces it), and returns its ID. Storing an existing tree is a no-op.
// Referenced subtrees and blobs are not checked here; Check finds dangling
// references.
func (s *Store) PutTree(t *Tree) (ID, error) {
	ids, err := s.PutTrees([]*Tree{t})
	if err != nil {
		return ID{}, err
	}
	return ids[0], nil
}

// PutTrees stores many trees in one transaction (capture and import build
// thousands at once) and returns their IDs in order.
func (s *Store) PutTrees(ts []*Tree) ([]ID, error) {
	ids := make([]ID, len(ts))
	encs := make([][]byte, len(ts))
	for i, t := range ts {
		enc, err := t.Encode()
		if err != nil {
			return nil, fmt.Errorf("put tree: %w", err)
		}
		encs[i] = enc
		ids[i] = TreeID(enc)
	}
	// Base refs the entries name are persisted with the trees: every ref a
	// stored tree names is in the baserefs bucket.
	refs, err := s.memoRefsNamed(func(yield func(ID)) {
		for _, t := range ts {
			for _, e := range t.Entries {
				yield(e.ID)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("put trees: %w", err)
	}
	if !s.readOnly && len(refs) == 0 && s.haveTrees(ids) {
		// A read transaction instead of a commit (an fdatasync): merges
		// and captures often rebuild trees the store has.
		return ids, nil
	}
	if lim, ok := s.txLimits(); ok {
		if err := s.putTreesBounded(lim, refs, encs, ids); err != nil {
			return nil, fmt.Errorf("put trees: %w", err)
		}
		return ids, nil
	}
	err = s.update(func(tx *stx) error {
		if err := putRefsTx(tx, &s.bases, refs); err != nil {
			return err
		}
		for i, enc := range encs {
			if ok, err := tx.has(prefixTrees, ids[i][:]); err != nil || ok {
				if err != nil {
					return err
				}
				continue
			}
			if err := tx.put(prefixTrees, ids[i][:], enc); err != nil {
				return err
			}
		}
		return fail("tree.put")
	})
	if err != nil {
		return nil, fmt.Errorf("put trees: %w", err)
	}
	return ids, nil
}

// haveTrees reports whether every tree of ids is stored.
func (s *Store) haveTrees(ids []ID) bool {
	all := true
	err := s.view(func(tx *stx) error {
		for _, id := range ids {
			if id == emptyTreeID {
				continue
			}
			if ok, err := tx.has(prefixTrees, id[:]); err != nil || !ok {
				all = false
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false // PutTrees writes them, and reports the error
	}
	return all
}

// GetTree returns tree id, verified against its address. For a directory
// base ref it returns the ref's resolution, or else the directory's
// current listing (memoized in this process; ErrBaseChanged if the
// directory no longer has the ref's fingerprint), whose entries name base
// refs in turn.
func (s *Store) GetTree(id ID) (*Tree, error) {
	if t := s.trees.get(id); t != nil {
		return t, nil
	}
	return s.getTreeUncached(id)
}

// getTreeUncached is GetTree past the cache, apart so that the cached path
// does not pay for the variables its transaction's closure captures.
func (s *Store) getTreeUncached(id ID) (*Tree, error) {
	var t *Tree
	var ref refState
	var isRef bool
	err := s.view(func(tx *stx) error {
		var err error
		t, err = getTreeTx(tx, id) // the cache was asked above
		if err == nil {
			s.trees.put(id, t)
		}
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		var rerr error
		if ref, isRef, rerr = s.lookupRefTx(tx, id); rerr != nil {
			return rerr
		}
		if !isRef {
			return err
		}
		if ref.ref.Kind != KindDir {
			return fmt.Errorf("tree %s: base ref to a %s: %w", id.Short(), ref.ref.Kind, ErrNotFound)
		}
		if ref.resolved {
			t, err = s.getTreeCachedTx(tx, ref.target)
			return err
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case t != nil:
		return t, nil
	}
	return s.expandRef(id, ref.ref)
}

// getTreeCachedTx is getTreeTx through the store's cache of decoded
// trees (the caller gets its own copy).
func (s *Store) getTreeCachedTx(tx *stx, id ID) (*Tree, error) {
	if t := s.trees.get(id); t != nil {
		return t, nil
	}
	t, err := getTreeTx(tx, id)
	if err == nil {
		s.trees.put(id, t)
	}
	return t, err
}

func getTreeTx(tx *stx, id ID) (*Tree, error) {
	v, err := tx.get(prefixTrees, id[:])
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id.Short(), err)
	}
	if v == nil {
		if id == emptyTreeID {
			return &Tree{}, nil
		}
		return nil, fmt.Errorf("tree %s: %w", id.Short(), ErrNotFound)
	}
	if got := TreeID(v); got != id {
		return nil, fmt.Errorf("%w: tree %s: content hashes to %s", ErrCorrupt, id.Short(), got.Short())
	}
	t, err := DecodeTree(v)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id.Short(), err)
	}
	return t, nil
}

// HasTree reports whether tree id is stored (without verifying it).
func (s *Store) HasTree(id ID) (bool, error) {
	var ok bool
	if id == emptyTreeID {
		return true, nil
	}
	err := s.view(func(tx *stx) error {
		var err error
		ok, err = tx.has(prefixTrees, id[:])
		return err
	})
	return ok, err
}

// PutGeneration stores g and returns its ID. Its root tree and parents must
// exist (ErrNotFound otherwise).
func (s *Store) PutGeneration(g *Generation) (ID, error) {
	pg, err := s.prepareGeneration(g)
	if err != nil {
		return ID{}, fmt.Errorf("put generation: %w", err)
	}
	if err := s.update(pg.putTx); err != nil {
		return ID{}, fmt.Errorf("put generation: %w", err)
	}
	return pg.id, nil
}

// PublishGeneration stores g and appends it to workspace name's head log
// (expecting head expect; e.Gen is set to g's ID) in one transaction: one
// commit instead of two, and no unreferenced generation if the append
// fails. Errors as PutGeneration and CompareAndAppend. The prepared
// resolutions in with are written in the same transaction, first (all or
// nothing with the generation).
func (s *Store) PublishGeneration(g *Generation, name string, expect ID, e HeadEntry, permit *Permit, with ...*PreparedResolve) (ID, Workspace, error) {
	pg, err := s.prepareGeneration(g)
	if err != nil {
		return ID{}, Workspace{}, fmt.Errorf("put generation: %w", err)
	}
	e.Gen = pg.id
	out := make([]Workspace, 1)
	if _, ok := s.txLimits(); ok {
		// A bounded plane: the immutable records first, each in
		// transactions it accepts, then the append alone (bounded.go).
		for _, pr := range with {
			if err := s.WriteResolve(pr); err != nil {
				return ID{}, Workspace{}, err
			}
		}
		if err := s.update(pg.putTx); err != nil {
			return ID{}, Workspace{}, fmt.Errorf("put generation: %w", err)
		}
		ws, err := s.CompareAndAppend(name, expect, e, permit)
		if err != nil {
			return ID{}, Workspace{}, err
		}
		return pg.id, ws, nil
	}
	err = s.update(func(tx *stx) error {
		for _, pr := range with {
			if pr == nil {
				continue
			}
			if err := pr.putTx(tx); err != nil {
				return err
			}
		}
		if err := pg.putTx(tx); err != nil {
			return fmt.Errorf("put generation: %w", err)
		}
		if err := s.appendTx(tx, []Append{{Workspace: name, ExpectHead: expect, Entry: e}}, permit, out); err != nil {
			return fmt.Errorf("append head: %w", err)
		}
		return nil
	})
	if err != nil {
		return ID{}, Workspace{}, err
	}
	return pg.id, out[0], nil
}

// preparedGeneration is a generation encoded, addressed and with the
// memoized refs its root names, ready to be put in a transaction.
type preparedGeneration struct {
	g    *Generation
	enc  []byte
	id   ID
	refs map[ID][]byte
	memo *baseMemo // told which refs were stored once the transaction commits
}

func (s *Store) prepareGeneration(g *Generation) (*preparedGeneration, error) {
	enc, err := g.Encode()
	if err != nil {
		return nil, err
	}
	// A root that is a memoized directory ref is persisted with g.
	refs, err := s.memoRefsNamed(func(yield func(ID)) { yield(g.Root) })
	if err != nil {
		return nil, err
	}
	return &preparedGeneration{g: g, enc: enc, id: GenerationID(enc), refs: refs, memo: &s.bases}, nil
}

// putTx stores the generation; its root and parents must exist.
func (pg *preparedGeneration) putTx(tx *stx) error {
	g, id := pg.g, pg.id
	if err := putRefsTx(tx, pg.memo, pg.refs); err != nil {
		return err
	}
	hasRoot := g.Root == emptyTreeID
	if !hasRoot {
		var err error
		if hasRoot, err = tx.has(prefixTrees, g.Root[:]); err != nil {
			return err
		}
	}
	if !hasRoot {
		r, isRef, err := storedRefTx(tx, g.Root)
		switch {
		case err != nil:
			return err
		case !isRef:
			return fmt.Errorf("root tree %s: %w", g.Root.Short(), ErrNotFound)
		case r.Kind != KindDir:
			return fmt.Errorf("root %s: base ref to a %s, not a directory: %w", g.Root.Short(), r.Kind, ErrNotFound)
		}
	}
	for _, p := range g.Parents {
		if ok, err := tx.has(prefixGenerations, p[:]); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("parent generation %s: %w", p.Short(), ErrNotFound)
		}
	}
	if ok, err := tx.has(prefixGenerations, id[:]); err != nil || ok {
		return err
	}
	if err := tx.put(prefixGenerations, id[:], pg.enc); err != nil {
		return err
	}
	return fail("generation.put")
}

// GetGeneration returns generation id, verified against its address.
func (s *Store) GetGeneration(id ID) (*Generation, error) {
	var g *Generation
	err := s.view(func(tx *stx) error {
		var err error
		g, err = getGenerationTx(tx, id)
		return err
	})
	return g, err
}

func getGenerationTx(tx *stx, id ID) (*Generation, error) {
	v, err := tx.get(prefixGenerations, id[:])
	if err != nil {
		return nil, fmt.Errorf("generation %s: %w", id.Short(), err)
	}
	if v == nil {
		return nil, fmt.Errorf("generation %s: %w", id.Short(), ErrNotFound)
	}
	if got := GenerationID(v); got != id {
		return nil, fmt.Errorf("%w: generation %s: content hashes to %s", ErrCorrupt, id.Short(), got.Short())
	}
	g, err := DecodeGeneration(v)
	if err != nil {
		return nil, fmt.Errorf("generation %s: %w", id.Short(), err)
	}
	return g, nil
}

// HasGeneration reports whether generation id is stored.
func (s *Store) HasGeneration(id ID) (bool, error) {
	var ok bool
	err := s.view(func(tx *stx) error {
		var err error
		ok, err = tx.has(prefixGenerations, id[:])
		return err
	})
	return ok, err
}

// ResolveGeneration turns user input — a full hex ID or a unique prefix of
// at least MinPrefixLen hex characters — into a stored generation's ID.
func (s *Store) ResolveGeneration(in string) (ID, error) {
	p := strings.ToLower(in)
	if len(p) < MinPrefixLen || len(p) > 2*IDSize {
		return ID{}, fmt.Errorf("%w: generation %q: need %d to %d hex characters", ErrInvalidID, in, MinPrefixLen, 2*IDSize)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ID{}, fmt.Errorf("%w: generation %q: not hex", ErrInvalidID, in)
		}
	}
	// Seek to the whole bytes of the prefix; an odd trailing nibble is
	// matched on the hex form.
	whole, err := hex.DecodeString(p[:len(p)&^1])
	if err != nil {
		return ID{}, fmt.Errorf("%w: generation %q: %v", ErrInvalidID, in, err)
	}
	var found ID
	matches := 0
	errEnough := errors.New("two matches")
	err = s.view(func(tx *stx) error {
		return tx.Scan(spaceGenerations.Prefix(whole), meta.ScanOptions{}, func(mk meta.Key, _ []byte) error {
			k := spaceGenerations.Leaf(mk)
			if len(k) != IDSize || !strings.HasPrefix(hex.EncodeToString(k), p) {
				return nil
			}
			matches++
			if matches > 1 {
				return errEnough
			}
			copy(found[:], k)
			return nil
		})
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	switch {
	case err != nil:
		return ID{}, fmt.Errorf("resolve generation %q: %w", in, err)
	case matches == 0:
		return ID{}, fmt.Errorf("generation %q: %w", in, ErrNotFound)
	case matches > 1:
		return ID{}, fmt.Errorf("generation %q: %w", in, ErrAmbiguous)
	}
	return found, nil
}
