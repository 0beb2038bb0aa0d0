package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// MaxWorkspaceName is the longest accepted workspace name in bytes.
const MaxWorkspaceName = 128

// Workspace is a named line of generations. Its head moves only by
// compare-and-append onto its head log.
type Workspace struct {
	Name    string `json:"name"`
	Parent  string `json:"parent,omitempty"`
	Base    ID     `json:"base"` // parent generation forked from / last rebased onto (zero for roots)
	Head    ID     `json:"head"`
	Created int64  `json:"created"`            // Unix ms
	Seq     uint64 `json:"seq"`                // seq of the newest head-log entry
	InPlace string `json:"in_place,omitempty"` // in-place root directory
	// BaseRoot is the base (CreateBase) of an in-place workspace; GC keeps
	// its record while the workspace exists.
	BaseRoot ID `json:"base_root,omitzero"`
}

// HeadEntry is one step of a workspace's head log.
type HeadEntry struct {
	Seq       uint64  `json:"seq"` // assigned by the store: previous+1, first is 1
	Gen       ID      `json:"gen"`
	Base      ID      `json:"base"`
	Kind      GenKind `json:"kind"`
	Operation string  `json:"operation,omitempty"` // operation / idempotency key
	Time      int64   `json:"time"`                // Unix ms; the store clock if zero
}

// Append is one element of CompareAndAppendMany.
type Append struct {
	Workspace  string
	ExpectHead ID
	Entry      HeadEntry
}

// ValidWorkspaceName returns nil if name is 1–128 bytes of [A-Za-z0-9._-]
// not starting with '.' or '-', and an error wrapping ErrInvalidName
// otherwise.
func ValidWorkspaceName(name string) error {
	if name == "" || len(name) > MaxWorkspaceName {
		return fmt.Errorf("%w: workspace name %q must be 1-%d bytes", ErrInvalidName, name, MaxWorkspaceName)
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("%w: workspace name %q must not start with '.' or '-'", ErrInvalidName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: workspace name %q: only A-Z a-z 0-9 . _ - allowed", ErrInvalidName, name)
		}
	}
	return nil
}

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// childKey is parent NUL child; names never contain NUL.
func childKey(parent, child string) []byte {
	return append(append([]byte(parent), 0), child...)
}

func getWorkspaceTx(tx *bolt.Tx, name string) (Workspace, error) {
	var w Workspace
	v := tx.Bucket(bucketWorkspaces).Get([]byte(name))
	if v == nil {
		return w, fmt.Errorf("workspace %q: %w", name, ErrNotFound)
	}
	if err := json.Unmarshal(v, &w); err != nil {
		return w, fmt.Errorf("%w: workspace %q: %v", ErrCorrupt, name, err)
	}
	if w.Name != name {
		return w, fmt.Errorf("%w: workspace %q: record names %q", ErrCorrupt, name, w.Name)
	}
	return w, nil
}

func putWorkspaceTx(tx *bolt.Tx, w Workspace) error {
	v, err := json.Marshal(w)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketWorkspaces).Put([]byte(w.Name), v)
}

// appendEntryTx writes e (whose Seq is set) to name's head log and indexes
// its operation. A repeated operation key is refused: replay goes through
// FindOperation, and the refusal keeps a retried publication from landing
// twice.
func appendEntryTx(tx *bolt.Tx, name string, e HeadEntry) error {
	hb, err := tx.Bucket(bucketHeads).CreateBucketIfNotExists([]byte(name))
	if err != nil {
		return err
	}
	if e.Operation != "" {
		ob, err := tx.Bucket(bucketOperations).CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return err
		}
		if ob.Get([]byte(e.Operation)) != nil {
			return fmt.Errorf("workspace %q: operation %q already appended: %w", name, e.Operation, ErrExists)
		}
		if err := ob.Put([]byte(e.Operation), seqKey(e.Seq)); err != nil {
			return err
		}
	}
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return hb.Put(seqKey(e.Seq), v)
}

func (s *Store) checkEntry(tx *bolt.Tx, e *HeadEntry) error {
	if e.Gen.IsZero() {
		return fmt.Errorf("head entry without generation: %w", ErrInvalidID)
	}
	if tx.Bucket(bucketGenerations).Get(e.Gen[:]) == nil {
		return fmt.Errorf("generation %s: %w", e.Gen.Short(), ErrNotFound)
	}
	if e.Time == 0 {
		e.Time = s.Now()
	}
	return nil
}

