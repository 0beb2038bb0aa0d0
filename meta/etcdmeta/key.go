package etcdmeta

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/acyclicfs/acyclicfs/meta"
)

// Layout under a store's root (see docs/scale-out.md):
//
//	root    = escaped prefix NUL       ; "%" and NUL written as %25 and %00
//	data    = root "d" Key             ; a record: the flat meta.Key, raw
//	guard   = root "g" namespace NUL   ; one per namespace, bumped by every write in it
//
// The prefix is escaped and ended by NUL so that no store's keys fall in
// another store's ranges, whatever the two prefixes are ("a" and "a/b",
// "a" and "a\x00d..."): the first raw NUL of an etcd key ends its root.
// The meta.Key itself needs no escaping: its own codec already keeps a
// namespace's keys exactly the keys starting with its prefix, and etcd
// keys are arbitrary bytes ordered bytewise, as meta's keys are.
const (
	tagData  = 'd'
	tagGuard = 'g'
)

// errBadLayout is returned by splitKey for bytes that are not a data or
// guard key of some root.
var errBadLayout = errors.New("not an etcdmeta key")

// encodeRoot returns the escaped root of prefix, ending in NUL.
func encodeRoot(prefix string) string {
	var b bytes.Buffer
	b.Grow(len(prefix) + 1)
	for i := 0; i < len(prefix); i++ {
		switch c := prefix[i]; c {
		case '%':
			b.WriteString("%25")
		case 0:
			b.WriteString("%00")
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte(0)
	return b.String()
}

// DataKey is the etcd key under which the store of prefix (New) keeps
// record k: for writers outside the plane (a claim put with the node's
// own etcd lease) and for ranges over a namespace (k a Space's prefix).
func DataKey(prefix string, k meta.Key) string {
	return encodeRoot(prefix) + string(tagData) + string(k)
}

// splitKey is the inverse of the layout: it returns the prefix, the tag
// and the rest (the meta.Key of a data key, the namespace and its NUL of a
// guard key) of an etcd key, accepting only the canonical spelling.
func splitKey(k []byte) (prefix string, tag byte, rest []byte, err error) {
	end := bytes.IndexByte(k, 0)
	if end < 0 || end+1 >= len(k) {
		return "", 0, nil, fmt.Errorf("%w: %q: no root", errBadLayout, k)
	}
	raw := k[:end]
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '%' {
			out = append(out, c)
			continue
		}
		if i+2 >= len(raw) {
			return "", 0, nil, fmt.Errorf("%w: %q: truncated escape", errBadLayout, k)
		}
		switch string(raw[i+1 : i+3]) {
		case "25":
			out = append(out, '%')
		case "00":
			out = append(out, 0)
		default:
			return "", 0, nil, fmt.Errorf("%w: %q: escape %%%s", errBadLayout, k, raw[i+1:i+3])
		}
		i += 2
	}
	tag = k[end+1]
	if tag != tagData && tag != tagGuard {
		return "", 0, nil, fmt.Errorf("%w: %q: tag %q", errBadLayout, k, tag)
	}
	return string(out), tag, k[end+2:], nil
}

// namespaceOf returns the namespace part of a key or scan prefix that
// meta.ParseKey or meta.ParsePrefix accepted: the bytes up to and
// including its first NUL.
func namespaceOf(k []byte) []byte {
	return k[:bytes.IndexByte(k, 0)+1]
}

// prefixEnd returns the etcd range end that makes [p, end) exactly the
// keys starting with p (clientv3.GetPrefixRangeEnd without the string
// round trip). p is never all 0xff here: it starts with a root.
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}
