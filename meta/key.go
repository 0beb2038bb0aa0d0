package meta

import (
	"bytes"
	"fmt"
	"strings"
)

// MaxPartSize is the longest namespace segment and the longest leaf in
// bytes: bbolt's key size limit, since a segment becomes a bucket name and
// the leaf a key in the local implementation.
const MaxPartSize = 32768

// Key is a flat metadata key: a namespace of one or more segments, then a
// leaf.
//
//	key     = segment *( "/" segment ) NUL leaf
//	segment = 1*byte   ; "%", "/" and NUL written as %25, %2F and %00
//	leaf    = 1*byte   ; raw, unescaped
//
// The namespace says where a record family lives ("heads/<workspace>"), the
// leaf names the record in it. Because segments never contain a raw "/" or
// NUL, a namespace's keys are exactly the keys starting with its Prefix and
// no key of a nested namespace ("heads/a/b") shares that prefix; because
// the leaf is raw, keys of one namespace sort as their leaves do, so
// big-endian sequence numbers scan in numeric order.
type Key []byte

// Space is an encoded namespace. The zero Space is invalid: every key
// lives in a namespace.
type Space struct {
	prefix string // encoded segments and the NUL that ends them
}

// NewSpace returns the namespace of the given segments. It does not fail;
// an empty segment (or no segment) makes every key of the space invalid,
// reported by the transaction that uses it.
func NewSpace(segments ...string) Space {
	n := len(segments)
	for _, s := range segments {
		n += len(s) + 2*(strings.Count(s, "%")+strings.Count(s, "/")+strings.Count(s, "\x00"))
	}
	var b strings.Builder
	b.Grow(n)
	for i, s := range segments {
		if i > 0 {
			b.WriteByte('/')
		}
		for j := 0; j < len(s); j++ {
			switch c := s[j]; c {
			case '%', '/', 0:
				fmt.Fprintf(&b, "%%%02X", c)
			default:
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte(0)
	return Space{prefix: b.String()}
}

// Key returns the key of leaf in s.
func (s Space) Key(leaf []byte) Key {
	k := make(Key, 0, len(s.prefix)+len(leaf))
	return append(append(k, s.prefix...), leaf...)
}

// Prefix returns the scan prefix of the keys of s whose leaf starts with
// leafPrefix (all of s's keys for an empty leafPrefix).
func (s Space) Prefix(leafPrefix []byte) Key { return s.Key(leafPrefix) }

// Leaf returns k's leaf if k is in s, else nil.
func (s Space) Leaf(k Key) []byte {
	if len(k) <= len(s.prefix) || string(k[:len(s.prefix)]) != s.prefix {
		return nil
	}
	return k[len(s.prefix):]
}

// String returns the namespace in its escaped, readable form.
func (s Space) String() string { return strings.TrimSuffix(s.prefix, "\x00") }

// ParseKey splits a key into its namespace segments and leaf; anything
// that is not a valid key is an error wrapping ErrInvalidKey.
func ParseKey(k []byte) (segments []string, leaf []byte, err error) {
	segments, leaf, err = parse(k)
	if err == nil && len(leaf) == 0 {
		err = fmt.Errorf("%w: %q: empty leaf", ErrInvalidKey, k)
	}
	return segments, leaf, err
}

// ParsePrefix is ParseKey for scan prefixes, whose leaf part may be empty.
func ParsePrefix(p []byte) (segments []string, leafPrefix []byte, err error) {
	return parse(p)
}

func parse(k []byte) ([]string, []byte, error) {
	var buf [4][]byte
	raw, leaf, err := parseRaw(k, buf[:0])
	if err != nil {
		return nil, nil, err
	}
	segs := make([]string, len(raw))
	for i, r := range raw {
		segs[i] = string(r)
	}
	return segs, leaf, nil
}

// parseRaw is parse appending the unescaped segments to segs; a segment
// without escapes is a slice of k, so the local implementation walks its
// bucket path without allocating.
func parseRaw(k []byte, segs [][]byte) ([][]byte, []byte, error) {
	end := bytes.IndexByte(k, 0)
	if end < 0 {
		return nil, nil, fmt.Errorf("%w: %q: no namespace terminator", ErrInvalidKey, k)
	}
	leaf := k[end+1:]
	if len(leaf) > MaxPartSize {
		return nil, nil, fmt.Errorf("%w: leaf of %d bytes (limit %d)", ErrInvalidKey, len(leaf), MaxPartSize)
	}
	ns := k[:end]
	for {
		i := bytes.IndexByte(ns, '/')
		raw := ns
		if i >= 0 {
			raw = ns[:i]
		}
		seg, err := unescape(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %q: %v", ErrInvalidKey, k, err)
		}
		segs = append(segs, seg)
		if i < 0 {
			return segs, leaf, nil
		}
		ns = ns[i+1:]
	}
}

// unescape decodes one segment, accepting only the canonical form NewSpace
// writes, so that every valid key has exactly one spelling.
func unescape(raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("empty segment")
	}
	if bytes.IndexByte(raw, '%') < 0 {
		if len(raw) > MaxPartSize {
			return nil, fmt.Errorf("segment of %d bytes (limit %d)", len(raw), MaxPartSize)
		}
		return raw, nil
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '%' {
			out = append(out, c)
			continue
		}
		if i+2 >= len(raw) {
			return nil, fmt.Errorf("truncated escape")
		}
		switch string(raw[i+1 : i+3]) {
		case "25":
			out = append(out, '%')
		case "2F":
			out = append(out, '/')
		case "00":
			out = append(out, 0)
		default:
			return nil, fmt.Errorf("escape %%%s is not one of %%25 %%2F %%00", raw[i+1:i+3])
		}
		i += 2
	}
	if len(out) > MaxPartSize {
		return nil, fmt.Errorf("segment of %d bytes (limit %d)", len(out), MaxPartSize)
	}
	return out, nil
}
