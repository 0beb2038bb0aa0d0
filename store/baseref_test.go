package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/internal/dirwatch"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
	"pgregory.net/rapid"
)

// baseDir makes DIR with a.txt, bin/run.sh (exec), sub/deep/f, link -> a.txt
// and a fifo.
func baseDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "DIR")
	mustOK(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	mustOK(t, os.MkdirAll(filepath.Join(dir, "sub", "deep"), 0o755))
	mustOK(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o644))
	mustOK(t, os.WriteFile(filepath.Join(dir, "bin", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	mustOK(t, os.WriteFile(filepath.Join(dir, "sub", "deep", "f"), []byte("deep"), 0o600))
	mustOK(t, os.Symlink("a.txt", filepath.Join(dir, "link")))
	mustOK(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	return dir
}

func entry(t *testing.T, tr *store.Tree, name string) store.Entry {
	t.Helper()
	e, ok := tr.Lookup(name)
	if !ok {
		t.Fatalf("no entry %q in %+v", name, tr.Entries)
	}
	return e
}

func checkClean(t *testing.T, s *store.Store) {
	t.Helper()
	ps, err := s.Check()
	mustOK(t, err)
	for _, p := range ps {
		t.Errorf("check: %s", p)
	}
}

// rewrite replaces path's content in place and moves its mtime, so the
// fingerprint certainly changes.
func rewrite(t *testing.T, path, content string) {
	t.Helper()
	mustOK(t, os.WriteFile(path, []byte(content), 0o644))
	later := time.Now().Add(time.Hour)
	mustOK(t, os.Chtimes(path, later, later))
}

func TestBaseRefLazyTreeAndReads(t *testing.T) {
	dir := baseDir(t)
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	if s.BaseReads() != 0 {
		t.Fatalf("CreateBase read %d files", s.BaseReads())
	}
	if p, err := s.BaseDirPath(base); err != nil || p != dir {
		t.Fatalf("BaseDirPath = %q, %v", p, err)
	}
	ref, ok, err := s.BaseRefOf(root)
	mustOK(t, err)
	if !ok || ref.Kind != store.KindDir || ref.Path != "" || ref.Base != base {
		t.Fatalf("root ref %+v %v", ref, ok)
	}

	tr, err := s.GetTree(root)
	mustOK(t, err)
	var names []string
	for _, e := range tr.Entries {
		names = append(names, e.Name)
	}
	if want := []string{"a.txt", "bin", "fifo", "link", "sub"}; !equalStrings(names, want) {
		t.Fatalf("root lists %v, want %v", names, want)
	}
	if f := entry(t, tr, "fifo"); f.Kind != store.KindFIFO || !f.ID.IsZero() || f.Size != 0 {
		t.Fatalf("fifo %+v: want a FIFO entry without content", f)
	}
	a := entry(t, tr, "a.txt")
	if a.Kind != store.KindFile || a.Size != 5 {
		t.Fatalf("a.txt %+v", a)
	}
	if l := entry(t, tr, "link"); l.Kind != store.KindSymlink || l.Size != 5 {
		t.Fatalf("link %+v", l)
	}
	if d := entry(t, tr, "sub"); d.Kind != store.KindDir || d.Size != 0 {
		t.Fatalf("sub %+v", d)
	}
	fi, err := os.Lstat(filepath.Join(dir, "a.txt"))
	mustOK(t, err)
	if a.Mtime != fi.ModTime().UnixNano() {
		t.Fatalf("a.txt mtime %d, want %d", a.Mtime, fi.ModTime().UnixNano())
	}
	bin, err := s.GetTree(entry(t, tr, "bin").ID)
	mustOK(t, err)
	if e := entry(t, bin, "run.sh"); e.Kind != store.KindExec || e.Size != 10 {
		t.Fatalf("run.sh %+v", e)
	}
	sub, err := s.GetTree(entry(t, tr, "sub").ID)
	mustOK(t, err)
	deep, err := s.GetTree(entry(t, sub, "deep").ID)
	mustOK(t, err)
	if s.BaseReads() != 0 {
		t.Fatalf("listing read %d files", s.BaseReads())
	}

	b, err := s.ReadBlob(a.ID)
	mustOK(t, err)
	if string(b) != "hello" || s.BaseReads() != 1 {
		t.Fatalf("ReadBlob = %q, reads %d", b, s.BaseReads())
	}
	b, err = s.ReadBlob(entry(t, tr, "link").ID)
	mustOK(t, err)
	if string(b) != "a.txt" || s.BaseReads() != 1 {
		t.Fatalf("ReadBlob(link) = %q, reads %d", b, s.BaseReads())
	}
	rc, err := s.OpenBlob(entry(t, deep, "f").ID)
	mustOK(t, err)
	b, err = io.ReadAll(rc)
	mustOK(t, err)
	mustOK(t, rc.Close())
	if string(b) != "deep" || s.BaseReads() != 2 {
		t.Fatalf("OpenBlob = %q, reads %d", b, s.BaseReads())
	}
	f, err := s.OpenBlobFile(a.ID)
	mustOK(t, err)
	b = make([]byte, 3)
	_, err = f.ReadAt(b, 1)
	mustOK(t, err)
	mustOK(t, f.Close())
	if string(b) != "ell" || s.BaseReads() != 3 {
		t.Fatalf("OpenBlobFile read %q, reads %d", b, s.BaseReads())
	}
	f, err = s.OpenBlobFile(entry(t, tr, "link").ID)
	mustOK(t, err)
	b, err = io.ReadAll(f)
	mustOK(t, err)
	f.Close()
	if string(b) != "a.txt" {
		t.Fatalf("OpenBlobFile(link) read %q", b)
	}
	n, err := s.BlobSize(a.ID)
	mustOK(t, err)
	has, err := s.HasBlob(a.ID)
	mustOK(t, err)
	mustOK(t, s.VerifyBlob(a.ID))
	if n != 5 || !has || s.BaseReads() != 3 {
		t.Fatalf("BlobSize %d HasBlob %v reads %d", n, has, s.BaseReads())
	}
	if has, err := s.HasBlob(entry(t, tr, "sub").ID); err != nil || has {
		t.Fatalf("HasBlob(dir ref) = %v, %v", has, err)
	}
	if _, err := s.ReadBlob(entry(t, tr, "sub").ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReadBlob(dir ref) = %v", err)
	}
	if _, err := s.GetTree(a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTree(file ref) = %v", err)
	}

	// The expansion is memoized: a new file does not change the listing
	// this process already handed out.
	mustOK(t, os.WriteFile(filepath.Join(dir, "new"), nil, 0o644))
	again, err := s.GetTree(root)
	mustOK(t, err)
	if len(again.Entries) != len(tr.Entries) {
		t.Fatalf("second expansion lists %d entries, want the memoized %d", len(again.Entries), len(tr.Entries))
	}
	// ...but a fresh ref of the changed directory lists it, and the
	// unmemoized expansion of a changed directory is refused.
	_, now, err := s.CurrentRef(base, "")
	mustOK(t, err)
	if now == root {
		t.Fatal("adding an entry did not change the root's ref")
	}
	fresh, err := s.GetTree(now)
	mustOK(t, err)
	entry(t, fresh, "new")
	mustOK(t, os.WriteFile(filepath.Join(dir, "bin", "other"), nil, 0o644))
	if _, err := s.GetTree(entry(t, fresh, "bin").ID); err != nil {
		t.Fatalf("bin was expanded before (memo): %v", err)
	}
	mustOK(t, os.Mkdir(filepath.Join(dir, "q"), 0o755))
	_, qRef, err := s.CurrentRef(base, "q")
	mustOK(t, err)
	mustOK(t, os.WriteFile(filepath.Join(dir, "q", "g"), nil, 0o644))
	if _, err := s.GetTree(qRef); !errors.Is(err, store.ErrBaseChanged) {
		t.Fatalf("expanding a changed directory: %v, want ErrBaseChanged", err)
	}
	if _, _, err := s.CurrentRef(base, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CurrentRef(missing) = %v", err)
	}
	if _, _, err := s.CurrentRef(base, "link/x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CurrentRef(under a symlink) = %v", err)
	}
	if _, _, err := s.CurrentRef(base, "../x"); !errors.Is(err, store.ErrInvalidName) {
		t.Fatalf("CurrentRef(../x) = %v", err)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBaseRefChangedAndResolved(t *testing.T) {
	dir := baseDir(t)
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	tr, err := s.GetTree(root)
	mustOK(t, err)
	a := entry(t, tr, "a.txt").ID
	link := entry(t, tr, "link").ID

	// The same size, so only the times tell.
	rewrite(t, filepath.Join(dir, "a.txt"), "HELLO")
	if _, err := s.ReadBlob(a); !errors.Is(err, store.ErrBaseChanged) {
		t.Fatalf("ReadBlob of a changed file: %v", err)
	}
	if _, err := s.OpenBlob(a); !errors.Is(err, store.ErrBaseChanged) {
		t.Fatalf("OpenBlob of a changed file: %v", err)
	}
	if _, err := s.OpenBlobFile(a); !errors.Is(err, store.ErrBaseChanged) {
		t.Fatalf("OpenBlobFile of a changed file: %v", err)
	}
	if _, err := s.BlobSize(a); !errors.Is(err, store.ErrBaseChanged) {
		t.Fatalf("BlobSize of a changed file: %v", err)
	}
	if has, err := s.HasBlob(a); err != nil || has {
		t.Fatalf("HasBlob of a changed file = %v, %v", has, err)
	}

	// Materialization resolves refs to the preimage before overwriting.
	old, err := s.WriteBlobBytes([]byte("hello"))
	mustOK(t, err)
	mustOK(t, s.Resolve(a, old))
	mustOK(t, s.Resolve(a, old)) // idempotent
	reads := s.BaseReads()
	b, err := s.ReadBlob(a)
	mustOK(t, err)
	if string(b) != "hello" {
		t.Fatalf("resolved ReadBlob = %q", b)
	}
	rc, err := s.OpenBlob(a)
	mustOK(t, err)
	b, err = io.ReadAll(rc)
	mustOK(t, err)
	rc.Close()
	f, err := s.OpenBlobFile(a)
	mustOK(t, err)
	f.Close()
	if n, err := s.BlobSize(a); err != nil || n != 5 || string(b) != "hello" {
		t.Fatalf("resolved OpenBlob %q, BlobSize %d %v", b, n, err)
	}
	if s.BaseReads() != reads {
		t.Fatal("a resolved ref was read from the base directory")
	}

	// A symlink replaced by another one.
	mustOK(t, os.Remove(filepath.Join(dir, "link")))
	mustOK(t, os.Symlink("bin", filepath.Join(dir, "link")))
	if _, err := s.ReadBlob(link); !errors.Is(err, store.ErrBaseChanged) {
		t.Fatalf("ReadBlob of a replaced symlink: %v", err)
	}

	// A directory ref resolved to a stored tree.
	_, subRef, err := s.CurrentRef(base, "sub")
	mustOK(t, err)
	want := &store.Tree{Entries: []store.Entry{{Name: "x", Kind: store.KindFile, Size: 5, ID: old}}}
	tid, err := s.PutTree(want)
	mustOK(t, err)
	mustOK(t, s.Resolve(subRef, tid))
	mustOK(t, os.RemoveAll(filepath.Join(dir, "sub")))
	got, err := s.GetTree(subRef)
	mustOK(t, err)
	if len(got.Entries) != 1 || got.Entries[0].Name != "x" {
		t.Fatalf("resolved dir ref = %+v", got)
	}

	if err := s.Resolve(store.BlobID([]byte("not a ref")), old); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Resolve of an unknown ref: %v", err)
	}
	if err := s.Resolve(link, store.BlobID([]byte("never stored"))); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Resolve to a missing blob: %v", err)
	}
	if err := s.Resolve(root, old); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Resolve of a dir ref to a blob: %v", err)
	}
	checkClean(t, s)
}

func TestBaseRefPersistence(t *testing.T) {
	dir := baseDir(t)
	sdir := t.TempDir()
	s := openDir(t, sdir, store.Options{})
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	tr, err := s.GetTree(root)
	mustOK(t, err)
	// A capture-like tree: one new blob, the rest reused refs.
	nb, err := s.WriteBlobBytes([]byte("new"))
	mustOK(t, err)
	tr.Entries = append(tr.Entries, store.Entry{Name: "zz", Kind: store.KindFile, Size: 3, ID: nb})
	tid, err := s.PutTree(tr)
	mustOK(t, err)
	// A ref dir as a generation root, and a memo-only one persisted by it.
	g1, err := s.PutGeneration(&store.Generation{Root: root, Workspace: "w", Kind: store.GenCreate, Time: 1})
	mustOK(t, err)
	_, deepRef, err := s.CurrentRef(base, "sub/deep")
	mustOK(t, err)
	g2, err := s.PutGeneration(&store.Generation{Root: deepRef, Workspace: "w", Kind: store.GenCommit, Parents: []store.ID{g1}, Time: 2})
	mustOK(t, err)
	if _, err := s.PutGeneration(&store.Generation{Root: entry(t, tr, "a.txt").ID, Workspace: "w", Kind: store.GenCommit, Time: 3}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PutGeneration with a file ref root: %v", err)
	}
	_, err = s.CreateWorkspace(store.Workspace{Name: "w", InPlace: dir, BaseRoot: base}, store.HeadEntry{Gen: g2})
	mustOK(t, err)
	_, err = s.CompareAndAppend("w", g2, store.HeadEntry{Gen: g1}, nil)
	mustOK(t, err)
	g3, err := s.PutGeneration(&store.Generation{Root: tid, Workspace: "w", Kind: store.GenCommit, Parents: []store.ID{g1}, Time: 4})
	mustOK(t, err)
	_, err = s.CompareAndAppend("w", g1, store.HeadEntry{Gen: g3}, nil)
	mustOK(t, err)
	binRef := entry(t, tr, "bin").ID
	bin, err := s.GetTree(binRef)
	mustOK(t, err)
	runRef := entry(t, bin, "run.sh").ID
	mustOK(t, s.Close())

	// A new process: no memo.
	s = openDir(t, sdir, store.Options{})
	defer s.Close()
	w, err := s.GetWorkspace("w")
	mustOK(t, err)
	if w.BaseRoot != base {
		t.Fatalf("BaseRoot %v, want %v", w.BaseRoot, base)
	}
	got, err := s.GetTree(tid)
	mustOK(t, err)
	b, err := s.ReadBlob(entry(t, got, "a.txt").ID)
	mustOK(t, err)
	if string(b) != "hello" {
		t.Fatalf("ReadBlob after reopen = %q", b)
	}
	if _, ok, err := s.BaseRefOf(deepRef); err != nil || !ok {
		t.Fatalf("generation root ref not persisted: %v %v", ok, err)
	}
	if _, ok, err := s.BaseRefOf(runRef); err != nil || ok {
		t.Fatalf("a ref no stored object names was persisted: %v %v", ok, err)
	}
	bin, err = s.GetTree(binRef)
	mustOK(t, err)
	if entry(t, bin, "run.sh").ID != runRef {
		t.Fatal("re-expansion gave a different ref for an unchanged file")
	}
	if _, err := s.GetTree(deepRef); err != nil {
		t.Fatal(err)
	}
	checkClean(t, s)
}

func TestBaseAttachSurvivesMove(t *testing.T) {
	dir := baseDir(t)
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	tr, err := s.GetTree(root)
	mustOK(t, err)
	a := entry(t, tr, "a.txt").ID
	sub := entry(t, tr, "sub").ID

	d, err := dirfd.Open(dir)
	mustOK(t, err)
	detach := s.AttachBase(base, d)
	// Something else takes DIR's place (as the mount does).
	mustOK(t, os.Rename(dir, dir+".under"))
	mustOK(t, os.Mkdir(dir, 0o755))
	mustOK(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("impostor"), 0o644))

	b, err := s.ReadBlob(a)
	mustOK(t, err)
	if string(b) != "hello" {
		t.Fatalf("ReadBlob through the attached fd = %q", b)
	}
	st, err := s.GetTree(sub)
	mustOK(t, err)
	entry(t, st, "deep")
	got, release, err := s.OpenBase(base)
	mustOK(t, err)
	if got != d {
		t.Fatal("OpenBase did not return the attached Dir")
	}
	release()
	release()

	detach()
	detach()
	mustOK(t, d.Close())
	if _, err := s.ReadBlob(a); !errors.Is(err, store.ErrBaseChanged) {
		t.Fatalf("after detach the impostor must not be served: %v", err)
	}
}

