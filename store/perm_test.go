package store_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// oldTree is a tree as every binary before modes were kept wrote it (a
// file, an executable, a directory, a symlink and a FIFO), with its ID
// then: both must stay what they were.
func oldTree(t *testing.T) ([]byte, string) {
	t.Helper()
	var enc []byte
	enc = append(enc, 1)
	add := func(name string, kind byte, size, mtime byte, id store.ID) {
		enc = append(enc, byte(len(name)))
		enc = append(enc, name...)
		enc = append(enc, kind, size, mtime)
		enc = append(enc, id[:]...)
	}
	blob := store.BlobID([]byte("abc"))
	add("a", 1, 3, 2, blob)
	add("b", 2, 3, 4, blob)
	add("d", 4, 0, 0, store.EmptyTreeID())
	add("l", 3, 3, 6, blob)
	add("p", 5, 0, 8, store.ID{})
	return enc, "44da643e00ff42568ff1b969824c73946bce433da8867df2e58081870e5c3a4c"
}

func TestOldTreeDecodesWithDefaultModesAndKeepsItsID(t *testing.T) {
	enc, id := oldTree(t)
	if got := store.TreeID(enc).String(); got != id {
		t.Fatalf("old tree id %s, want %s", got, id)
	}
	tr, err := store.DecodeTree(enc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{"a": 0o644, "b": 0o755, "d": 0o755, "l": 0o777, "p": 0o644}
	for _, e := range tr.Entries {
		if e.Perm() != want[e.Name] || e.HasPerm() {
			t.Errorf("%s: perm %04o (recorded %v), want the default %04o", e.Name, e.Perm(), e.HasPerm(), want[e.Name])
		}
	}
	re, err := tr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(re, enc) || store.TreeID(re) != store.TreeID(enc) {
		t.Fatalf("an old tree re-encodes differently:\n in %x\nout %x", enc, re)
	}
}

func TestTreeModesRoundTrip(t *testing.T) {
	blob := store.BlobID([]byte("abc"))
	cases := []struct {
		kind store.Kind
		perm uint32
		want store.Kind // the kind after SetPerm
	}{
		{store.KindFile, 0o600, store.KindFile},
		{store.KindFile, 0o000, store.KindFile},
		{store.KindFile, 0o4755, store.KindExec},
		{store.KindExec, 0o2750, store.KindExec},
		{store.KindExec, 0o640, store.KindFile},
		{store.KindDir, 0o700, store.KindDir},
		{store.KindDir, 0o1777, store.KindDir},
		{store.KindFIFO, 0o600, store.KindFIFO},
	}
	for _, c := range cases {
		e := store.Entry{Name: "x", Kind: c.kind, Size: 3, ID: blob}
		if c.kind == store.KindDir {
			e.Size, e.ID = 0, store.EmptyTreeID()
		}
		if c.kind.IsSpecial() {
			e.Size, e.ID = 0, store.ID{}
		}
		e.SetPerm(c.perm)
		if e.Kind != c.want || e.Perm() != c.perm {
			t.Fatalf("SetPerm(%04o) on a %s: %s %04o", c.perm, c.kind, e.Kind, e.Perm())
		}
		tr := &store.Tree{Entries: []store.Entry{e, {Name: "y", Kind: store.KindFile, Size: 3, ID: blob}}}
		enc, err := tr.Encode()
		if err != nil {
			t.Fatalf("%s %04o: %v", c.kind, c.perm, err)
		}
		if enc[0] != 2 {
			t.Fatalf("%s %04o: a tree with a mode encodes as version %d", c.kind, c.perm, enc[0])
		}
		back, err := store.DecodeTree(enc)
		if err != nil {
			t.Fatalf("%s %04o: %v", c.kind, c.perm, err)
		}
		if back.Entries[0] != e || back.Entries[1].Perm() != 0o644 || back.Entries[1].HasPerm() {
			t.Fatalf("%s %04o: decoded %+v (perm %04o)", c.kind, c.perm, back.Entries[0], back.Entries[0].Perm())
		}
	}
	// The default mode set explicitly is no mode: version 1, the old ID.
	e := store.Entry{Name: "x", Kind: store.KindExec, Size: 3, ID: blob}
	plain, _ := (&store.Tree{Entries: []store.Entry{e}}).Encode()
	e.SetPerm(0o755)
	same, _ := (&store.Tree{Entries: []store.Entry{e}}).Encode()
	if !bytes.Equal(plain, same) || plain[0] != 1 {
		t.Fatalf("default mode changed the encoding: %x vs %x", plain, same)
	}
	// A symlink has no mode; a device keeps 0600.
	l := store.Entry{Name: "l", Kind: store.KindSymlink, Size: 3, ID: blob}
	l.SetPerm(0o600)
	if l.Perm() != 0o777 || l.HasPerm() {
		t.Fatalf("symlink perm %04o", l.Perm())
	}
	d := store.SpecialEntry("null", store.KindCharDev, 1<<8|3, 0).WithPerm(0o666)
	if d.Perm() != 0o600 || d.HasPerm() {
		t.Fatalf("device perm %04o", d.Perm())
	}
}

func TestTreeModesNonCanonical(t *testing.T) {
	blob := store.BlobID([]byte("abc"))
	entry := func(kind, perm byte) []byte {
		b := []byte{2, 1, 'x', kind}
		b = append(b, perm, 1) // mode (one byte when < 0200), size 1
		b = append(b, 0)       // mtime 0
		return append(b, blob[:]...)
	}
	bad := map[string][]byte{
		"version 2 with only defaults": entry(1, 0o644&0x7f|0x80)[:0], // replaced below
		"exec kind without exec bit":   entry(2, 0o60),
		"file kind with exec bit":      entry(1, 0o100),
		"symlink with a mode":          entry(3, 0o7),
	}
	b := []byte{2, 1, 'x', 7, 0o66, 0, 0} // a character device 0066
	bad["device with a mode"] = append(b, make([]byte, 32)...)
	// 0644 needs two uvarint bytes.
	b = []byte{2, 1, 'x', 1, 0xa4, 0x03, 1, 0}
	bad["version 2 with only defaults"] = append(b, blob[:]...)
	b = []byte{2, 1, 'x', 1, 0x80, 0x40, 1, 0} // 0o10000: beyond 07777
	bad["mode beyond 07777"] = append(b, blob[:]...)
	b = []byte{2, 1, 'x', 1, 0x80 | 0o60, 0, 1, 0} // non-minimal varint
	bad["non-minimal mode"] = append(b, blob[:]...)
	for name, enc := range bad {
		if _, err := store.DecodeTree(enc); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: DecodeTree(%x) = %v, want ErrCorrupt", name, enc, err)
		}
	}
	if _, err := store.DecodeTree(entry(1, 0o60)); err != nil {
		t.Fatalf("a 0060 file: %v", err)
	}
}

func TestConflictSideKeepsMode(t *testing.T) {
	blob := store.BlobID([]byte("abc"))
	e := store.Entry{Name: "f", Kind: store.KindFile, Size: 3, ID: blob}
	e.SetPerm(0o600)
	old := store.Entry{Name: "f", Kind: store.KindFile, Size: 3, ID: blob}
	g := &store.Generation{Root: store.EmptyTreeID(), Workspace: "w", Kind: store.GenRebase, Time: 1,
		Conflicts: []store.Conflict{{Path: "f", Kind: "mode", Base: store.SideOf(&old), Ours: store.SideOf(&e)}}}
	enc, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(enc, []byte(`"mode":384`)) || bytes.Count(enc, []byte(`"mode":`)) != 1 {
		t.Fatalf("encoding %s", enc)
	}
	back, err := store.DecodeGeneration(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Conflicts[0].Ours.Entry("f"); *got != e {
		t.Fatalf("side entry %+v, want %+v", *got, e)
	}
	if got := back.Conflicts[0].Base.Entry("f"); *got != old {
		t.Fatalf("base side entry %+v", *got)
	}
}
