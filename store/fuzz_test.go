package store_test

import (
	"bytes"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

func treeSeeds() [][]byte {
	var seeds [][]byte
	for _, tr := range []*store.Tree{
		{},
		{Entries: []store.Entry{{Name: "a", Kind: store.KindFile, Size: 3, Mtime: 17, ID: store.BlobID([]byte("abc"))}}},
		{Entries: []store.Entry{
			{Name: "bin", Kind: store.KindDir, ID: store.EmptyTreeID()},
			{Name: "link", Kind: store.KindSymlink, Size: 3, Mtime: -1, ID: store.BlobID([]byte("bin"))},
			{Name: "run\n.sh", Kind: store.KindExec, Size: 1 << 40, Mtime: 1 << 62},
		}},
		{Entries: []store.Entry{
			store.SpecialEntry("blk", store.KindBlockDev, 8<<8|1, 5),
			store.SpecialEntry("null", store.KindCharDev, 1<<8|3, 4),
			store.SpecialEntry("pipe", store.KindFIFO, 0, 3),
			store.SpecialEntry("sock", store.KindSocket, 0, -2),
		}},
		// Version 2: modes other than the defaults.
		{Entries: []store.Entry{
			store.Entry{Name: ".env", Kind: store.KindFile, Size: 3, Mtime: 9, ID: store.BlobID([]byte("abc"))}.WithPerm(0o600),
			store.Entry{Name: "priv", Kind: store.KindDir, ID: store.EmptyTreeID()}.WithPerm(0o700),
			{Name: "run", Kind: store.KindExec, Size: 1, ID: store.BlobID([]byte("x"))},
			store.Entry{Name: "suid", Kind: store.KindFile, Size: 1, ID: store.BlobID([]byte("x"))}.WithPerm(0o4755),
			store.SpecialEntry("tmp", store.KindFIFO, 0, 1).WithPerm(0o1777),
			store.Entry{Name: "zero", Kind: store.KindFile, ID: store.BlobID(nil)}.WithPerm(0),
		}},
	} {
		enc, err := tr.Encode()
		if err != nil {
			panic(err)
		}
		seeds = append(seeds, enc)
	}
	return seeds
}

func FuzzDecodeTree(f *testing.F) {
	for _, s := range treeSeeds() {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := store.DecodeTree(b)
		if err != nil {
			return
		}
		enc, err := tr.Encode()
		if err != nil {
			t.Fatalf("decoded tree does not encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("round trip changed the encoding:\n in %x\nout %x", b, enc)
		}
		if store.TreeID(enc) != store.TreeID(b) {
			t.Fatal("round trip changed the id")
		}
	})
}

func FuzzDecodeGeneration(f *testing.F) {
	for _, g := range []*store.Generation{
		{Root: store.EmptyTreeID(), Workspace: "main", Kind: store.GenCreate, Time: 1},
		{Root: store.EmptyTreeID(), Parents: []store.ID{store.BlobID(nil), store.EmptyTreeID()}, Workspace: "c.1", Kind: store.GenLand, Operation: "op-1", Time: -5},
		{Root: store.EmptyTreeID(), Workspace: "w", Kind: store.GenCapture, Time: 3, Links: [][]string{{"a", "d/b"}, {"x", "y"}}},
	} {
		enc, err := g.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Add([]byte(`{"root":"","kind":"commit"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := store.DecodeGeneration(b)
		if err != nil {
			return
		}
		enc, err := g.Encode()
		if err != nil {
			t.Fatalf("decoded generation does not encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("round trip changed the encoding:\n in %q\nout %q", b, enc)
		}
	})
}