func TestBaseAttachDetachWaitsForUsers(t *testing.T) {
	dir := baseDir(t)
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	base, _, err := s.CreateBase(dir)
	mustOK(t, err)
	d, err := dirfd.Open(dir)
	mustOK(t, err)
	defer d.Close()
	detach := s.AttachBase(base, d)
	_, release, err := s.OpenBase(base)
	mustOK(t, err)
	done := make(chan struct{})
	go func() { detach(); close(done) }()
	select {
	case <-done:
		t.Fatal("detach returned while the Dir was in use")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	<-done
}

func TestCreateBaseErrors(t *testing.T) {
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	if _, _, err := s.CreateBase("relative/dir"); !errors.Is(err, store.ErrInvalidName) {
		t.Fatalf("relative: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, _, err := s.CreateBase(missing); !errors.Is(err, store.ErrNotDirectory) {
		t.Fatalf("missing: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	mustOK(t, os.WriteFile(file, nil, 0o644))
	if _, _, err := s.CreateBase(file); !errors.Is(err, store.ErrNotDirectory) {
		t.Fatalf("file: %v", err)
	}
	if _, err := s.BaseDirPath(store.BlobID(nil)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("BaseDirPath(unknown): %v", err)
	}
}

func TestBaseRefGC(t *testing.T) {
	dir := baseDir(t)
	other := t.TempDir()
	sdir := t.TempDir()
	s := openDir(t, sdir, store.Options{})
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	otherBase, otherRoot, err := s.CreateBase(other)
	mustOK(t, err)
	tr, err := s.GetTree(root)
	mustOK(t, err)
	a, link, sub := entry(t, tr, "a.txt").ID, entry(t, tr, "link").ID, entry(t, tr, "sub").ID
	kept := &store.Tree{Entries: []store.Entry{entry(t, tr, "a.txt"), entry(t, tr, "sub")}}
	keptID, err := s.PutTree(kept)
	mustOK(t, err)
	dropped := &store.Tree{Entries: []store.Entry{entry(t, tr, "link")}}
	_, err = s.PutTree(dropped)
	mustOK(t, err)
	// Resolutions: a's is kept (a is reachable), link's is swept.
	ab, err := s.WriteBlobBytes([]byte("hello"))
	mustOK(t, err)
	mustOK(t, s.Resolve(a, ab))
	lb, err := s.WriteBlobBytes([]byte("a.txt"))
	mustOK(t, err)
	mustOK(t, s.Resolve(link, lb))
	// sub resolves to a tree naming a blob: both are kept through it.
	xb, err := s.WriteBlobBytes([]byte("x content"))
	mustOK(t, err)
	subTree, err := s.PutTree(&store.Tree{Entries: []store.Entry{{Name: "x", Kind: store.KindFile, Size: 9, ID: xb}}})
	mustOK(t, err)
	mustOK(t, s.Resolve(sub, subTree))
	g, err := s.PutGeneration(&store.Generation{Root: keptID, Workspace: "w", Kind: store.GenCreate, Time: 1})
	mustOK(t, err)
	_, err = s.CreateWorkspace(store.Workspace{Name: "w", InPlace: dir, BaseRoot: base}, store.HeadEntry{Gen: g})
	mustOK(t, err)
	_, err = s.GC(nil)
	mustOK(t, err)
	checkClean(t, s)
	mustOK(t, s.Close())

	s = openDir(t, sdir, store.Options{})
	defer s.Close()
	for _, c := range []struct {
		name string
		id   store.ID
		want bool
	}{{"a", a, true}, {"sub", sub, true}, {"link", link, false}, {"root", root, false}, {"other root", otherRoot, false}} {
		if _, ok, err := s.BaseRefOf(c.id); err != nil || ok != c.want {
			t.Errorf("after GC ref %s recorded = %v (%v), want %v", c.name, ok, err, c.want)
		}
	}
	if _, err := s.BaseDirPath(base); err != nil {
		t.Errorf("base of w dropped: %v", err)
	}
	if _, err := s.BaseDirPath(otherBase); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unreferenced base kept: %v", err)
	}
	// The kept resolutions still serve after DIR changes.
	rewrite(t, filepath.Join(dir, "a.txt"), "HELLO")
	b, err := s.ReadBlob(a)
	mustOK(t, err)
	st, err := s.GetTree(sub)
	mustOK(t, err)
	xc, err := s.ReadBlob(entry(t, st, "x").ID)
	mustOK(t, err)
	if string(b) != "hello" || string(xc) != "x content" {
		t.Fatalf("after GC: %q %q", b, xc)
	}
	// Deleting the workspace lets the rest go.
	mustOK(t, s.DeleteWorkspace("w"))
	_, err = s.GC(nil)
	mustOK(t, err)
	if _, ok, _ := s.BaseRefOf(a); ok {
		t.Error("ref kept after its workspace was deleted")
	}
	if has, _ := s.HasBlob(ab); has {
		// ab was written before this GC started, so it is swept.
		t.Error("resolution blob kept after its ref went")
	}
	checkClean(t, s)
}

// TestStoredRefsForgottenByGC: the store remembers which references it
// stored (a capture need not look up again those of unchanged siblings),
// but a GC that swept one makes it store the reference again when a tree
// names it.
func TestStoredRefsForgottenByGC(t *testing.T) {
	dir := baseDir(t)
	sdir := t.TempDir()
	s := openDir(t, sdir, store.Options{})
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	tr, err := s.GetTree(root)
	mustOK(t, err)
	a := entry(t, tr, "a.txt")
	// w keeps the base (its root is the base's unresolved root ref).
	g0, err := s.PutGeneration(&store.Generation{Root: root, Workspace: "w", Kind: store.GenCreate, Time: 1})
	mustOK(t, err)
	_, err = s.CreateWorkspace(store.Workspace{Name: "w", InPlace: dir, BaseRoot: base}, store.HeadEntry{Gen: g0})
	mustOK(t, err)
	tree := &store.Tree{Entries: []store.Entry{a}}
	_, err = s.PutTree(tree)
	mustOK(t, err)
	_, err = s.GC(nil) // the tree is unreachable: it and a's ref are swept
	mustOK(t, err)
	if _, ok, _ := s.BaseRefOf(a.ID); !ok {
		t.Fatal("the memoized ref is gone from the process too")
	}
	id, err := s.PutTree(tree)
	mustOK(t, err)
	g, err := s.PutGeneration(&store.Generation{Root: id, Workspace: "w2", Kind: store.GenCreate, Time: 1})
	mustOK(t, err)
	_, err = s.CreateWorkspace(store.Workspace{Name: "w2", InPlace: dir, BaseRoot: base}, store.HeadEntry{Gen: g})
	mustOK(t, err)
	checkClean(t, s)
	mustOK(t, s.Close())
	s = openDir(t, sdir, store.Options{})
	defer s.Close()
	if _, ok, err := s.BaseRefOf(a.ID); err != nil || !ok {
		t.Fatalf("the ref a stored tree names, after a GC swept it once: recorded %v (%v)", ok, err)
	}
	checkClean(t, s)
}

func TestCheckReportsCorruptBaseRef(t *testing.T) {
	dir := baseDir(t)
	sdir := t.TempDir()
	s := openDir(t, sdir, store.Options{})
	_, root, err := s.CreateBase(dir)
	mustOK(t, err)
	g, err := s.PutGeneration(&store.Generation{Root: root, Workspace: "w", Kind: store.GenCreate, Time: 1})
	mustOK(t, err)
	_, err = s.CreateWorkspace(store.Workspace{Name: "w"}, store.HeadEntry{Gen: g})
	mustOK(t, err)
	mustOK(t, s.DB().Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("baserefs")).Put(root[:], []byte("garbage"))
	}))
	ps, err := s.Check()
	mustOK(t, err)
	if !hasProblem(ps, store.ProblemCorruptBaseRef, root.String()) {
		t.Fatalf("check did not report the corrupt ref: %v", ps)
	}
	if _, err := s.GC(nil); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("GC over a corrupt ref: %v", err)
	}
	mustOK(t, s.Close())
}

