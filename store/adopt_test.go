package store

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func statT(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// TestAdoptBlobFile: an adopted file becomes the blob itself (the same
// inode, 0o400, durable at Commit, checking clean); adopting content
// the store has already leaves the file alone.
func TestAdoptBlobFile(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "store"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	content := bytes.Repeat([]byte("adopt me "), 100000)
	src := filepath.Join(dir, "store", "src") // the store's file system
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}
	b := s.NewBlobBatch()
	id, n, adopted, err := b.AdoptBlobFile(src)
	if err != nil || !adopted || n != int64(len(content)) || id != BlobID(content) {
		t.Fatalf("adopt: %s %d %v %v", id.Short(), n, adopted, err)
	}
	if ok, _ := s.HasBlob(id); ok {
		t.Fatal("adopted blob visible before Commit")
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	bst, sst := statT(t, s.BlobPath(id)), statT(t, src)
	if bst.Ino != sst.Ino || bst.Mode&0o777 != 0o400 {
		t.Fatalf("blob inode %d mode %o, source inode %d", bst.Ino, bst.Mode&0o777, sst.Ino)
	}
	if problems, err := s.Check(); err != nil || len(problems) != 0 {
		t.Fatal(problems, err)
	}

	again := filepath.Join(dir, "store", "again")
	if err := os.WriteFile(again, content, 0o600); err != nil {
		t.Fatal(err)
	}
	b2 := s.NewBlobBatch()
	id2, _, adopted, err := b2.AdoptBlobFile(again)
	if err != nil || adopted || id2 != id {
		t.Fatalf("adopt of stored content: %s %v %v", id2.Short(), adopted, err)
	}
	if st := statT(t, again); st.Nlink != 1 || st.Mode&0o777 != 0o600 {
		t.Fatalf("file of stored content left with %d links, mode %o", st.Nlink, st.Mode&0o777)
	}
}

// TestGCKeepsBlobAdoptedDuringSweep: GC spares objects that appear while
// it sweeps; an adopted blob keeps the old mtime its tool gave it, so the
// grace goes by the time it became an object (ctime), not its mtime.
func TestGCKeepsBlobAdoptedDuringSweep(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "store"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	content := []byte("written by a tool long ago")
	src := filepath.Join(dir, "store", "src")
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(src, old, old); err != nil {
		t.Fatal(err)
	}
	id := BlobID(content)
	obj := s.BlobPath(id)
	prev := SetFailpoint(func(name string) error {
		if name == "gc.before-sweep" {
			// File times are clock-tick coarse: wait for the tick after
			// now (after GC's start), so the link's ctime is later.
			now := time.Now()
			probe := filepath.Join(dir, "probe")
			for i := 0; ; i++ {
				if err := os.WriteFile(probe, nil, 0o600); err != nil {
					t.Error(err)
					break
				}
				var st syscall.Stat_t
				if err := syscall.Stat(probe, &st); err != nil || st.Ctim.Nano() > now.UnixNano() {
					break
				}
				if i > 1e6 {
					t.Error("the file system's clock does not advance")
					break
				}
			}
			// A capture adopts the file while GC is marking (as
			// AdoptBlobFile and Commit leave it: linked, 0o400).
			if err := os.MkdirAll(filepath.Dir(obj), privateDirMode); err != nil {
				t.Error(err)
			}
			if err := os.Link(src, obj); err != nil {
				t.Error(err)
			}
			if err := os.Chmod(obj, 0o400); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	defer func() { SetFailpoint(prev) }()
	if _, err := s.GC(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(obj); err != nil {
		t.Fatalf("GC swept a blob adopted during its sweep: %v", err)
	}
}
