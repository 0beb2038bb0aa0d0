package store

import (
	"encoding/json"
	"fmt"
)

// GenKind says which operation made a generation.
type GenKind string

// Generation kinds.
const (
	GenCreate  GenKind = "create"
	GenCommit  GenKind = "commit"
	GenCapture GenKind = "capture"
	GenRebase  GenKind = "rebase"
	GenLand    GenKind = "land"
	GenUndo    GenKind = "undo"
	// GenExternal is what programs other than acyclicfs changed in an
	// in-place workspace's directory, as detected from stat fingerprints.
	GenExternal GenKind = "external"
	// GenResolve settles recorded conflicts (acyclicfs resolve).
	GenResolve GenKind = "resolve"
)

// Valid reports whether k is a known kind.
func (k GenKind) Valid() bool {
	switch k {
	case GenCreate, GenCommit, GenCapture, GenRebase, GenLand, GenUndo, GenExternal, GenResolve:
		return true
	}
	return false
}

// Generation is an immutable snapshot of a whole tree. Its ID is the hash
// of its canonical encoding.
type Generation struct {
	Root      ID      `json:"root"`
	Parents   []ID    `json:"parents,omitempty"`
	Workspace string  `json:"workspace"`
	Kind      GenKind `json:"kind"`
	Operation string  `json:"operation,omitempty"`
	Time      int64   `json:"time"` // Unix milliseconds
	// Conflicts are the paths of Root that a merge could not settle and
	// that nobody has resolved yet: Root holds a stand-in there (ours, or
	// conflict markers), and each side is kept here, so GC keeps it. They
	// are part of the snapshot: a generation made from this one (a
	// capture, a commit) carries them until a resolve drops them, and a
	// workspace whose head has conflicts its parent's head does not share
	// cannot land. Sorted by path, paths unique. Omitted when empty, so
	// generations without conflicts encode as before.
	Conflicts []Conflict `json:"conflicts,omitempty"`
	// Links are the hard-link groups of Root: each group is the sorted
	// paths (slash-separated, relative to the root) of one file that has
	// several names; every path names a non-directory entry of Root, all
	// with the same kind, ID and size (content, symlink target or device
	// number). Groups are sorted by their first path and no
	// path is in two groups. Omitted when empty, so generations without
	// hard links encode exactly as before the field existed.
	Links [][]string `json:"links,omitempty"`
}

// Conflict is one unsettled path of a generation. Kind names why
// ("content", "modify/delete", "add/add", "type", "mode", "git-ref", …).
// A nil side is absent on that side.
type Conflict struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"`
	Base   *Side  `json:"base,omitempty"`
	Ours   *Side  `json:"ours,omitempty"`
	Theirs *Side  `json:"theirs,omitempty"`
}

// Side is one version of a conflicted path: a tree entry without its name.
type Side struct {
	Kind  Kind  `json:"kind"`
	ID    ID    `json:"id"`
	Size  int64 `json:"size,omitempty"`
	Mtime int64 `json:"mtime,omitempty"`
	// Mode is the entry's permission bits where they are not its kind's
	// default (Entry.Perm); absent otherwise, so sides from before modes
	// were kept encode as they did.
	Mode *uint32 `json:"mode,omitempty"`
}

// SideOf returns e as a Side (nil for nil).
func SideOf(e *Entry) *Side {
	if e == nil {
		return nil
	}
	sd := &Side{Kind: e.Kind, ID: e.ID, Size: e.Size, Mtime: e.Mtime}
	if e.HasPerm() {
		p := e.Perm()
		sd.Mode = &p
	}
	return sd
}

// Entry returns the side as a tree entry called name (nil for nil).
func (sd *Side) Entry(name string) *Entry {
	if sd == nil {
		return nil
	}
	e := &Entry{Name: name, Kind: sd.Kind, ID: sd.ID, Size: sd.Size, Mtime: sd.Mtime}
	if sd.Mode != nil && *sd.Mode <= PermMask {
		e.perm = permSet | uint16(*sd.Mode)
	}
	return e
}

// Sides returns the conflict's base, ours and theirs in that order.
func (c *Conflict) Sides() [3]*Side { return [3]*Side{c.Base, c.Ours, c.Theirs} }

func validConflicts(cs []Conflict) error {
	for i, c := range cs {
		if c.Path == "" || c.Kind == "" {
			return fmt.Errorf("%w: generation conflict %d without path or kind", ErrCorrupt, i)
		}
		if i > 0 && cs[i-1].Path >= c.Path {
			return fmt.Errorf("%w: generation conflicts not sorted and unique at %q", ErrCorrupt, c.Path)
		}
		for _, sd := range c.Sides() {
			if sd == nil {
				continue
			}
			if !sd.Kind.Valid() || sd.ID.IsZero() != sd.Kind.IsSpecial() || sd.Size < 0 {
				return fmt.Errorf("%w: generation conflict %q: bad side", ErrCorrupt, c.Path)
			}
			if sd.Mode != nil && *sd.Mode > PermMask {
				return fmt.Errorf("%w: generation conflict %q: bad side mode", ErrCorrupt, c.Path)
			}
			e := sd.Entry(c.Path)
			if err := checkSpecial(*e); err != nil {
				return fmt.Errorf("generation conflict %q: %w", c.Path, err)
			}
			if err := checkPerm(e); err != nil {
				return fmt.Errorf("generation conflict %q: %w", c.Path, err)
			}
		}
	}
	return nil
}

// Encode returns the canonical encoding (JSON with fixed field order; Go's
// encoder is deterministic for a struct).
func (g *Generation) Encode() ([]byte, error) {
	if !g.Kind.Valid() {
		return nil, fmt.Errorf("%w: generation kind %q", ErrCorrupt, g.Kind)
	}
	if g.Root.IsZero() {
		return nil, fmt.Errorf("%w: generation without root", ErrCorrupt)
	}
	if err := validConflicts(g.Conflicts); err != nil {
		return nil, err
	}
	if err := ValidLinks(g.Links); err != nil {
		return nil, err
	}
	return json.Marshal(g)
}

// GenerationID returns the address of an encoded generation.
func GenerationID(encoded []byte) ID { return hashWithDomain(domainGeneration, encoded) }

// DecodeGeneration parses a canonical generation encoding.
func DecodeGeneration(b []byte) (*Generation, error) {
	var g Generation
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("%w: generation: %v", ErrCorrupt, err)
	}
	re, err := g.Encode()
	if err != nil {
		return nil, err
	}
	if string(re) != string(b) {
		return nil, fmt.Errorf("%w: generation: non-canonical encoding", ErrCorrupt)
	}
	return &g, nil
}