// A ref never yields content other than what it named: after any sequence
// of changes to DIR, reading an old ref gives the old bytes or
// ErrBaseChanged.
func TestBaseRefNeverServesOtherContent(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp(t.TempDir(), "base")
		if err != nil {
			rt.Fatal(err)
		}
		names := []string{"f0", "f1", "f2"}
		contents := map[string]string{}
		for _, n := range names {
			c := rapid.StringMatching(`[ab]{0,4}`).Draw(rt, "init")
			if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
				rt.Fatal(err)
			}
			contents[n] = c
		}
		sdir, err := os.MkdirTemp(t.TempDir(), "store")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(sdir)
		defer os.RemoveAll(dir)
		s, err := store.Open(sdir, store.Options{NoSync: true})
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close()
		base, _, err := s.CreateBase(dir)
		if err != nil {
			rt.Fatal(err)
		}
		known := map[store.ID]string{} // ref → content it named
		snapshot := func() {
			for _, n := range names {
				_, id, err := s.CurrentRef(base, n)
				if err != nil {
					continue
				}
				if _, ok := known[id]; !ok {
					known[id] = contents[n]
				}
			}
		}
		snapshot()
		for range rapid.IntRange(1, 8).Draw(rt, "steps") {
			n := rapid.SampledFrom(names).Draw(rt, "name")
			p := filepath.Join(dir, n)
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0: // rewrite in place, same or other size
				c := rapid.StringMatching(`[ab]{0,4}`).Draw(rt, "content")
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
				if err != nil {
					rt.Fatal(err)
				}
				f.WriteString(c)
				f.Close()
				contents[n] = c
			case 1: // replace by rename
				c := rapid.StringMatching(`[ab]{0,4}`).Draw(rt, "content")
				tmp := filepath.Join(dir, ".tmp")
				if err := os.WriteFile(tmp, []byte(c), 0o644); err != nil {
					rt.Fatal(err)
				}
				if err := os.Rename(tmp, p); err != nil {
					rt.Fatal(err)
				}
				contents[n] = c
			case 2:
				os.Remove(p)
				delete(contents, n)
			case 3:
				os.Chmod(p, 0o600)
			}
			snapshot()
			for id, want := range known {
				b, err := s.ReadBlob(id)
				switch {
				case errors.Is(err, store.ErrBaseChanged):
				case err != nil:
					rt.Fatalf("ReadBlob: %v", err)
				case string(b) != want:
					rt.Fatalf("ref served %q, it named %q", b, want)
				}
			}
		}
	})
}

func TestBaseRefEncodingProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := genBaseRef(rt)
		enc, err := r.Encode()
		if err != nil {
			rt.Fatalf("valid ref does not encode: %v", err)
		}
		got, err := store.DecodeBaseRef(enc)
		if err != nil {
			rt.Fatalf("decode: %v", err)
		}
		if got != r {
			rt.Fatalf("round trip: %+v != %+v", got, r)
		}
		if r.ID() != store.BaseRefID(enc) {
			rt.Fatal("ID differs from the encoding's address")
		}
		if store.BaseRefID(enc) == store.BlobID(enc) || store.BaseRefID(enc) == store.TreeID(enc) {
			rt.Fatal("domains collide")
		}
	})
}

func genBaseRef(rt *rapid.T) store.BaseRef {
	var base store.ID
	copy(base[:], rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(rt, "base"))
	base[0] |= 1
	kind := store.Kind(rapid.IntRange(1, 4).Draw(rt, "kind"))
	mode := uint32(rapid.IntRange(0, 0o7777).Draw(rt, "mode"))
	switch kind {
	case store.KindFile:
		mode &^= 0o111
	case store.KindExec:
		mode |= 0o100
	}
	var size int64
	if kind != store.KindDir {
		size = rapid.Int64Range(0, 1<<62).Draw(rt, "size")
	}
	path := ""
	for i := range rapid.IntRange(0, 3).Draw(rt, "depth") {
		path += map[bool]string{true: "/", false: ""}[i > 0] + rapid.StringMatching(`[a-z\n ]{1,5}`).Draw(rt, "name")
	}
	return store.BaseRef{
		Base: base, Path: path, Kind: kind, Size: size, Mode: mode,
		Mtime: rapid.Int64().Draw(rt, "mtime"), Ctime: rapid.Int64().Draw(rt, "ctime"),
		Ino: rapid.Uint64().Draw(rt, "ino"),
	}
}

