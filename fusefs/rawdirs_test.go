package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

func listNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names
}

// TestListingsWithoutOpendir: the kernel stops sending OPENDIR, caches
// listings, and a listing of many chunks is still complete and in order,
// after changes through the mount too, with concurrent readers.
func TestListingsWithoutOpendir(t *testing.T) {
	objs := newFakeObjects(t)
	s := spec{"d/x": "1"}
	var want []string
	for i := range 3000 {
		n := fmt.Sprintf("file-with-a-longish-name-%05d", i)
		s["big/"+n] = "x"
		want = append(want, n)
	}
	m, mnt := mountT(t, objs, objs.build(t, s), nil)
	big := filepath.Join(mnt, "big")
	if got := listNames(t, big); !slices.Equal(got, want) {
		t.Fatalf("first listing: %d names, want %d", len(got), len(want))
	}
	opened := m.dirs.opened.Load()
	if got := listNames(t, big); !slices.Equal(got, want) {
		t.Fatalf("second listing: %d names, want %d", len(got), len(want))
	}
	if d := m.dirs.opened.Load() - opened; d != 0 {
		t.Fatalf("a warm listing opened %d listings in the daemon", d)
	}
	if k := m.dirs.kept(); k != 0 {
		t.Fatalf("%d listings kept after complete passes", k)
	}

	// A change through the mount drops the kernel's cached listing.
	mustWrite(t, filepath.Join(big, "a-new"), "n")
	want2 := append([]string{"a-new"}, want...)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ents, err := os.ReadDir(big)
			if err != nil {
				errs <- err
				return
			}
			if len(ents) != len(want2) {
				errs <- fmt.Errorf("concurrent listing: %d names, want %d", len(ents), len(want2))
				return
			}
			for i, e := range ents {
				if e.Name() != want2[i] {
					errs <- fmt.Errorf("concurrent listing: name %d is %q, want %q", i, e.Name(), want2[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(big, "a-new")); err != nil {
		t.Fatal(err)
	}
	if got := listNames(t, big); !slices.Equal(got, want) {
		t.Fatalf("listing after remove: %d names, want %d", len(got), len(want))
	}

	// Readers that stop half-way leave at most maxDirCursors listings.
	for i := range maxDirCursors + 8 {
		mustWrite(t, filepath.Join(big, fmt.Sprintf("p%02d", i)), "p") // drops the cache
		f, err := os.Open(big)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.ReadDir(10); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if k := m.dirs.kept(); k > maxDirCursors {
			t.Fatalf("%d listings kept", k)
		}
	}
	if got := len(listNames(t, big)); got != len(want)+maxDirCursors+8 {
		t.Fatalf("listing after partial readers: %d names, want %d", got, len(want)+maxDirCursors+8)
	}
	// Fsync of a directory has no handle now; it still works.
	f, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync of a directory: %v", err)
	}
}

// TestListingsModel: random creates, removes, partial and complete
// listings of one directory; every complete listing equals the model.
func TestListingsModel(t *testing.T) {
	objs := newFakeObjects(t)
	s := spec{}
	for i := range 200 {
		s[fmt.Sprintf("seed/n%03d", i)] = "s"
	}
	root := objs.build(t, s)
	_, mnt := mountT(t, objs, root, nil)
	iter := 0
	rapid.Check(t, func(rt *rapid.T) {
		iter++
		// Each case works in a new directory of its own.
		dir := filepath.Join(mnt, fmt.Sprintf("case%d", iter))
		if err := os.Mkdir(dir, 0o755); err != nil {
			rt.Fatal(err)
		}
		model := map[string]bool{}
		for i := range rapid.IntRange(0, 300).Draw(rt, "initial") {
			n := fmt.Sprintf("i%03d", i)
			if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
				rt.Fatal(err)
			}
			model[n] = true
		}
		names := rapid.SampledFrom([]string{"a", "b", "i005", "i100", "z", "zz"})
		for range rapid.IntRange(1, 30).Draw(rt, "ops") {
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				n := names.Draw(rt, "create")
				if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
					rt.Fatal(err)
				}
				model[n] = true
			case 1:
				n := names.Draw(rt, "remove")
				err := os.Remove(filepath.Join(dir, n))
				if (err == nil) != model[n] {
					rt.Fatalf("remove %s: %v (exists in model: %v)", n, err, model[n])
				}
				delete(model, n)
			case 2:
				f, err := os.Open(dir)
				if err != nil {
					rt.Fatal(err)
				}
				_, err = f.ReadDir(rapid.IntRange(1, 100).Draw(rt, "partial"))
				f.Close()
				if err != nil && len(model) > 0 {
					rt.Fatal(err)
				}
			case 3:
				want := make([]string, 0, len(model))
				for n := range model {
					want = append(want, n)
				}
				sort.Strings(want)
				if got := listNames(t, dir); !slices.Equal(got, want) {
					rt.Fatalf("listing %v, want %v", got, want)
				}
			}
		}
		if got := len(listNames(t, filepath.Join(mnt, "seed"))); got != 200 {
			rt.Fatalf("lower directory lists %d names, want 200", got)
		}
	})
}
