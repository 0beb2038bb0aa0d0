package rebase

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// lcsLen is the textbook O(NM) longest common subsequence length.
func lcsLen(a, b []int) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			switch {
			case a[i] == b[j]:
				cur[j+1] = prev[j] + 1
			case prev[j+1] > cur[j]:
				cur[j+1] = prev[j+1]
			default:
				cur[j+1] = cur[j]
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func TestMatchLinesIsMinimal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alpha := rapid.IntRange(1, 4).Draw(t, "alpha")
		a := rapid.SliceOfN(rapid.IntRange(0, alpha), 0, 40).Draw(t, "a")
		b := rapid.SliceOfN(rapid.IntRange(0, alpha), 0, 40).Draw(t, "b")
		ma := matchLines(a, b)
		n, last := 0, -1
		for i, j := range ma {
			if j < 0 {
				continue
			}
			if j <= last || j >= len(b) || a[i] != b[j] {
				t.Fatalf("bad match a[%d]->b[%d] (last %d): %v %v %v", i, j, last, a, b, ma)
			}
			last = j
			n++
		}
		if want := lcsLen(a, b); n != want {
			t.Fatalf("matched %d lines, LCS is %d: a=%v b=%v", n, want, a, b)
		}
	})
}

func TestMatchLinesLopsided(t *testing.T) {
	for _, c := range []struct{ a, b []int }{
		{[]int{1}, []int{2, 3, 4, 5, 6}},
		{[]int{2, 3, 4, 5, 6}, []int{1}},
		{[]int{1, 2}, []int{3, 1, 4, 5, 6, 7, 2, 8}},
		{[]int{3, 1, 4, 5, 6, 7, 2, 8}, []int{1, 2}},
	} {
		ma := matchLines(c.a, c.b)
		n := 0
		for _, j := range ma {
			if j >= 0 {
				n++
			}
		}
		if want := lcsLen(c.a, c.b); n != want {
			t.Errorf("%v vs %v: matched %d, want %d", c.a, c.b, n, want)
		}
	}
}

func TestSplitLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a", []string{"a"}},
		{"a\n", []string{"a\n"}},
		{"a\r\nb", []string{"a\r\n", "b"}},
		{"\n\n", []string{"\n", "\n"}},
	} {
		got := splitLines([]byte(c.in))
		if len(got) != len(c.want) {
			t.Fatalf("%q: got %q", c.in, got)
		}
		for i := range got {
			if string(got[i]) != c.want[i] {
				t.Fatalf("%q: got %q", c.in, got)
			}
		}
	}
}

func TestIsBinary(t *testing.T) {
	if IsBinary([]byte("hello\nworld\n")) || IsBinary(nil) {
		t.Error("text reported binary")
	}
	if !IsBinary([]byte("a\x00b")) {
		t.Error("NUL not detected")
	}
	late := append(bytes.Repeat([]byte("x"), 8000), 0)
	if IsBinary(late) {
		t.Error("NUL after 8000 bytes must not count (git's heuristic)")
	}
	if !IsBinary(late[1:]) {
		t.Error("NUL at byte 7999 must count")
	}
}

func conflictText(ours, base, theirs string) string {
	return MarkerOurs + ours + MarkerBase + base + MarkerSep + theirs + MarkerTheirs
}