// TestGitRefRoundTrip: a git object reference encodes canonically and
// decodes to itself; it never shares an ID with a fingerprint reference
// of the same base, and one with a fingerprint, a directory kind or a bad
// object name does not encode.
func TestGitRefRoundTrip(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var base store.ID
		copy(base[:], rapid.SliceOfN(rapid.Byte(), store.IDSize, store.IDSize).Draw(rt, "base"))
		if base.IsZero() {
			base[0] = 1
		}
		oid := rapid.StringMatching(`[0-9a-f]{40}`).Draw(rt, "oid")
		r := store.BaseRef{Base: base, Kind: rapid.SampledFrom([]store.Kind{store.KindFile, store.KindExec, store.KindSymlink}).Draw(rt, "kind"),
			Size: rapid.Int64Range(0, 1<<62).Draw(rt, "size"), Git: oid}
		enc, err := r.Encode()
		if err != nil {
			rt.Fatal(err)
		}
		got, err := store.DecodeBaseRef(enc)
		if err != nil || got != r {
			rt.Fatalf("decode: %+v %v, want %+v", got, err, r)
		}
		fp := store.BaseRef{Base: base, Kind: r.Kind, Size: r.Size}
		if r.Kind == store.KindExec {
			fp.Mode = 0o755
		}
		if fp.ID() == r.ID() {
			rt.Fatal("a git ref and a fingerprint ref share an ID")
		}
		for _, bad := range []store.BaseRef{
			{Base: base, Kind: r.Kind, Size: r.Size, Git: oid, Path: "a"},
			{Base: base, Kind: r.Kind, Size: r.Size, Git: oid, Ino: 1},
			{Base: base, Kind: store.KindDir, Git: oid},
			{Base: base, Kind: r.Kind, Size: r.Size, Git: strings.ToUpper(oid) + "G"},
			{Base: base, Kind: r.Kind, Size: r.Size, Git: oid[:39]},
			{Kind: r.Kind, Size: r.Size, Git: oid},
		} {
			if _, err := bad.Encode(); !errors.Is(err, store.ErrCorrupt) {
				rt.Fatalf("%+v encodes: %v", bad, err)
			}
		}
	})
}

