package main

import (
	"strconv"
	"testing"
)

// TestQuotePath: plain names (UTF-8 included) print as they are; a name
// that would break one line per path, or is not UTF-8, or could be taken
// for a quoted one, prints quoted, and unquotes to itself.
func TestQuotePath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a/b.go", "a/b.go"},
		{"dir with space/é.txt", "dir with space/é.txt"},
		{`back\slash`, `back\slash`},
		{"new\nline", `"new\nline"`},
		{"tab\there", `"tab\there"`},
		{"bad\xff\xfe", `"bad\xff\xfe"`},
		{`"quoted"`, `"\"quoted\""`},
		{"del\x7f", `"del\x7f"`},
	} {
		got := quotePath(c.in)
		if got != c.want {
			t.Errorf("quotePath(%q) = %s, want %s", c.in, got, c.want)
		}
		if got != c.in {
			if back, err := strconv.Unquote(got); err != nil || back != c.in {
				t.Errorf("%s does not unquote to %q: %q %v", got, c.in, back, err)
			}
		}
	}
}
