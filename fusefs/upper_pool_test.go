package fusefs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func poolFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pool-") {
			names = append(names, e.Name())
		}
	}
	return names
}

// openPoolFiles lists this process's descriptors open on pool files.
func openPoolFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(filepath.Base(target), "pool-") {
			open = append(open, target)
		}
	}
	return open
}

// TestUpperPoolTakeAndClose: take renames a pool file into place, close
// deletes what is left.
func TestUpperPoolTakeAndClose(t *testing.T) {
	dir := t.TempDir()
	p := &upperPool{dir: dir, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for p.fill() {
	}
	if n := len(poolFiles(t, dir)); n != poolSize {
		t.Fatalf("%d pool files, want %d", n, poolSize)
	}
	if open := openPoolFiles(t); len(open) != 0 {
		t.Fatalf("a full pool holds descriptors: %v", open)
	}
	f := p.take(filepath.Join(dir, "7"))
	if f == nil {
		t.Fatal("take from a full pool gave nothing")
	}
	if _, err := f.WriteString("data"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, err := os.ReadFile(filepath.Join(dir, "7")); err != nil || string(b) != "data" {
		t.Fatalf("taken file: %q %v", b, err)
	}
	go p.run()
	p.close()
	p.close() // idempotent
	if left := poolFiles(t, dir); len(left) != 0 {
		t.Fatalf("pool files left after close: %v", left)
	}
	if f := p.take(filepath.Join(dir, "8")); f != nil {
		t.Fatal("take after close gave a file")
	}
	var nilPool *upperPool
	if nilPool.take(filepath.Join(dir, "9")) != nil {
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
	for _, name := range p.names {
		if err := os.Chtimes(name, old, old); err != nil {
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
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	m.Wait()
	if left := poolFiles(t, filepath.Join(state, "upper")); len(left) != 0 {
		t.Fatalf("pool files left after unmount: %v", left)
	}
}
