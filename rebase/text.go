package rebase

import (
	"bytes"
	"slices"
)

// Conflict marker lines written by MergeText (diff3 style, as git's
// merge.conflictStyle=diff3).
const (
	MarkerOurs   = "<<<<<<< ours\n"
	MarkerBase   = "||||||| base\n"
	MarkerSep    = "=======\n"
	MarkerTheirs = ">>>>>>> theirs\n"
)

// binarySniffLen is how much of a file IsBinary inspects, as git does.
const binarySniffLen = 8000

// IsBinary reports whether b looks binary: a NUL byte within its first
// 8000 bytes, the same heuristic git uses.
func IsBinary(b []byte) bool {
	if len(b) > binarySniffLen {
		b = b[:binarySniffLen]
	}
	return bytes.IndexByte(b, 0) >= 0
}

// MergeText is a line-level 3-way merge (diff3). Each side is diffed
// against base; regions where only one side differs from base take that
// side, regions where both sides made the identical change take it, and
// anything else is a conflict.
//
// Adjacent edits conflict: a change to line 2 on one side and to line 3 on
// the other touch neighbouring base lines with no unchanged base line
// between them, and are reported as one conflicting region. This is what
// git does, and it is the conservative choice: a merge of neighbouring
// edits is exactly where a silent merge most often produces wrong code.
// Likewise two different insertions at the same point conflict.
//
// Lines are compared as bytes including "\r", so CRLF and LF versions of a
// line differ, and a last line without "\n" differs from the same line with
// one.
//
// When clean is false, merged holds every conflicting region as
//
//	<<<<<<< ours
//	(ours)
//	||||||| base
//	(base)
//	=======
//	(theirs)
//	>>>>>>> theirs
//
// where a section whose last line lacks a newline gets one, so markers
// always start a line.
func MergeText(base, ours, theirs []byte) (merged []byte, clean bool) {
	return merge3Lines(base, ours, theirs, false)
}

// MergeUnion is git's union merge (the merge=union attribute): MergeText,
// except that a conflicting region takes both sides' lines — ours, then
// theirs — with no markers, so it is always clean. Lines common to the
// start or end of both sides' versions of a region are kept once (git
// narrows a conflict the same way before taking the union). When ours'
// part ends without a newline and theirs' follows, a newline is added
// between them, as git does. The result's line order within a region is
// a guess: union suits files of independent lines (changelogs, lists).
func MergeUnion(base, ours, theirs []byte) []byte {
	merged, _ := merge3Lines(base, ours, theirs, true)
	return merged
}

func merge3Lines(base, ours, theirs []byte, union bool) (merged []byte, clean bool) {
	bl, ol, tl := splitLines(base), splitLines(ours), splitLines(theirs)
	in := make(interner, len(bl)+len(ol)/4+len(tl)/4)
	bi, oi, ti := in.ids(bl), in.ids(ol), in.ids(tl)
	mo := matchLines(bi, oi)
	mt := matchLines(bi, ti)

	out := make([]byte, 0, max(len(ours), len(theirs)))
	clean = true
	emit := func(lines [][]byte) {
		for _, l := range lines {
			out = append(out, l...)
		}
	}
	section := func(marker string, lines [][]byte) {
		out = append(out, marker...)
		emit(lines)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
	}
	i, j, k := 0, 0, 0 // positions in base, ours, theirs
	for i < len(bi) || j < len(oi) || k < len(ti) {
		// Next base line that both sides kept: the end of this region.
		e := i
		for e < len(bi) && (mo[e] < 0 || mt[e] < 0) {
			e++
		}
		je, ke := len(oi), len(ti)
		if e < len(bi) {
			je, ke = mo[e], mt[e]
		}
		if e == i && je == j && ke == k {
			// Stable line: unchanged on both sides.
			out = append(out, bl[i]...)
			i, j, k = i+1, j+1, k+1
			continue
		}
		b, o, t := bi[i:e], oi[j:je], ti[k:ke]
		switch {
		case slices.Equal(o, b):
			emit(tl[k:ke])
		case slices.Equal(t, b), slices.Equal(o, t):
			emit(ol[j:je])
		case union:
			ou, tu := ol[j:je], tl[k:ke]
			n := 0
			for n < len(ou) && n < len(tu) && o[n] == t[n] {
				n++
			}
			emit(ou[:n])
			ou, tu = ou[n:], tu[n:]
			o, t = o[n:], t[n:]
			s := 0
			for s < len(ou) && s < len(tu) && o[len(o)-1-s] == t[len(t)-1-s] {
				s++
			}
			emit(ou[:len(ou)-s])
			if len(tu) > s && len(out) > 0 && out[len(out)-1] != '\n' {
				out = append(out, '\n')
			}
			emit(tu)
		default:
			clean = false
			section(MarkerOurs, ol[j:je])
			section(MarkerBase, bl[i:e])
			section(MarkerSep, tl[k:ke])
			out = append(out, MarkerTheirs...)
		}
		i, j, k = e, je, ke
	}
	return out, clean
}
