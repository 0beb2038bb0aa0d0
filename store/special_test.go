package store_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// Special entries encode canonically, reject content, sizes and device
// numbers that are not theirs, and leave trees without them unchanged.
func TestSpecialEntriesEncoding(t *testing.T) {
	tr := &store.Tree{Entries: []store.Entry{
		store.SpecialEntry("b", store.KindBlockDev, 8<<8|1, 1),
		store.SpecialEntry("c", store.KindCharDev, 1<<8|3, 2),
		store.SpecialEntry("p", store.KindFIFO, 77, 3), // rdev ignored for a FIFO
		store.SpecialEntry("s", store.KindSocket, 0, 4),
	}}
	enc, err := tr.Encode()
	mustOK(t, err)
	back, err := store.DecodeTree(enc)
	mustOK(t, err)
	for i, e := range back.Entries {
		if e != tr.Entries[i] {
			t.Fatalf("entry %d: %+v, want %+v", i, e, tr.Entries[i])
		}
	}
	if r := back.Entries[1].Rdev(); r != 1<<8|3 {
		t.Fatalf("chardev rdev %#x", r)
	}
	if back.Entries[2].Size != 0 || back.Entries[2].Rdev() != 0 {
		t.Fatalf("fifo %+v", back.Entries[2])
	}
	blob := store.BlobID([]byte("x"))
	for _, bad := range []store.Entry{
		{Name: "p", Kind: store.KindFIFO, ID: blob},
		{Name: "p", Kind: store.KindFIFO, Size: 1},
		{Name: "s", Kind: store.KindSocket, Size: 3},
		{Name: "c", Kind: store.KindCharDev, Size: store.MaxRdev + 1},
		{Name: "k", Kind: store.KindBlockDev + 1},
	} {
		if _, err := (&store.Tree{Entries: []store.Entry{bad}}).Encode(); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%+v encoded (err %v)", bad, err)
		}
	}
	// A tree of the old kinds encodes byte for byte as format 1 always did.
	old := &store.Tree{Entries: []store.Entry{{Name: "a", Kind: store.KindFile, Size: 3, Mtime: 17, ID: store.BlobID([]byte("abc"))}}}
	oldEnc, err := old.Encode()
	mustOK(t, err)
	want := append([]byte{1, 1, 'a', 1, 3, 34}, old.Entries[0].ID[:]...)
	if !bytes.Equal(oldEnc, want) {
		t.Fatalf("old tree encodes as %x, want %x", oldEnc, want)
	}
}

// A store whose trees and conflicts hold special entries checks clean and
// keeps them through GC: they name no blob.
func TestSpecialEntriesCheckAndGC(t *testing.T) {
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	fifo := store.SpecialEntry("p", store.KindFIFO, 0, 5)
	dev := store.SpecialEntry("null", store.KindCharDev, 1<<8|3, 6)
	sub, err := s.PutTree(&store.Tree{Entries: []store.Entry{dev}})
	mustOK(t, err)
	root, err := s.PutTree(&store.Tree{Entries: []store.Entry{{Name: "dev", Kind: store.KindDir, ID: sub}, fifo}})
	mustOK(t, err)
	g, err := s.PutGeneration(&store.Generation{Root: root, Workspace: "w", Kind: store.GenCreate, Time: 1,
		Conflicts: []store.Conflict{{Path: "p", Kind: "add/add", Ours: store.SideOf(&fifo), Theirs: store.SideOf(&dev)}}})
	mustOK(t, err)
	_, err = s.CreateWorkspace(store.Workspace{Name: "w"}, store.HeadEntry{Gen: g})
	mustOK(t, err)
	_, err = s.GC(nil)
	mustOK(t, err)
	checkClean(t, s)
	got, err := s.GetTree(sub)
	mustOK(t, err)
	if len(got.Entries) != 1 || got.Entries[0] != dev {
		t.Fatalf("after gc: %+v", got.Entries)
	}
}
