package rebasetest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

func TestBuildFlattenRoundTrip(t *testing.T) {
	m := NewMem()
	fs := Files{
		"a":       {Kind: store.KindFile, Data: "a", Mtime: 5},
		"d/x":     {Kind: store.KindExec, Data: "#!/bin/sh\n"},
		"d/e/l":   {Kind: store.KindSymlink, Data: "../x"},
		"empty":   {Kind: store.KindDir},
		"d/empty": {Kind: store.KindDir},
	}
	id, err := m.Build(fs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Flatten(id)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, fs) {
		t.Fatalf("got %v", got)
	}
	if again := m.MustBuild(fs); again != id {
		t.Fatal("Build is not deterministic")
	}
	if want := []string{"a", "d/e/l", "d/empty", "d/x", "empty"}; !reflect.DeepEqual(fs.Paths(), want) {
		t.Fatal(fs.Paths())
	}
	if got, err := m.Flatten(store.ID{}); err != nil || len(got) != 0 {
		t.Fatal(got, err)
	}
}

func TestBuildRejectsBadPaths(t *testing.T) {
	m := NewMem()
	for _, fs := range []Files{
		{"a": {Kind: store.KindFile}, "a/b": {Kind: store.KindFile}},
		{"a//b": {Kind: store.KindFile}},
		{"": {Kind: store.KindFile}},
	} {
		if _, err := m.Build(fs); err == nil {
			t.Errorf("Build(%v) succeeded", fs)
		}
	}
}

func TestMemNotFoundAndStats(t *testing.T) {
	m := NewMem()
	if _, err := m.GetTree(store.ID{1}); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := m.ReadBlob(store.ID{1}); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	id, _ := m.WriteBlobBytes([]byte("x"))
	if id != store.BlobID([]byte("x")) {
		t.Fatal("wrong blob id")
	}
	tr, br, w := m.Stats()
	if tr != 1 || br != 1 || w != 1 {
		t.Fatal(tr, br, w)
	}
	m.ResetStats()
	if tr, br, w := m.Stats(); tr+br+w != 0 {
		t.Fatal("not reset")
	}
}
