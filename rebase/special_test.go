package rebase

import (
	"reflect"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

func dev(rdev uint64) F { return F{Kind: store.KindCharDev, Rdev: rdev} }

// Special files merge like other entries: equal when kind and device
// number are equal, a conflict when both sides made them differ.
func TestMerge3SpecialFiles(t *testing.T) {
	fifo := F{Kind: store.KindFIFO}
	sock := F{Kind: store.KindSocket}
	base := Fs{"p": fifo, "null": dev(1<<8 | 3), "f": file("x")}
	for _, c := range []struct {
		name          string
		ours, theirs  func(Fs)
		want          func(Fs) // nil: a conflict
		conflictPaths string
	}{
		{"theirs adds a socket", func(Fs) {}, func(f Fs) { f["run/s"] = sock }, func(f Fs) { f["run/s"] = sock }, ""},
		{"ours renumbers a device", func(f Fs) { f["null"] = dev(1<<8 | 5) }, func(f Fs) { f["f"] = file("y") },
			func(f Fs) { f["null"] = dev(1<<8 | 5); f["f"] = file("y") }, ""},
		{"both renumber alike", func(f Fs) { f["null"] = dev(7) }, func(f Fs) { f["null"] = dev(7) }, func(f Fs) { f["null"] = dev(7) }, ""},
		{"both renumber differently", func(f Fs) { f["null"] = dev(7) }, func(f Fs) { f["null"] = dev(8) }, nil, "null:content"},
		{"both add different devices", func(f Fs) { f["d"] = dev(7) }, func(f Fs) { f["d"] = dev(8) }, nil, "d:add/add"},
		{"fifo replaced by a file vs deleted", func(f Fs) { f["p"] = file("now a file") }, func(f Fs) { delete(f, "p") }, nil, "p:modify/delete"},
		{"fifo vs socket", func(f Fs) { f["p"] = sock }, func(f Fs) { f["p"] = dev(3) }, nil, "p:type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ours, theirs := clone2(base), clone2(base)
			c.ours(ours)
			c.theirs(theirs)
			res, got := newCase(t, base, ours, theirs).merge(t, Options{})
			if cp := conflictPaths(res.Conflicts); cp != c.conflictPaths {
				t.Fatalf("conflicts %q, want %q", cp, c.conflictPaths)
			}
			if c.want == nil {
				return
			}
			want := clone2(base)
			c.want(want)
			if !reflect.DeepEqual(content(got), content(want)) {
				t.Fatalf("got  %v\nwant %v", got, want)
			}
		})
	}
}
