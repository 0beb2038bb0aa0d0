package etcdmeta

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzKeyLayout: any prefix and key survive the layout, a store's data
// range never holds another prefix's keys, and any bytes either split into
// parts that encode back to exactly those bytes or fail; nothing panics.
func FuzzKeyLayout(f *testing.F) {
	f.Add("a", "a/b", []byte("b\x00k"), []byte("a\x00dk"))
	f.Add("a", "a\x00d", []byte("b\x00k"), []byte("%00\x00gx\x00"))
	f.Add("a%", "a%25", []byte("t\x00\xff"), []byte("a%2\x00d"))
	f.Add("", "%", []byte("x\x00y"), []byte("\x00d"))
	f.Fuzz(func(t *testing.T, p1, p2 string, key, raw []byte) {
		s1 := &Store{root: encodeRoot(p1)}
		ek := s1.dataKey(string(key))
		prefix, tag, rest, err := splitKey([]byte(ek))
		if err != nil || prefix != p1 || tag != tagData || !bytes.Equal(rest, key) {
			t.Fatalf("%q %q -> %q -> %q %q %q %v", p1, key, ek, prefix, tag, rest, err)
		}
		if p1 != p2 {
			s2 := &Store{root: encodeRoot(p2)}
			for _, k := range []string{ek, s1.guardKey(string(key))} {
				if strings.HasPrefix(k, s2.dataKey("")) || strings.HasPrefix(k, s2.guardKey("")) {
					t.Fatalf("key %q of store %q falls in store %q's ranges", k, p1, p2)
				}
			}
		}
		prefix, tag, rest, err = splitKey(raw)
		if err != nil {
			if !errors.Is(err, errBadLayout) {
				t.Fatalf("error %v does not wrap errBadLayout", err)
			}
			return
		}
		if again := encodeRoot(prefix) + string(tag) + string(rest); again != string(raw) {
			t.Fatalf("%q split into %q %q %q, which encodes as %q", raw, prefix, tag, rest, again)
		}
	})
}

// TestPrefixEnd: [p, prefixEnd(p)) is exactly the keys starting with p.
func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ p, end string }{
		{"a\x00d", "a\x00e"}, {"a\x00d\xff", "a\x00e"}, {"a\x00d\xff\xff", "a\x00e"}, {"\xff", "\x00"},
	} {
		if got := prefixEnd(c.p); got != c.end {
			t.Errorf("prefixEnd(%q) = %q, want %q", c.p, got, c.end)
		}
	}
}
