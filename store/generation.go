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
)

// Valid reports whether k is a known kind.
func (k GenKind) Valid() bool {
	switch k {
	case GenCreate, GenCommit, GenCapture, GenRebase, GenLand, GenUndo, GenExternal:
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
