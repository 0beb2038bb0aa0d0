package meta_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
)

// FuzzParseKey: any bytes either parse into segments and a leaf that
// encode back to exactly those bytes, or fail with ErrInvalidKey; nothing
// panics.
func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{
		"heads/ws\x00\x00\x00\x00\x00\x00\x00\x00\x01", "meta/conflicts\x00k", "a%2Fb%25c%00d\x00leaf",
		"no-terminator", "\x00leaf", "a//b\x00k", "a%2\x00k", "a%41\x00k", "a%2f\x00k", "a\x00", "a/\x00k",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, k []byte) {
		segs, leaf, err := meta.ParseKey(k)
		if err != nil {
			if !errors.Is(err, meta.ErrInvalidKey) {
				t.Fatalf("error %v does not wrap ErrInvalidKey", err)
			}
			return
		}
		if len(segs) == 0 || len(leaf) == 0 {
			t.Fatalf("accepted %q as %q %q", k, segs, leaf)
		}
		sp := meta.NewSpace(segs...)
		if again := sp.Key(leaf); !bytes.Equal(again, k) {
			t.Fatalf("%q parsed to %q %q, which encodes as %q", k, segs, leaf, again)
		}
		if !bytes.Equal(sp.Leaf(k), leaf) {
			t.Fatalf("Leaf(%q) = %q, want %q", k, sp.Leaf(k), leaf)
		}
	})
}

// FuzzSpaceRoundTrip: any segments and leaf survive encoding, and two
// different namespaces never share a prefix relation that would mix their
// keys in a scan.
func FuzzSpaceRoundTrip(f *testing.F) {
	f.Add("heads", "ws", []byte{0, 0, 0, 1}, "heads", "ws/x")
	f.Add("a%2F", "", []byte("k"), "a/", "b")
	f.Fuzz(func(t *testing.T, s1, s2 string, leaf []byte, o1, o2 string) {
		segs := []string{s1}
		if s2 != "" {
			segs = append(segs, s2)
		}
		k := meta.NewSpace(segs...).Key(leaf)
		got, gotLeaf, err := meta.ParseKey(k)
		valid := s1 != "" && len(leaf) > 0 && len(leaf) <= meta.MaxPartSize && len(s1) <= meta.MaxPartSize && len(s2) <= meta.MaxPartSize
		if !valid {
			if err == nil {
				t.Fatalf("invalid parts %q %q accepted", segs, leaf)
			}
			return
		}
		if err != nil || strings.Join(got, "\x01") != strings.Join(segs, "\x01") || !bytes.Equal(gotLeaf, leaf) {
			t.Fatalf("%q %q -> %q -> %q %q %v", segs, leaf, k, got, gotLeaf, err)
		}
		other := []string{o1}
		if o2 != "" {
			other = append(other, o2)
		}
		if strings.Join(other, "\x01") != strings.Join(segs, "\x01") && o1 != "" {
			if bytes.HasPrefix(k, meta.NewSpace(other...).Prefix(nil)) {
				t.Fatalf("key %q of %q falls in the scan of %q", k, segs, other)
			}
		}
	})
}
