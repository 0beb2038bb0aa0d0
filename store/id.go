package store

import (
	"encoding/hex"
	"fmt"
	"sort"

	"lukechampine.com/blake3"
)

// HashName names the hash function behind every ID; it is recorded in the
// store's format header so a future change of hash is detectable.
const HashName = "blake3-256"

// IDSize is the length of an ID in bytes.
const IDSize = 32

// ShortIDLen is the number of hex characters of an ID printed in tables.
const ShortIDLen = 12

// MinPrefixLen is the shortest generation prefix accepted as user input.
const MinPrefixLen = 8

// ID is the content address of a blob, tree or generation: the BLAKE3-256
// hash of a domain-separated encoding. The zero ID means "none".
type ID [IDSize]byte

// Domain separators keep a blob, a tree and a generation with the same
// bytes from ever sharing an address.
const (
	domainTree       = "acyclicfs tree v1\x00"
	domainGeneration = "acyclicfs generation v1\x00"
)

// ParseID parses a full 64-character lowercase or uppercase hex ID.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*IDSize {
		return id, fmt.Errorf("%w: %q is not %d hex characters", ErrInvalidID, s, 2*IDSize)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("%w: %q: %v", ErrInvalidID, s, err)
	}
	return id, nil
}

// String returns the full lowercase hex form.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short returns the first ShortIDLen hex characters.
func (id ID) Short() string { return id.String()[:ShortIDLen] }

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// MarshalText encodes the ID as hex (used by JSON).
func (id ID) MarshalText() ([]byte, error) {
	if id.IsZero() {
		return []byte{}, nil
	}
	return []byte(id.String()), nil
}

// UnmarshalText decodes a hex ID; the empty string is the zero ID.
func (id *ID) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*id = ID{}
		return nil
	}
	p, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// IDSet is a set of IDs.
type IDSet map[ID]struct{}

// Add inserts id.
func (s IDSet) Add(id ID) { s[id] = struct{}{} }

// Has reports whether id is in the set.
func (s IDSet) Has(id ID) bool { _, ok := s[id]; return ok }

// Sorted returns the members in byte order.
func (s IDSet) Sorted() []ID {
	out := make([]ID, 0, len(s))
	for id := range s {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return string(out[i][:]) < string(out[j][:]) })
	return out
}

func hashWithDomain(domain string, payload []byte) ID {
	if n := len(domain) + len(payload); n <= 256 {
		// Small objects (base references, overlay nodes, small trees):
		// one-shot hashing of a stack buffer is several times cheaper than
		// a streaming hasher, and gives the same digest.
		var buf [256]byte
		b := append(append(buf[:0], domain...), payload...)
		return ID(blake3.Sum256(b))
	}
	h := blake3.New(IDSize, nil)
	h.Write([]byte(domain))
	h.Write(payload)
	var id ID
	h.Sum(id[:0])
	return id
}