func TestMergeText(t *testing.T) {
	for _, c := range []struct {
		name             string
		base, ours, thrs string
		want             string
		clean            bool
	}{
		{"all empty", "", "", "", "", true},
		{"ours only", "a\nb\nc\n", "a\nB\nc\n", "a\nb\nc\n", "a\nB\nc\n", true},
		{"theirs only", "a\nb\nc\n", "a\nb\nc\n", "a\nb\nC\n", "a\nb\nC\n", true},
		{"disjoint", "1\n2\n3\n4\n5\n", "1\nX\n3\n4\n5\n", "1\n2\n3\n4\nY\n", "1\nX\n3\n4\nY\n", true},
		{"identical change", "a\nb\nc\n", "a\nX\nc\n", "a\nX\nc\n", "a\nX\nc\n", true},
		{"overlap", "a\nb\nc\n", "a\nX\nc\n", "a\nY\nc\n", "a\n" + conflictText("X\n", "b\n", "Y\n") + "c\n", false},
		// Adjacent edits conflict, as in git (see MergeText's doc).
		{"adjacent", "1\n2\n3\n4\n", "1\nX\n3\n4\n", "1\n2\nY\n4\n", "1\n" + conflictText("X\n3\n", "2\n3\n", "2\nY\n") + "4\n", false},
		{"insert same point", "a\nb\n", "a\nX\nb\n", "a\nY\nb\n", "a\n" + conflictText("X\n", "", "Y\n") + "b\n", false},
		{"insert both ends", "a\n", "X\na\n", "a\nY\n", "X\na\nY\n", true},
		{"delete vs edit", "a\nb\nc\n", "a\nc\n", "a\nB\nc\n", "a\n" + conflictText("", "b\n", "B\n") + "c\n", false},
		{"both delete same", "a\nb\nc\n", "a\nc\n", "a\nc\n", "a\nc\n", true},
		{"empty base add add", "", "x\n", "y\n", conflictText("x\n", "", "y\n"), false},
		{"ours empties file", "a\nb\n", "", "a\nb\n", "", true},
		{"theirs fills empty", "", "", "new\n", "new\n", true},
		{"trailing newline added by theirs", "a\nx\nb", "A\nx\nb", "a\nx\nb\n", "A\nx\nb\n", true},
		{"trailing newline next to edit", "a\nb", "A\nb", "a\nb\n", conflictText("A\nb\n", "a\nb\n", "a\nb\n"), false},
		{"trailing newline both ways", "a\nb", "a\nb\n", "a\nc", "a\n" + conflictText("b\n", "b\n", "c\n"), false},
		{"crlf is a change", "a\r\nb\r\n", "a\nb\r\n", "a\r\nb\r\n", "a\nb\r\n", true},
		{"crlf vs edit conflict", "a\r\n", "a\n", "b\r\n", conflictText("a\n", "a\r\n", "b\r\n"), false},
		{"no newline at all", "x", "y", "z", conflictText("y\n", "x\n", "z\n"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, clean := MergeText([]byte(c.base), []byte(c.ours), []byte(c.thrs))
			if string(got) != c.want || clean != c.clean {
				t.Errorf("MergeText(%q, %q, %q) =\n%q, %v\nwant\n%q, %v", c.base, c.ours, c.thrs, got, clean, c.want, c.clean)
			}
		})
	}
}

// genText draws a short text over a tiny line alphabet so that diffs have
// many coincidences, with optional CRLF and missing final newline.
func genText(t *rapid.T, label string) []byte {
	lines := rapid.SliceOfN(rapid.SampledFrom([]string{"a\n", "b\n", "c\n", "d\r\n", "\n"}), 0, 12).Draw(t, label)
	s := strings.Join(lines, "")
	if len(s) > 0 && rapid.Bool().Draw(t, label+"-chop") {
		s = s[:len(s)-1]
	}
	return []byte(s)
}

// mutate applies random line edits to b.
func mutate(t *rapid.T, label string, b []byte) []byte {
	lines := splitLines(b)
	n := rapid.IntRange(0, 4).Draw(t, label+"-n")
	for i := 0; i < n; i++ {
		pos := rapid.IntRange(0, len(lines)).Draw(t, label+"-pos")
		switch rapid.IntRange(0, 2).Draw(t, label+"-op") {
		case 0:
			l := []byte(rapid.SampledFrom([]string{"x\n", "y\n", "a\n"}).Draw(t, label+"-ins"))
			lines = append(lines[:pos], append([][]byte{l}, lines[pos:]...)...)
		case 1:
			if pos < len(lines) {
				lines = append(lines[:pos], lines[pos+1:]...)
			}
		case 2:
			if pos < len(lines) {
				lines[pos] = []byte("z\n")
			}
		}
	}
	return bytes.Join(lines, nil)
}

func TestMergeTextProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := genText(t, "base")
		x := mutate(t, "x", base)
		y := mutate(t, "y", base)
		if got, clean := MergeText(base, x, base); !clean || !bytes.Equal(got, x) {
			t.Fatalf("MergeText(b,x,b) = %q,%v want %q", got, clean, x)
		}
		if got, clean := MergeText(base, base, y); !clean || !bytes.Equal(got, y) {
			t.Fatalf("MergeText(b,b,y) = %q,%v want %q", got, clean, y)
		}
		if got, clean := MergeText(base, x, x); !clean || !bytes.Equal(got, x) {
			t.Fatalf("MergeText(b,x,x) = %q,%v want %q", got, clean, x)
		}
		m1, c1 := MergeText(base, x, y)
		m2, c2 := MergeText(base, y, x)
		if c1 != c2 {
			t.Fatalf("clean not symmetric: %v %v", c1, c2)
		}
		if c1 && !bytes.Equal(m1, m2) {
			t.Fatalf("clean merge not symmetric: %q vs %q", m1, m2)
		}
		if again, _ := MergeText(base, x, y); !bytes.Equal(again, m1) {
			t.Fatal("not deterministic")
		}
		if !c1 && !bytes.Contains(m1, []byte(MarkerOurs)) {
			t.Fatalf("conflict without markers: %q", m1)
		}
	})
}

// A merge of disjoint edits, far apart, is clean and contains both.
func TestMergeTextDisjointEditsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(6, 30).Draw(t, "n")
		var base []string
		for i := 0; i < n; i++ {
			base = append(base, strings.Repeat("l", i+1)+"\n")
		}
		i := rapid.IntRange(0, n-1).Draw(t, "i")
		j := rapid.IntRange(0, n-1).Draw(t, "j")
		if j-i < 2 && i-j < 2 {
			t.Skip("adjacent")
		}
		ours := append([]string(nil), base...)
		ours[i] = "OURS\n"
		theirs := append([]string(nil), base...)
		theirs[j] = "THEIRS\n"
		want := append([]string(nil), base...)
		want[i], want[j] = "OURS\n", "THEIRS\n"
		got, clean := MergeText([]byte(strings.Join(base, "")), []byte(strings.Join(ours, "")), []byte(strings.Join(theirs, "")))
		if !clean || string(got) != strings.Join(want, "") {
			t.Fatalf("got %q clean=%v", got, clean)
		}
	})
}