// CreateWorkspace creates w with first as its first head-log entry (Seq 1);
// Head, Base and Seq are taken from first, Created defaults to the store
// clock. The parent, if any, and first.Gen must exist.
func (s *Store) CreateWorkspace(w Workspace, first HeadEntry) (Workspace, error) {
	if err := ValidWorkspaceName(w.Name); err != nil {
		return Workspace{}, fmt.Errorf("create workspace: %w", err)
	}
	err := s.update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketWorkspaces).Get([]byte(w.Name)) != nil {
			return fmt.Errorf("workspace %q: %w", w.Name, ErrExists)
		}
		if w.Parent != "" {
			if _, err := getWorkspaceTx(tx, w.Parent); err != nil {
				return fmt.Errorf("parent: %w", err)
			}
			if err := tx.Bucket(bucketChildren).Put(childKey(w.Parent, w.Name), []byte{1}); err != nil {
				return err
			}
		}
		if err := s.checkEntry(tx, &first); err != nil {
			return err
		}
		// A head log left by a deleted workspace of the same name is gone
		// (DeleteWorkspace removes it), so numbering restarts at 1.
		first.Seq = 1
		if w.Created == 0 {
			w.Created = s.Now()
		}
		w.Head, w.Base, w.Seq = first.Gen, first.Base, first.Seq
		if err := appendEntryTx(tx, w.Name, first); err != nil {
			return err
		}
		if err := putWorkspaceTx(tx, w); err != nil {
			return err
		}
		return fail("head.append")
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("create workspace %q: %w", w.Name, err)
	}
	return w, nil
}

// GetWorkspace returns workspace name.
func (s *Store) GetWorkspace(name string) (Workspace, error) {
	var w Workspace
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		w, err = getWorkspaceTx(tx, name)
		return err
	})
	return w, err
}

