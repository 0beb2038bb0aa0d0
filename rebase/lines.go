package rebase

import "bytes"

// splitLines splits b into lines, each keeping its terminating '\n'; the
// last line lacks it when b does not end in a newline. Lines are compared as
// raw bytes, so "x\r\n" and "x\n" differ and so do "x" and "x\n": a
// trailing-newline change is a change of the last line, as in git.
func splitLines(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	out := make([][]byte, 0, bytes.Count(b, []byte{'\n'})+1)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, b)
			break
		}
		out = append(out, b[:i+1:i+1])
		b = b[i+1:]
	}
	return out
}

// interner maps distinct lines to small integers so the diff compares ints.
type interner map[string]int

func (in interner) ids(lines [][]byte) []int {
	out := make([]int, len(lines))
	for i, l := range lines {
		id, ok := in[string(l)]
		if !ok {
			id = len(in)
			in[string(l)] = id
		}
		out[i] = id
	}
	return out
}

// diffBudget bounds the work of one middle-snake search: d is capped at
// max(minDiffD, diffBudget/(N+M)). Beyond it the subproblem is reported as
// a wholesale replacement — still a correct edit script, just not minimal.
// Only pathological inputs (millions of lines, almost nothing in common)
// reach the cap.
//
// They are variables only so tests can force the fallback.
var (
	diffBudget = 1 << 26
	minDiffD   = 256
)

// matchLines returns, for each element of a, the index in b it is matched
// to by a minimal (Myers, linear-space) diff, or -1 if it is deleted.
// Matches are strictly increasing.
func matchLines(a, b []int) []int {
	m := &myers{a: a, b: b, ma: make([]int, len(a))}
	for i := range m.ma {
		m.ma[i] = -1
	}
	m.compare(0, len(a), 0, len(b))
	return m.ma
}

type myers struct {
	a, b   []int
	ma     []int
	vf, vb []int // reused diagonal arrays (forward, backward)
}

func (m *myers) compare(a0, a1, b0, b1 int) {
	for {
		for a0 < a1 && b0 < b1 && m.a[a0] == m.b[b0] {
			m.ma[a0] = b0
			a0++
			b0++
		}
		for a0 < a1 && b0 < b1 && m.a[a1-1] == m.b[b1-1] {
			a1--
			b1--
			m.ma[a1] = b1
		}
		if a0 == a1 || b0 == b1 {
			return
		}
		x, y, u, v, ok := m.middleSnake(a0, a1, b0, b1)
		if !ok {
			return
		}
		for i := 0; i < u-x; i++ {
			m.ma[x+i] = y + i
		}
		// Recurse on the first half, loop on the second (bounded stack).
		m.compare(a0, x, b0, y)
		a0, b0 = u, v
	}
}

// middleSnake finds the middle snake (x,y)-(u,v) of an optimal edit path
// from (a0,b0) to (a1,b1), per Myers 1986 section 4b. ok is false when the
// edit distance exceeds the work cap.
func (m *myers) middleSnake(a0, a1, b0, b1 int) (x, y, u, v int, ok bool) {
	n, mm := a1-a0, b1-b0
	delta := n - mm
	odd := delta&1 != 0
	maxD := (n + mm + 1) / 2
	if c := max(minDiffD, diffBudget/(n+mm)); maxD > c {
		maxD = c
	}
	off := maxD + 1
	size := 2*maxD + 3
	if cap(m.vf) < size {
		m.vf = make([]int, size)
		m.vb = make([]int, size)
	}
	vf, vb := m.vf[:size], m.vb[:size]
	vf[off+1], vb[off+1] = 0, 0
	a, b := m.a, m.b
	for d := 0; d <= maxD; d++ {
		for k := -d; k <= d; k += 2 {
			var xx int
			if k == -d || (k != d && vf[off+k-1] < vf[off+k+1]) {
				xx = vf[off+k+1]
			} else {
				xx = vf[off+k-1] + 1
			}
			yy := xx - k
			sx, sy := xx, yy
			for xx < n && yy < mm && a[a0+xx] == b[b0+yy] {
				xx++
				yy++
			}
			vf[off+k] = xx
			if kr := delta - k; odd && kr >= -(d-1) && kr <= d-1 {
				if xx+vb[off+kr] >= n {
					return a0 + sx, b0 + sy, a0 + xx, b0 + yy, true
				}
			}
		}
		for kr := -d; kr <= d; kr += 2 {
			var xr int
			if kr == -d || (kr != d && vb[off+kr-1] < vb[off+kr+1]) {
				xr = vb[off+kr+1]
			} else {
				xr = vb[off+kr-1] + 1
			}
			yr := xr - kr
			sxr, syr := xr, yr
			for xr < n && yr < mm && a[a1-1-xr] == b[b1-1-yr] {
				xr++
				yr++
			}
			vb[off+kr] = xr
			if k := delta - kr; !odd && k >= -d && k <= d {
				if vf[off+k]+xr >= n {
					return a0 + n - xr, b0 + mm - yr, a0 + n - sxr, b0 + mm - syr, true
				}
			}
		}
	}
	return 0, 0, 0, 0, false
}