func TestUnifiedDiff(t *testing.T) {
	for _, c := range []struct {
		name, a, b string
		ctx        int
		want       string
	}{
		{"equal", "x\n", "x\n", 3, ""},
		{"one line", "a\nb\nc\n", "a\nB\nc\n", 3, "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"zero context", "a\nb\nc\n", "a\nB\nc\n", 0, "--- a/f\n+++ b/f\n@@ -2 +2 @@\n-b\n+B\n"},
		{"new file", "", "x\ny\n", 3, "--- a/f\n+++ b/f\n@@ -0,0 +1,2 @@\n+x\n+y\n"},
		{"deleted file", "x\n", "", 3, "--- a/f\n+++ b/f\n@@ -1 +0,0 @@\n-x\n"},
		{"no newline", "a\nb", "a\nb\n", 3, "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"},
		{"pure insert", "a\nb\n", "a\nX\nb\n", 0, "--- a/f\n+++ b/f\n@@ -1,0 +2 @@\n+X\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", "X\n2\n3\n4\n5\n6\n7\n8\nY\n", 1,
			"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-1\n+X\n 2\n@@ -8,2 +8,2 @@\n 8\n-9\n+Y\n"},
		{"merged hunks", "1\n2\n3\n4\n", "X\n2\n3\nY\n", 1,
			"--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n-1\n+X\n 2\n 3\n-4\n+Y\n"},
		{"binary", "a\x00", "b", 3, "Binary files a/f and b/f differ\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := UnifiedDiff("a/f", "b/f", []byte(c.a), []byte(c.b), c.ctx); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// applyUnified applies a diff produced by UnifiedDiff to a, to check that
// the diff is faithful.
func applyUnified(t interface{ Fatalf(string, ...any) }, a []byte, diff string) []byte {
	al := splitLines(a)
	var out []byte
	pos := 0
	lines := strings.SplitAfter(diff, "\n")
	for i := 2; i < len(lines) && lines[i] != ""; i++ {
		l := lines[i]
		if strings.HasPrefix(l, "@@") {
			var as, an, bs, bn int
			hdr := strings.Fields(l)
			parse := func(s string) (int, int) {
				var x, n int
				if strings.Contains(s, ",") {
					_, _ = fmtSscanf(s, "%d,%d", &x, &n)
				} else {
					_, _ = fmtSscanf(s, "%d", &x)
					n = 1
				}
				return x, n
			}
			as, an = parse(hdr[1][1:])
			bs, bn = parse(hdr[2][1:])
			_, _ = bs, bn
			start := as - 1
			if an == 0 {
				start = as
			}
			for ; pos < start; pos++ {
				out = append(out, al[pos]...)
			}
			continue
		}
		body := l[1:]
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\\ No newline") {
			body = strings.TrimSuffix(body, "\n")
			i++
		}
		switch l[0] {
		case ' ':
			out = append(out, body...)
			pos++
		case '-':
			pos++
		case '+':
			out = append(out, body...)
		default:
			t.Fatalf("bad diff line %q", l)
		}
	}
	for ; pos < len(al); pos++ {
		out = append(out, al[pos]...)
	}
	return out
}

func TestUnifiedDiffRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genText(t, "a")
		b := mutate(t, "b", a)
		if rapid.Bool().Draw(t, "chop") && len(b) > 0 {
			b = b[:len(b)-1]
		}
		ctx := rapid.IntRange(0, 3).Draw(t, "ctx")
		d := UnifiedDiff("a/f", "b/f", a, b, ctx)
		if bytes.Equal(a, b) {
			if d != "" {
				t.Fatalf("diff of equal inputs: %q", d)
			}
			return
		}
		if got := applyUnified(t, a, d); !bytes.Equal(got, b) {
			t.Fatalf("applying\n%s\nto %q gave %q, want %q", d, a, got, b)
		}
	})
}

// With the work cap forced tiny, the diff degrades to a non-minimal but
// still valid edit script, so merges and diffs stay correct.
func TestDiffWorkCapFallback(t *testing.T) {
	oldBudget, oldMin := diffBudget, minDiffD
	diffBudget, minDiffD = 1, 1
	t.Cleanup(func() { diffBudget, minDiffD = oldBudget, oldMin })
	rapid.Check(t, func(t *rapid.T) {
		base := genText(t, "base")
		x := mutate(t, "x", base)
		if got, clean := MergeText(base, x, base); !clean || !bytes.Equal(got, x) {
			t.Fatalf("MergeText(b,x,b) = %q,%v want %q", got, clean, x)
		}
		if d := UnifiedDiff("a", "b", base, x, 1); d != "" {
			if got := applyUnified(t, base, d); !bytes.Equal(got, x) {
				t.Fatalf("diff does not apply:\n%s", d)
			}
		}
	})
}

// A large, mostly different input finishes quickly thanks to the cap.
func TestDiffLargeInput(t *testing.T) {
	var a, b bytes.Buffer
	for i := 0; i < 50000; i++ {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
		if i%1000 == 0 {
			fmt.Fprintf(&a, "same%d\n", i)
			fmt.Fprintf(&b, "same%d\n", i)
		}
	}
	got, clean := MergeText(a.Bytes(), b.Bytes(), a.Bytes())
	if !clean || !bytes.Equal(got, b.Bytes()) {
		t.Fatal("large merge wrong")
	}
}
