package blobs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"
)

// sparseSegment is a piece of logical content: zeros (written as zeros,
// or left a hole) or data.
type sparseSegment struct {
	n    int
	data byte // 0: zeros
	hole bool // zeros left as a hole (in files) or skipped (in the hasher)
}

func drawSegments(rt *rapid.T) ([]sparseSegment, []byte) {
	segs := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) sparseSegment {
		// Lengths around block boundaries and across several blocks.
		n := rapid.OneOf(rapid.IntRange(0, 9000), rapid.SampledFrom([]int{sparseBlock - 1, sparseBlock, sparseBlock + 1, 3 * sparseBlock})).Draw(rt, "n")
		data := byte(rapid.IntRange(0, 3).Draw(rt, "data"))
		return sparseSegment{n: n, data: data, hole: data == 0 && rapid.Bool().Draw(rt, "hole")}
	}), 0, 12).Draw(rt, "segments")
	var content []byte
	for _, s := range segs {
		content = append(content, bytes.Repeat([]byte{s.data}, s.n)...)
	}
	return segs, content
}

// A sparse ID is a function of the logical content alone: however it is
// fed (chunk sizes, zeros skipped or written) and however a file holding
// it is laid out (holes or written zeros), the ID is the same.
func TestSparseIDIsAFunctionOfContent(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(rt *rapid.T) {
		segs, content := drawSegments(rt)
		want := SparseSum(content)

		h := newSparseHasher()
		for _, s := range segs {
			if s.hole {
				h.zeros(int64(s.n))
				continue
			}
			b := bytes.Repeat([]byte{s.data}, s.n)
			for len(b) > 0 {
				k := rapid.IntRange(1, len(b)).Draw(rt, "chunk")
				h.Write(b[:k])
				b = b[k:]
			}
		}
		if got := h.Sum(); got != want {
			rt.Fatalf("fed in pieces: %s, want %s", got.Short(), want.Short())
		}

		// A file with holes where the segments say, and a dense one.
		for _, holes := range []bool{true, false} {
			p := filepath.Join(dir, "f")
			f, err := os.Create(p)
			if err != nil {
				rt.Fatal(err)
			}
			off := int64(0)
			for _, s := range segs {
				if !(holes && s.hole) && s.n > 0 {
					if _, err := f.WriteAt(bytes.Repeat([]byte{s.data}, s.n), off); err != nil {
						rt.Fatal(err)
					}
				}
				off += int64(s.n)
			}
			if err := f.Truncate(off); err != nil {
				rt.Fatal(err)
			}
			got, n, err := hashObject(f, off, true)
			f.Close()
			if err != nil || got != want || n != int64(len(content)) {
				rt.Fatalf("file (holes %v): %s, %d, %v; want %s, %d", holes, got.Short(), n, err, want.Short(), len(content))
			}
		}
	})
}

// Content that differs only in where its data is, or in its length of
// trailing zeros, has different IDs; the sparse and dense IDs of one
// content differ (domain separation).
func TestSparseIDDistinguishes(t *testing.T) {
	a := make([]byte, 3*sparseBlock)
	b := make([]byte, 3*sparseBlock)
	a[0], b[sparseBlock] = 1, 1
	ids := map[ID]string{}
	for name, c := range map[string][]byte{"a": a, "b": b, "a+zeros": append(bytes.Clone(a), 0), "empty": nil, "zeros": make([]byte, sparseBlock)} {
		id := SparseSum(c)
		if other, dup := ids[id]; dup {
			t.Fatalf("%s and %s share sparse ID %s", name, other, id.Short())
		}
		ids[id] = name
		if Sum(c) == id {
			t.Fatalf("%s: sparse and dense IDs are equal", name)
		}
	}
}

// FuzzSparseID: feeding content with its zero runs skipped (zeros) gives
// the ID of feeding every byte, whatever the cut points.
func FuzzSparseID(f *testing.F) {
	f.Add([]byte("data"), uint16(5000), uint16(3))
	f.Add(make([]byte, 9000), uint16(4096), uint16(1))
	f.Fuzz(func(t *testing.T, seed []byte, gap uint16, cut uint16) {
		// content: seed, gap zeros, seed again.
		content := append(append(bytes.Clone(seed), make([]byte, gap)...), seed...)
		want := SparseSum(content)
		h := newSparseHasher()
		step := int(cut%512) + 1
		for b := seed; len(b) > 0; b = b[min(step, len(b)):] {
			h.Write(b[:min(step, len(b))])
		}
		h.zeros(int64(gap))
		h.Write(seed)
		if got := h.Sum(); got != want {
			t.Fatalf("skipping %d zeros: %s, want %s", gap, got.Short(), want.Short())
		}
	})
}
