package rebase

import (
	"fmt"
	"strings"
)

// op is one line of an edit script: ' ' keep, '-' delete, '+' insert.
// ai and bi are the indices of the line in a and b; for an insert ai is the
// number of a lines before it, for a delete bi the number of b lines.
type op struct {
	kind   byte
	ai, bi int
}

func editScript(ma []int, nb int) []op {
	ops := make([]op, 0, len(ma)+nb)
	j := 0
	for i, m := range ma {
		if m < 0 {
			ops = append(ops, op{'-', i, j})
			continue
		}
		for ; j < m; j++ {
			ops = append(ops, op{'+', i, j})
		}
		ops = append(ops, op{' ', i, j})
		j++
	}
	for ; j < nb; j++ {
		ops = append(ops, op{'+', len(ma), j})
	}
	return ops
}

// UnifiedDiff returns a git-style unified diff of a and b with context
// lines of context (negative means 3), or "" when they are equal. The names
// are printed verbatim on the "---" and "+++" lines, so pass "a/path" and
// "b/path" (or "/dev/null") for git's look. A line without a trailing
// newline is followed by "\ No newline at end of file". When either side is
// binary (IsBinary) the result is the single line
// "Binary files aName and bName differ".
func UnifiedDiff(aName, bName string, a, b []byte, context int) string {
	if string(a) == string(b) {
		return ""
	}
	if context < 0 {
		context = 3
	}
	if IsBinary(a) || IsBinary(b) {
		return fmt.Sprintf("Binary files %s and %s differ\n", aName, bName)
	}
	al, bl := splitLines(a), splitLines(b)
	in := interner{}
	ops := editScript(matchLines(in.ids(al), in.ids(bl)), len(bl))

	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", aName, bName)
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(0, i-context)
		last := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				last = j
			} else if j-last > 2*context {
				break
			}
		}
		end := min(len(ops), last+1+context)
		writeHunk(&sb, ops[start:end], al, bl)
		i = end
	}
	return sb.String()
}

func writeHunk(sb *strings.Builder, ops []op, al, bl [][]byte) {
	na, nb := 0, 0
	for _, o := range ops {
		if o.kind != '+' {
			na++
		}
		if o.kind != '-' {
			nb++
		}
	}
	fmt.Fprintf(sb, "@@ -%s +%s @@\n", hunkRange(ops[0].ai, na), hunkRange(ops[0].bi, nb))
	for _, o := range ops {
		var line []byte
		if o.kind == '+' {
			line = bl[o.bi]
		} else {
			line = al[o.ai]
		}
		sb.WriteByte(o.kind)
		sb.Write(line)
		if len(line) == 0 || line[len(line)-1] != '\n' {
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// hunkRange formats a hunk's range as diff does: "start" for one line,
// "start,n" otherwise, and for an empty range the line before it.
func hunkRange(first, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", first)
	case 1:
		return fmt.Sprintf("%d", first+1)
	}
	return fmt.Sprintf("%d,%d", first+1, n)
}
