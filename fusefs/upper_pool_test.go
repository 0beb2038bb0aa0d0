package fusefs

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// existing returns which of nums name a file in dir.
func existing(t *testing.T, dir string, nums []uint64) []uint64 {
	t.Helper()
	var out []uint64
	for _, n := range nums {
		if _, err := os.Stat(filepath.Join(dir, strconv.FormatUint(n, 10))); err == nil {
			out = append(out, n)
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return out
}

// openFilesIn lists this process's descriptors open on files in dir.
func openFilesIn(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && filepath.Dir(target) == dir {
			open = append(open, target)
		}
	}
	return open
}

// TestUpperPoolTakeAndClose: the pool's files are named by reserved
// numbers, taken oldest first without renaming; close deletes what is
// left.
func TestUpperPoolTakeAndClose(t *testing.T) {
	dir := t.TempDir()
	next := uint64(100)
	p := newUpperPool(dir, func() uint64 { next++; return next })
	for p.fill() {
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != poolSize || len(p.nums) != poolSize {
		t.Fatalf("%d files, %d numbers, want %d", len(ents), len(p.nums), poolSize)
	}
	if open := openFilesIn(t, dir); len(open) != 0 {
		t.Fatalf("a full pool holds descriptors: %v", open)
	}
	num, f := p.take()
	if f == nil || num != 101 {
		t.Fatalf("take from a full pool gave %d, %v; want 101 and a file", num, f)
	}
	if _, err := f.WriteString("data"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, err := os.ReadFile(filepath.Join(dir, "101")); err != nil || string(b) != "data" {
		t.Fatalf("taken file: %q %v", b, err)
	}
	left := slices.Clone(p.nums)
	p.start()
	p.close()
	p.close() // idempotent
	if got := existing(t, dir, left); len(got) != 0 {
		t.Fatalf("pool files left after close: %v", got)
	}
	if got := existing(t, dir, []uint64{101}); len(got) != 1 {
		t.Fatal("close deleted the taken file")
	}
	if _, f := p.take(); f != nil {
		t.Fatal("take after close gave a file")
	}
	var nilPool *upperPool
	if _, f := nilPool.take(); f != nil {
		t.Fatal("nil pool gave a file")
	}
	nilPool.close()
}

// TestCreateFromPool: files created from the pool have the create's times,
// and an unmounted state directory holds no pool files.
func TestCreateFromPool(t *testing.T) {
	objs := newFakeObjects(t)
	state := t.TempDir()
	m, mnt := mountT(t, objs, objs.build(t, spec{"a": "1"}), &mountOpts{stateDir: state, passthrough: true})
	p := m.ov.pool
	for p.fill() {
	}
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	p.mu.Lock()
	fromPool := slices.Clone(p.nums[:10])
	for _, num := range p.nums {
		if err := os.Chtimes(p.path(num), old, old); err != nil {
			p.mu.Unlock()
			t.Fatal(err)
		}
	}
	p.mu.Unlock()
	for i := range 10 {
		name := filepath.Join(mnt, "f"+string(rune('a'+i)))
		f, err := os.Create(name) // no write: that would set the mtime itself
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.ModTime().Year() < 2020 {
			t.Fatalf("%s has the pool file's mtime %v", name, st.ModTime())
		}
		mustWrite(t, name, "x")
		if got := mustRead(t, name); got != "x" {
			t.Fatalf("%s: %q", name, got)
		}
	}
	// The creates took the pool's oldest files, in place.
	upper := filepath.Join(state, "upper")
	for i, num := range fromPool {
		if b, err := os.ReadFile(filepath.Join(upper, strconv.FormatUint(num, 10))); err != nil || string(b) != "x" {
			t.Fatalf("create %d: pool file %d holds %q, %v", i, num, b, err)
		}
	}
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	m.Wait()
	ents, err := os.ReadDir(upper)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(fromPool) {
		t.Fatalf("%d upper files after unmount, want the %d created (pool files left?)", len(ents), len(fromPool))
	}
}
