package fsmhook

import (
	"strings"
	"testing"
)

// FuzzUnescapeMountinfo: never panics; a path without escapes is itself.
func FuzzUnescapeMountinfo(f *testing.F) {
	f.Add(`/tmp/a\040b`)
	f.Add(`\`)
	f.Add(`\99`)
	f.Fuzz(func(t *testing.T, s string) {
		got := unescapeMountinfo(s)
		if !strings.Contains(s, `\`) && got != s {
			t.Fatalf("%q became %q", s, got)
		}
	})
}