func FuzzDecodeBaseRef(f *testing.F) {
	base := store.BlobID([]byte("base"))
	for _, r := range []store.BaseRef{
		{Base: base, Kind: store.KindDir, Mtime: 1, Ctime: 2, Ino: 3, Mode: 0o755},
		{Base: base, Path: "a/b c/d\n", Kind: store.KindFile, Size: 5, Mtime: -1, Ctime: 1 << 60, Ino: 1 << 63, Mode: 0o644},
		{Base: base, Path: "x", Kind: store.KindExec, Size: 1 << 62, Mode: 0o4755},
		{Base: base, Path: "l", Kind: store.KindSymlink, Size: 3, Mode: 0o777},
		{Base: base, Kind: store.KindFile, Size: 6, Git: "4c479deb235f8ab3c0e9cf8ff1d8e8c2c2c9b5c6"},
		{Base: base, Kind: store.KindSymlink, Size: 1 << 40, Git: "0000000000000000000000000000000000000000"},
	} {
		enc, err := r.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add(append(append([]byte{1}, base[:]...), 4, 0x80, 0x00, 0, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := store.DecodeBaseRef(b)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("decode error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		enc, err := r.Encode()
		if err != nil {
			t.Fatalf("decoded ref does not encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("round trip changed the encoding:\n in %x\nout %x", b, enc)
		}
		if r.ID() != store.BaseRefID(b) {
			t.Fatal("round trip changed the id")
		}
	})
}

func TestBaseRefConcurrentExpansionAndReads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "DIR")
	for i := range 20 {
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", i))
		mustOK(t, os.MkdirAll(sub, 0o755))
		for j := range 10 {
			mustOK(t, os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", j)), []byte(fmt.Sprint(i, j)), 0o644))
		}
	}
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	d, err := dirfd.Open(dir)
	mustOK(t, err)
	defer d.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w == 0 { // attach and detach while others read
				for range 20 {
					s.AttachBase(base, d)()
				}
			}
			tr, err := s.GetTree(root)
			if err != nil {
				errs <- err
				return
			}
			for _, e := range tr.Entries {
				st, err := s.GetTree(e.ID)
				if err != nil {
					errs <- err
					return
				}
				for _, f := range st.Entries {
					if _, err := s.ReadBlob(f.ID); err != nil {
						errs <- err
						return
					}
				}
				if _, err := s.PutTree(st); err != nil {
					errs <- err
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
	if got := s.BaseReads(); got != 8*200 {
		t.Fatalf("BaseReads = %d, want %d", got, 8*200)
	}
	checkClean(t, s)
}

func BenchmarkBaseRefExpand1000(b *testing.B) {
	dir := b.TempDir()
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s, err := store.Open(b.TempDir(), store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		// A fresh store memo would be needed for a cold expansion; a new
		// ref of the same directory is memoized too, so expand through a
		// new base each time.
		b.StopTimer()
		base, _, err := s.CreateBase(dir)
		if err != nil {
			b.Fatal(err)
		}
		_, root, err := s.CurrentRef(base, "")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.GetTree(root); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCreateBase(b *testing.B) {
	dir := b.TempDir()
	s, err := store.Open(b.TempDir(), store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if _, _, err := s.CreateBase(dir); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadBlobRef(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("x"), 4096), 0o644); err != nil {
		b.Fatal(err)
	}
	s, err := store.Open(b.TempDir(), store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	base, _, err := s.CreateBase(dir)
	if err != nil {
		b.Fatal(err)
	}
	_, id, err := s.CurrentRef(base, "f")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.ReadBlob(id); err != nil {
			b.Fatal(err)
		}
	}
}

// TestResolveManyAndRefStatuses: ResolveMany stores trees and records
// every resolution at once (as many Resolve calls would); RefStatuses
// tells references (stored, or only built by this process) and their
// resolutions apart from other IDs.
func TestResolveManyAndRefStatuses(t *testing.T) {
	dir := baseDir(t)
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	tr, err := s.GetTree(root)
	mustOK(t, err)
	a := entry(t, tr, "a.txt").ID
	sub := entry(t, tr, "sub").ID
	var st unix.Stat_t
	mustOK(t, unix.Lstat(filepath.Join(dir, "bin"), &st))
	_, bin, ok := s.RefFromStat(base, "bin", &st)
	if !ok || bin != entry(t, tr, "bin").ID {
		t.Fatalf("RefFromStat(bin) = %s, %v; the listing named %s", bin.Short(), ok, entry(t, tr, "bin").ID.Short())
	}
	if _, _, ok := s.RefFromStat(base, "../x", &st); ok {
		t.Fatal("RefFromStat accepted an invalid path")
	}
	blob, err := s.WriteBlobBytes([]byte("hello"))
	mustOK(t, err)

	sts, err := s.RefStatuses([]store.ID{a, sub, blob, root})
	mustOK(t, err)
	want := []store.RefStatus{{IsRef: true}, {IsRef: true}, {}, {IsRef: true}}
	for i := range want {
		if sts[i] != want[i] {
			t.Fatalf("RefStatuses before resolving: %+v, want %+v", sts, want)
		}
	}

	subTree, err := s.GetTree(sub)
	mustOK(t, err)
	enc, err := subTree.Encode()
	mustOK(t, err)
	mustOK(t, s.ResolveMany([]*store.Tree{subTree}, []store.Resolution{{Ref: a, Target: blob}, {Ref: sub, Target: store.TreeID(enc)}}))
	sts, err = s.RefStatuses([]store.ID{a, sub, blob, bin})
	mustOK(t, err)
	want = []store.RefStatus{{IsRef: true, Resolved: true}, {IsRef: true, Resolved: true}, {}, {IsRef: true}}
	for i := range want {
		if sts[i] != want[i] {
			t.Fatalf("RefStatuses after ResolveMany: %+v, want %+v", sts, want)
		}
	}
	// Reads go to the resolutions, whatever DIR holds now.
	rewrite(t, filepath.Join(dir, "a.txt"), "HELLO")
	mustOK(t, os.RemoveAll(filepath.Join(dir, "sub")))
	if b, err := s.ReadBlob(a); err != nil || string(b) != "hello" {
		t.Fatalf("resolved ReadBlob = %q, %v", b, err)
	}
	if got, err := s.GetTree(sub); err != nil || len(got.Entries) != 1 || got.Entries[0].Name != "deep" {
		t.Fatalf("resolved sub = %+v, %v", got, err)
	}
	// Nothing is recorded when a target is missing.
	err = s.ResolveMany(nil, []store.Resolution{{Ref: bin, Target: store.TreeID([]byte("never stored"))}})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ResolveMany to a missing tree: %v", err)
	}
	if err := s.ResolveMany(nil, []store.Resolution{{Ref: store.BlobID([]byte("not a ref")), Target: blob}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ResolveMany of an unknown ref: %v", err)
	}
	if sts, err := s.RefStatuses([]store.ID{bin}); err != nil || sts[0].Resolved {
		t.Fatalf("a failed ResolveMany resolved bin: %+v, %v", sts, err)
	}
	mustOK(t, s.ResolveMany(nil, nil))
	checkClean(t, s)
}

// TestPublishGenerationWithResolve: a prepared resolve passed to
// PublishGeneration is written in the generation's transaction, all or
// nothing: a publish that fails records no resolution, one that succeeds
// records both (a capture's preservation and its generation cost one
// metadata sync).
// TestPrepareResolveAfter: a prepared write leaves the references an
// earlier one carries to it (a capture's trees and its preservation name
// the same unchanged siblings); written together, in order, everything
// lands, and the trees and resolutions read back after a reopen.
func TestPrepareResolveAfter(t *testing.T) {
	dir := baseDir(t)
	sdir := t.TempDir()
	s := openDir(t, sdir, store.Options{})
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	tr, err := s.GetTree(root)
	mustOK(t, err)
	a := entry(t, tr, "a.txt")
	// The capture's tree: a's ref and a new file; the preservation: root's
	// listing (naming a's ref too) and a resolution of a.
	nb, err := s.WriteBlobBytes([]byte("new"))
	mustOK(t, err)
	capture := &store.Tree{Entries: []store.Entry{a, {Name: "new.txt", Kind: store.KindFile, Size: 3, ID: nb}}}
	pt, err := s.PrepareResolve([]*store.Tree{capture}, nil)
	mustOK(t, err)
	ab, err := s.WriteBlobBytes([]byte("hello"))
	mustOK(t, err)
	pr, err := s.PrepareResolve([]*store.Tree{tr}, []store.Resolution{{Ref: a.ID, Target: ab}, {Ref: root, Target: store.TreeID(mustEncode(t, tr))}}, pt)
	mustOK(t, err)
	if err := s.WriteResolve(pr); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("writing the later part alone: %v, want ErrNotFound (a's ref is the earlier part's to store)", err)
	}
	capID := pt.TreeIDs()[0]
	g0, err := s.PutGeneration(&store.Generation{Root: root, Workspace: "w", Kind: store.GenCreate, Time: 1})
	mustOK(t, err)
	_, err = s.CreateWorkspace(store.Workspace{Name: "w", InPlace: dir, BaseRoot: base}, store.HeadEntry{Gen: g0})
	mustOK(t, err)
	_, _, err = s.PublishGeneration(&store.Generation{Root: capID, Parents: []store.ID{g0}, Workspace: "w", Kind: store.GenCapture, Time: 2},
		"w", g0, store.HeadEntry{Kind: store.GenCapture}, nil, pt, pr)
	mustOK(t, err)
	checkClean(t, s)
	mustOK(t, s.Close())
	s = openDir(t, sdir, store.Options{})
	defer s.Close()
	rewrite(t, filepath.Join(dir, "a.txt"), "HELLO") // the resolution serves the old bytes now
	if b, err := s.ReadBlob(a.ID); err != nil || string(b) != "hello" {
		t.Fatalf("a after reopen: %q %v", b, err)
	}
	got, err := s.GetTree(capID)
	mustOK(t, err)
	if len(got.Entries) != 2 {
		t.Fatalf("the capture's tree after reopen: %v", got.Entries)
	}
	checkClean(t, s)
}

func mustEncode(t *testing.T, tr *store.Tree) []byte {
	t.Helper()
	b, err := tr.Encode()
	mustOK(t, err)
	return b
}

func TestPublishGenerationWithResolve(t *testing.T) {
	dir := baseDir(t)
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	_, root, err := s.CreateBase(dir)
	mustOK(t, err)
	tr, err := s.GetTree(root)
	mustOK(t, err)
	a := entry(t, tr, "a.txt").ID
	g0, err := s.PutGeneration(&store.Generation{Root: root, Workspace: "w", Kind: store.GenCreate, Time: s.Now()})
	mustOK(t, err)
	_, err = s.CreateWorkspace(store.Workspace{Name: "w"}, store.HeadEntry{Gen: g0, Kind: store.GenCreate})
	mustOK(t, err)
	blob, err := s.WriteBlobBytes([]byte("old a"))
	mustOK(t, err)
	pr, err := s.PrepareResolve(nil, []store.Resolution{{Ref: a, Target: blob}})
	mustOK(t, err)
	newRoot := storetest.PutFiles(t, s, map[string]string{"a.txt": "new a"})
	gen := &store.Generation{Root: newRoot, Parents: []store.ID{g0}, Workspace: "w", Kind: store.GenCapture, Operation: "op", Time: s.Now()}
	entryW := store.HeadEntry{Kind: store.GenCapture, Operation: "op"}
	resolved := func() bool {
		sts, err := s.RefStatuses([]store.ID{a})
		mustOK(t, err)
		return sts[0].Resolved
	}

	crash := errors.New("crash")
	prev := store.SetFailpoint(func(name string) error {
		if name == "head.append" {
			return crash
		}
		return nil
	})
	_, _, err = s.PublishGeneration(gen, "w", g0, entryW, nil, pr)
	store.SetFailpoint(prev)
	wantIs(t, err, crash)
	if resolved() {
		t.Fatal("a failed publish recorded the resolution it carried")
	}
	_, _, err = s.PublishGeneration(gen, "w", newRoot, entryW, nil, pr) // wrong expected head
	wantIs(t, err, store.ErrHeadMoved)
	if resolved() {
		t.Fatal("a publish against a moved head recorded the resolution it carried")
	}
	id, w, err := s.PublishGeneration(gen, "w", g0, entryW, nil, pr)
	mustOK(t, err)
	if w.Head != id || !resolved() {
		t.Fatalf("after the publish: head %s (want %s), resolved %v", w.Head.Short(), id.Short(), resolved())
	}
	if b, err := s.ReadBlob(a); err != nil || string(b) != "old a" {
		t.Fatalf("resolved ReadBlob = %q, %v", b, err)
	}
	if pr, err := s.PrepareResolve(nil, nil); pr != nil || err != nil {
		t.Fatalf("PrepareResolve of nothing = %v, %v; want nil, nil", pr, err)
	}
	mustOK(t, s.WriteResolve(nil))
}

// TestExpansionWatch: a directory reference of an attached base is
// watched before it is listed; ExpansionWatch reports the watcher and the
// number after which an event in the directory means the listing no
// longer holds. Without an attachment nothing is watched, and detaching
// forgets the records (the watcher is closed).
func TestExpansionWatch(t *testing.T) {
	dir := baseDir(t)
	s := openDir(t, t.TempDir(), store.Options{Watchers: dirWatchers{}})
	defer s.Close()
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	tr, err := s.GetTree(root) // expanded before any attachment
	mustOK(t, err)
	if _, _, ok := s.ExpansionWatch(root); ok {
		t.Fatal("an expansion without an attached base is recorded as watched")
	}
	d, err := dirfd.Open(dir)
	mustOK(t, err)
	defer d.Close()
	detach := s.AttachBase(base, d)
	sub := entry(t, tr, "sub").ID
	if _, ok := s.Expanded(sub); ok {
		t.Fatal("sub expanded before anyone listed it")
	}
	_, err = s.GetTree(sub)
	mustOK(t, err)
	w, seq, ok := s.ExpansionWatch(sub)
	if !ok || w == nil {
		t.Fatal("the expansion of sub under an attached base was not watched")
	}
	if !w.Quiet("sub", seq, false) {
		t.Fatal("sub reported changed with nothing written")
	}
	mustOK(t, os.WriteFile(filepath.Join(dir, "sub", "deep", "g"), []byte("x"), 0o644)) // below: not sub's own
	if _, err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if !w.Quiet("sub", seq, false) {
		t.Fatal("a write two levels down counted as an event in sub")
	}
	mustOK(t, os.WriteFile(filepath.Join(dir, "sub", "new"), []byte("x"), 0o644))
	if _, err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if w.Quiet("sub", seq, false) {
		t.Fatal("a new name in sub went unreported")
	}
	detach()
	if _, _, ok := s.ExpansionWatch(sub); ok {
		t.Fatal("detach kept the record of a closed watcher")
	}
}

// dirWatchers supplies inotify watchers, as workspace does.
type dirWatchers struct{}

func (dirWatchers) Supported(fd int) bool { return dirwatch.Supported(fd) }

func (dirWatchers) New(max int) (store.Watcher, error) {
	w, err := dirwatch.New(max)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// TestNoWatchersNoWatch: the store watches nothing by itself; without
// Options.Watchers an attached base's expansions are listed unwatched.
func TestNoWatchersNoWatch(t *testing.T) {
	dir := baseDir(t)
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	base, root, err := s.CreateBase(dir)
	mustOK(t, err)
	d, err := dirfd.Open(dir)
	mustOK(t, err)
	defer d.Close()
	detach := s.AttachBase(base, d)
	defer detach()
	tr, err := s.GetTree(root)
	mustOK(t, err)
	_, err = s.GetTree(entry(t, tr, "sub").ID)
	mustOK(t, err)
	if _, _, ok := s.ExpansionWatch(entry(t, tr, "sub").ID); ok {
		t.Fatal("an expansion was watched with no watchers supplied")
	}
	if _, ok := s.BaseWatching(base); ok {
		t.Fatal("the base has a watcher with no watchers supplied")
	}
}
