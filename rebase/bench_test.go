package rebase

import (
	"fmt"
	"testing"

	"github.com/acyclicfs/acyclicfs/rebase/rebasetest"
	"github.com/acyclicfs/acyclicfs/store"
)

// benchSizes are trees of 1,000 and 100,000 files. The first two have the
// same directory size, so their costs should match: the merge reads only
// the changed directories. The third has 1,000-file directories, which
// costs more per changed directory (each is decoded and re-encoded whole)
// but still nothing for the 99 untouched ones.
var benchSizes = []struct{ dirs, files int }{{20, 50}, {2000, 50}, {100, 1000}}

// benchTrees builds a base of dirs x files and two sides that each change 10
// files in 10 directories; 5 directories (and 5 files, merged by lines)
// are changed by both sides.
func benchTrees(b *testing.B, dirs, files int) (*rebasetest.Mem, store.ID, store.ID, store.ID) {
	b.Helper()
	mem := rebasetest.NewMem()
	base, _ := bigTree(mem, dirs, files)
	ours := editTree(b, mem, base, 0, 10, func(s string) string { return "OURS\n" + s[7:] })
	theirs := editTree(b, mem, base, 5, 10, func(s string) string { return s[:len(s)-7] + "THEIRS\n" })
	return mem, base, ours, theirs
}

func BenchmarkMerge3(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("files=%dx%d", size.dirs, size.files), func(b *testing.B) {
			mem, base, ours, theirs := benchTrees(b, size.dirs, size.files)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := Merge3(mem, mem, base, ours, theirs, Options{})
				if err != nil || res.Conflicts != nil {
					b.Fatal(err, res.Conflicts)
				}
			}
		})
	}
}

func BenchmarkDiff(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("files=%dx%d", size.dirs, size.files), func(b *testing.B) {
			mem, base, ours, _ := benchTrees(b, size.dirs, size.files)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				ch, err := Diff(mem, base, ours)
				if err != nil || len(ch) != 10 {
					b.Fatal(err, len(ch))
				}
			}
		})
	}
}

func BenchmarkMergeText(b *testing.B) {
	var base []byte
	for i := 0; i < 10000; i++ {
		base = fmt.Appendf(base, "line %d\n", i)
	}
	ours := append([]byte("OURS\n"), base...)
	theirs := append(append([]byte(nil), base...), "THEIRS\n"...)
	b.SetBytes(int64(len(base)))
	for b.Loop() {
		if _, clean := MergeText(base, ours, theirs); !clean {
			b.Fatal("conflict")
		}
	}
}
