package fsmtoken

import (
	"errors"
	"testing"

	"pgregory.net/rapid"
)

func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tok Token
		copy(tok.Tree[:], rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(rt, "tree"))
		if rapid.Bool().Draw(rt, "epoch?") {
			tok.Epoch = rapid.StringMatching(`[0-9a-z]{1,64}`).Draw(rt, "epoch")
			tok.Seq = rapid.Uint64().Draw(rt, "seq")
		}
		tok.Clean = rapid.Bool().Draw(rt, "clean")
		got, err := Parse(tok.String())
		if err != nil {
			rt.Fatalf("Parse(%q): %v", tok.String(), err)
		}
		if got != tok {
			rt.Fatalf("round trip: %+v became %+v", tok, got)
		}
	})
}

func TestParseRefuses(t *testing.T) {
	good := CleanAt([32]byte{1, 2, 3}).String()
	for _, s := range []string{
		"", "builtin:fake", "acyclicfs:2:" + good[len(Prefix):], good + ":x", good[:len(good)-1] + "x",
		Prefix + "00:-:0:c", // short tree
		Prefix + "0102030000000000000000000000000000000000000000000000000000000000:-:01:c", // leading zero
		Prefix + "0102030000000000000000000000000000000000000000000000000000000000:A:1:c",  // upper-case epoch
		Prefix + "0102030000000000000000000000000000000000000000000000000000000000:-:-1:c", // negative
		Prefix + "01020300000000000000000000000000000000000000000000000000000000AA:-:1:c",  // upper-case hex
	} {
		if _, err := Parse(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", s, err)
		}
	}
}

// FuzzParse: any string either fails with ErrMalformed or is a token
// whose encoding is the string itself.
func FuzzParse(f *testing.F) {
	f.Add(CleanAt([32]byte{9}).String())
	f.Add(Token{Epoch: "abc", Seq: 42}.String())
	f.Add("builtin:fake")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse(%q): %v is not ErrMalformed", s, err)
			}
			return
		}
		if tok.String() != s {
			t.Fatalf("Parse(%q) = %+v, which encodes as %q", s, tok, tok.String())
		}
	})
}
