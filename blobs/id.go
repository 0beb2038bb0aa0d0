package blobs

import (
	"encoding/hex"

	"lukechampine.com/blake3"
)

// IDSize is the length of an ID in bytes.
const IDSize = 32

// shortIDLen is the number of hex characters Short prints.
const shortIDLen = 12

// ID is the content address of an object: the BLAKE3-256 hash of its
// domain-separated content (Sum, SparseSum).
type ID [IDSize]byte

// String returns the full lowercase hex form.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short returns the first 12 hex characters.
func (id ID) Short() string { return id.String()[:shortIDLen] }

// domainBlob separates objects from everything else the store hashes
// (trees, generations, base references). Part of the on-disk format.
const domainBlob = "acyclicfs blob v1\x00"

// Hasher hashes object content incrementally; Sum gives its dense ID.
type Hasher struct{ h *blake3.Hasher }

// NewHasher returns a hasher primed with the blob domain separator.
func NewHasher() *Hasher {
	h := blake3.New(IDSize, nil)
	h.Write([]byte(domainBlob))
	return &Hasher{h: h}
}

// Write adds content.
func (b *Hasher) Write(p []byte) (int, error) { return b.h.Write(p) }

// Sum returns the ID of everything written so far.
func (b *Hasher) Sum() ID {
	var id ID
	b.h.Sum(id[:0])
	return id
}

// Sum returns the ID of an object with the given content, stored dense.
func Sum(content []byte) ID {
	h := NewHasher()
	h.Write(content)
	return h.Sum()
}

// Matches reports whether content is the content of id, in either
// encoding (dense or sparse).
func Matches(content []byte, id ID) bool {
	return Sum(content) == id || SparseSum(content) == id
}

func hexDecode(dst []byte, s string) (int, error) { return hex.Decode(dst, []byte(s)) }
