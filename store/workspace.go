package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/acyclicfs/acyclicfs/meta"
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

// Namespaces of the metadata plane (meta/doc.go lists the layout).
var (
	spaceWorkspaces  = meta.NewSpace(string(bucketWorkspaces))
	spaceChildren    = meta.NewSpace(string(bucketChildren))
	spaceGenerations = meta.NewSpace(string(bucketGenerations))
)

// headsSpace holds name's head log: seqKey -> HeadEntry JSON.
func headsSpace(name string) meta.Space { return meta.NewSpace(string(bucketHeads), name) }

// operationsSpace indexes name's head log by operation key: op -> seqKey.
func operationsSpace(name string) meta.Space { return meta.NewSpace(string(bucketOperations), name) }

// storableName reports whether name can be a key leaf or namespace
// segment; no record is stored under any other name, so looking one up
// finds nothing (as bbolt did before the plane checked keys).
func storableName(name string) bool { return name != "" && len(name) <= meta.MaxPartSize }

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// childKey is parent NUL child; names never contain NUL.
func childKey(parent, child string) []byte {
	return append(append([]byte(parent), 0), child...)
}

func getWorkspaceTx(tx meta.Tx, name string) (Workspace, error) {
	var w Workspace
	var v []byte
	found := false
	if storableName(name) {
		var err error
		if v, found, err = tx.Get(spaceWorkspaces.Key([]byte(name))); err != nil {
			return w, fmt.Errorf("workspace %q: %w", name, err)
		}
	}
	if !found {
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

func putWorkspaceTx(tx meta.Tx, w Workspace) error {
	v, err := json.Marshal(w)
	if err != nil {
		return err
	}
	return tx.Put(spaceWorkspaces.Key([]byte(w.Name)), v)
}

// appendEntryTx writes e (whose Seq is set) to name's head log and indexes
// its operation. A repeated operation key is refused: replay goes through
// FindOperation, and the refusal keeps a retried publication from landing
// twice.
func appendEntryTx(tx meta.Tx, name string, e HeadEntry) error {
	if e.Operation != "" {
		ok := operationsSpace(name).Key([]byte(e.Operation))
		_, dup, err := tx.Get(ok)
		if err != nil {
			return err
		}
		if dup {
			return fmt.Errorf("workspace %q: operation %q already appended: %w", name, e.Operation, ErrExists)
		}
		if err := tx.Put(ok, seqKey(e.Seq)); err != nil {
			return err
		}
	}
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return tx.Put(headsSpace(name).Key(seqKey(e.Seq)), v)
}

func (s *Store) checkEntry(tx meta.Tx, e *HeadEntry) error {
	if e.Gen.IsZero() {
		return fmt.Errorf("head entry without generation: %w", ErrInvalidID)
	}
	if _, ok, err := tx.Get(spaceGenerations.Key(e.Gen[:])); err != nil || !ok {
		if err == nil {
			err = ErrNotFound
		}
		return fmt.Errorf("generation %s: %w", e.Gen.Short(), err)
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
	err := s.updateMeta(func(tx meta.Tx) error {
		if _, exists, err := tx.Get(spaceWorkspaces.Key([]byte(w.Name))); err != nil || exists {
			if err == nil {
				err = ErrExists
			}
			return fmt.Errorf("workspace %q: %w", w.Name, err)
		}
		if w.Parent != "" {
			if _, err := getWorkspaceTx(tx, w.Parent); err != nil {
				return fmt.Errorf("parent: %w", err)
			}
			if err := tx.Put(spaceChildren.Key(childKey(w.Parent, w.Name)), []byte{1}); err != nil {
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
	err := s.viewMeta(func(tx meta.Tx) error {
		var err error
		w, err = getWorkspaceTx(tx, name)
		return err
	})
	return w, err
}

// ListWorkspaces returns every workspace sorted by name.
func (s *Store) ListWorkspaces() ([]Workspace, error) {
	var out []Workspace
	err := s.viewMeta(func(tx meta.Tx) error {
		return tx.Scan(spaceWorkspaces.Prefix(nil), meta.ScanOptions{}, func(k meta.Key, v []byte) error {
			var w Workspace
			if err := json.Unmarshal(v, &w); err != nil {
				return fmt.Errorf("%w: workspace %q: %v", ErrCorrupt, spaceWorkspaces.Leaf(k), err)
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
	err := s.viewMeta(func(tx meta.Tx) error {
		var err error
		out, err = childrenTx(tx, name)
		return err
	})
	return out, err
}

func childrenTx(tx meta.Tx, name string) ([]string, error) {
	var out []string
	prefix := childKey(name, "")
	err := tx.Scan(spaceChildren.Prefix(prefix), meta.ScanOptions{}, func(k meta.Key, _ []byte) error {
		if child := spaceChildren.Leaf(k)[len(prefix):]; len(child) > 0 {
			out = append(out, string(child))
		}
		return nil
	})
	return out, err
}

// DeleteWorkspace removes workspace name and its head log. It refuses
// (ErrHasChildren) while children exist. Generations it reached become
// garbage for GC unless other logs reach them.
func (s *Store) DeleteWorkspace(name string) error {
	err := s.updateMeta(func(tx meta.Tx) error {
		w, err := getWorkspaceTx(tx, name)
		if err != nil {
			return err
		}
		kids, err := childrenTx(tx, name)
		if err != nil {
			return err
		}
		if len(kids) > 0 {
			return fmt.Errorf("%w: %q", ErrHasChildren, kids)
		}
		if w.Parent != "" {
			if err := tx.Delete(spaceChildren.Key(childKey(w.Parent, name))); err != nil {
				return err
			}
		}
		for _, sp := range []meta.Space{headsSpace(name), operationsSpace(name)} {
			if err := tx.DeletePrefix(sp.Prefix(nil)); err != nil {
				return err
			}
		}
		return tx.Delete(spaceWorkspaces.Key([]byte(name)))
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
	if err := s.updateMeta(func(tx meta.Tx) error { return s.appendTx(tx, appends, permit, out) }); err != nil {
		return nil, fmt.Errorf("append head: %w", err)
	}
	return out, nil
}

// appendTx is CompareAndAppendMany inside tx; out receives the workspaces.
func (s *Store) appendTx(tx meta.Tx, appends []Append, permit *Permit, out []Workspace) error {
	if permit != nil {
		if err := CheckPermitTx(tx, *permit, s.Now()); err != nil {
			return err
		}
	}
	for i, a := range appends {
		if s.headGuard != nil {
			if err := s.headGuard(tx, a.Workspace); err != nil {
				return err
			}
		}
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
	err := s.viewMeta(func(tx meta.Tx) error {
		if _, err := getWorkspaceTx(tx, name); err != nil {
			return err
		}
		heads := headsSpace(name)
		err := tx.Scan(heads.Prefix(nil), meta.ScanOptions{Reverse: true, Limit: limit}, func(k meta.Key, v []byte) error {
			e, err := decodeHeadEntry(name, heads.Leaf(k), v)
			if err != nil {
				return err
			}
			out = append(out, e)
			return nil
		})
		if err == nil && len(out) == 0 {
			err = fmt.Errorf("%w: workspace %q has no head log", ErrCorrupt, name)
		}
		return err
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
	if !storableName(op) || !storableName(name) {
		return e, false, nil
	}
	err := s.viewMeta(func(tx meta.Tx) error {
		seq, ok, err := tx.Get(operationsSpace(name).Key([]byte(op)))
		if err != nil || !ok {
			return err
		}
		var v []byte
		present := false
		if len(seq) == 8 {
			if v, present, err = tx.Get(headsSpace(name).Key(seq)); err != nil {
				return err
			}
		}
		if !present {
			return fmt.Errorf("%w: workspace %q: operation %q indexes missing entry %x", ErrCorrupt, name, op, seq)
		}
		e, err = decodeHeadEntry(name, seq, v)
		found = err == nil
		return err
	})
	if err != nil {
		return HeadEntry{}, false, fmt.Errorf("find operation: %w", err)
	}
	return e, found, nil
}