// ListWorkspaces returns every workspace sorted by name.
func (s *Store) ListWorkspaces() ([]Workspace, error) {
	var out []Workspace
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketWorkspaces).ForEach(func(k, v []byte) error {
			var w Workspace
			if err := json.Unmarshal(v, &w); err != nil {
				return fmt.Errorf("%w: workspace %q: %v", ErrCorrupt, k, err)
			}
			out = append(out, w)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	return out, nil
}

// Children returns the names of name's child workspaces, sorted.
func (s *Store) Children(name string) ([]string, error) {
	var out []string
	err := s.view(func(tx *bolt.Tx) error {
		out = childrenTx(tx, name)
		return nil
	})
	return out, err
}

func childrenTx(tx *bolt.Tx, name string) []string {
	var out []string
	prefix := childKey(name, "")
	c := tx.Bucket(bucketChildren).Cursor()
	for k, _ := c.Seek(prefix); k != nil && len(k) > len(prefix) && string(k[:len(prefix)]) == string(prefix); k, _ = c.Next() {
		out = append(out, string(k[len(prefix):]))
	}
	return out
}

// DeleteWorkspace removes workspace name and its head log. It refuses
// (ErrHasChildren) while children exist. Generations it reached become
// garbage for GC unless other logs reach them.
func (s *Store) DeleteWorkspace(name string) error {
	err := s.update(func(tx *bolt.Tx) error {
		w, err := getWorkspaceTx(tx, name)
		if err != nil {
			return err
		}
		if kids := childrenTx(tx, name); len(kids) > 0 {
			return fmt.Errorf("%w: %q", ErrHasChildren, kids)
		}
		if w.Parent != "" {
			if err := tx.Bucket(bucketChildren).Delete(childKey(w.Parent, name)); err != nil {
				return err
			}
		}
		for _, bk := range [][]byte{bucketHeads, bucketOperations} {
			b := tx.Bucket(bk)
			if b.Bucket([]byte(name)) != nil {
				if err := b.DeleteBucket([]byte(name)); err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bucketWorkspaces).Delete([]byte(name))
	})
	if err != nil {
		return fmt.Errorf("delete workspace %q: %w", name, err)
	}
	return nil
}

// CompareAndAppend appends e to name's head log if name's head is still
// expectHead (else ErrHeadMoved), e.Gen exists, and permit (if non-nil) is
// valid at the store clock (else ErrFenced) — all in one transaction. The
// store assigns e.Seq. It returns the updated workspace.
func (s *Store) CompareAndAppend(name string, expectHead ID, e HeadEntry, permit *Permit) (Workspace, error) {
	ws, err := s.CompareAndAppendMany([]Append{{Workspace: name, ExpectHead: expectHead, Entry: e}}, permit)
	if err != nil {
		return Workspace{}, err
	}
	return ws[0], nil
}

// CompareAndAppendMany is CompareAndAppend for several workspaces at once
// (land, context land): every append commits or none does. Appends apply in
// order, so a workspace listed twice must expect the head set by its
// earlier append.
func (s *Store) CompareAndAppendMany(appends []Append, permit *Permit) ([]Workspace, error) {
	out := make([]Workspace, len(appends))
	if err := s.update(func(tx *bolt.Tx) error { return s.appendTx(tx, appends, permit, out) }); err != nil {
		return nil, fmt.Errorf("append head: %w", err)
	}
	return out, nil
}

// appendTx is CompareAndAppendMany inside tx; out receives the workspaces.
func (s *Store) appendTx(tx *bolt.Tx, appends []Append, permit *Permit, out []Workspace) error {
	if permit != nil {
		if err := CheckPermitTx(tx, *permit, s.Now()); err != nil {
			return err
		}
	}
	for i, a := range appends {
		w, err := getWorkspaceTx(tx, a.Workspace)
		if err != nil {
			return err
		}
		if w.Head != a.ExpectHead {
			return fmt.Errorf("workspace %q: head is %s, expected %s: %w",
				a.Workspace, w.Head.Short(), shortOrNone(a.ExpectHead), ErrHeadMoved)
		}
		e := a.Entry
		if err := s.checkEntry(tx, &e); err != nil {
			return fmt.Errorf("workspace %q: %w", a.Workspace, err)
		}
		e.Seq = w.Seq + 1
		if err := appendEntryTx(tx, a.Workspace, e); err != nil {
			return err
		}
		w.Head, w.Base, w.Seq = e.Gen, e.Base, e.Seq
		if err := putWorkspaceTx(tx, w); err != nil {
			return err
		}
		out[i] = w
	}
	return fail("head.append")
}

func shortOrNone(id ID) string {
	if id.IsZero() {
		return "none"
	}
	return id.Short()
}

// HeadLog returns name's head log newest first, at most limit entries
// (limit <= 0: all).
func (s *Store) HeadLog(name string, limit int) ([]HeadEntry, error) {
	var out []HeadEntry
	err := s.view(func(tx *bolt.Tx) error {
		if _, err := getWorkspaceTx(tx, name); err != nil {
			return err
		}
		hb := tx.Bucket(bucketHeads).Bucket([]byte(name))
		if hb == nil {
			return fmt.Errorf("%w: workspace %q has no head log", ErrCorrupt, name)
		}
		c := hb.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if limit > 0 && len(out) >= limit {
				break
			}
			e, err := decodeHeadEntry(name, k, v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("head log: %w", err)
	}
	return out, nil
}

func decodeHeadEntry(name string, k, v []byte) (HeadEntry, error) {
	var e HeadEntry
	if err := json.Unmarshal(v, &e); err != nil {
		return e, fmt.Errorf("%w: workspace %q head entry: %v", ErrCorrupt, name, err)
	}
	if len(k) != 8 || binary.BigEndian.Uint64(k) != e.Seq {
		return e, fmt.Errorf("%w: workspace %q head entry %d stored under key %x", ErrCorrupt, name, e.Seq, k)
	}
	return e, nil
}

// FindOperation returns the entry appended to name's log with operation
// key op, if any — the recorded outcome a retried operation replays.
func (s *Store) FindOperation(name, op string) (HeadEntry, bool, error) {
	var (
		e     HeadEntry
		found bool
	)
	if op == "" {
		return e, false, nil
	}
	err := s.view(func(tx *bolt.Tx) error {
		ob := tx.Bucket(bucketOperations).Bucket([]byte(name))
		if ob == nil {
			return nil
		}
		seq := ob.Get([]byte(op))
		if seq == nil {
			return nil
		}
		hb := tx.Bucket(bucketHeads).Bucket([]byte(name))
		var v []byte
		if hb != nil {
			v = hb.Get(seq)
		}
		if v == nil {
			return fmt.Errorf("%w: workspace %q: operation %q indexes missing entry %x", ErrCorrupt, name, op, seq)
		}
		var err error
		e, err = decodeHeadEntry(name, seq, v)
		found = err == nil
		return err
	})
	if err != nil {
		return HeadEntry{}, false, fmt.Errorf("find operation: %w", err)
	}
	return e, found, nil
}
