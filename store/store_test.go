package store_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got %v, want an error wrapping %v", err, target)
	}
}

func openDir(t *testing.T, dir string, opt store.Options) *store.Store {
	t.Helper()
	opt.NoSync = true
	s, err := store.Open(dir, opt)
	mustOK(t, err)
	return s
}

func hasProblem(ps []store.Problem, kind, object string) bool {
	for _, p := range ps {
		if p.Kind == kind && strings.Contains(p.Object, object) {
			return true
		}
	}
	return false
}

func TestBlobCorruptionDetected(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	defer s.Close()
	content := bytes.Repeat([]byte("0123456789"), 10000)
	id, err := s.WriteBlobBytes(content)
	mustOK(t, err)
	path := s.BlobPath(id)
	fi, err := os.Stat(path)
	mustOK(t, err)
	if fi.Mode().Perm() != 0o400 {
		t.Fatalf("object mode %v, want 0400", fi.Mode().Perm())
	}
	if rel, _ := filepath.Rel(dir, path); rel != filepath.Join("objects", id.String()[:2], id.String()[2:]) {
		t.Fatalf("object at %s", rel)
	}
	// Flip one byte in the middle.
	mustOK(t, os.Chmod(path, 0o644))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	mustOK(t, err)
	_, err = f.WriteAt([]byte{content[5000] ^ 0xff}, 5000)
	mustOK(t, err)
	mustOK(t, f.Close())

	_, err = s.ReadBlob(id)
	wantIs(t, err, store.ErrCorrupt)
	rc, err := s.OpenBlob(id)
	mustOK(t, err)
	_, err = io.ReadAll(rc)
	rc.Close()
	wantIs(t, err, store.ErrCorrupt)
	ps, err := s.Check()
	mustOK(t, err)
	if !hasProblem(ps, store.ProblemCorruptBlob, id.String()) {
		t.Fatalf("Check did not name the corrupt blob: %v", ps)
	}

	// Truncation is corruption too.
	mustOK(t, os.Truncate(path, 10))
	rc, err = s.OpenBlob(id)
	mustOK(t, err)
	_, err = io.ReadAll(rc)
	rc.Close()
	wantIs(t, err, store.ErrCorrupt)
	// A stray file in objects/ is reported, not trusted.
	mustOK(t, os.WriteFile(filepath.Join(dir, "objects", "zz"), nil, 0o644))
	ps, err = s.Check()
	mustOK(t, err)
	if !hasProblem(ps, store.ProblemStrayObject, "zz") {
		t.Fatalf("Check missed the stray object: %v", ps)
	}
}

// genReader produces n bytes without holding them: a fixed random block
// repeated, each copy perturbed so no two blocks are equal.
type genReader struct {
	n, off int64
	x      uint64
	block  []byte
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	if g.block == nil {
		g.block = make([]byte, 64<<10)
		for i := range g.block {
			g.x = g.x*6364136223846793005 + 1442695040888963407
			g.block[i] = byte(g.x >> 56)
		}
	}
	if rem := g.n - g.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n := 0
	for n < len(p) {
		pos := (g.off + int64(n)) % int64(len(g.block))
		c := copy(p[n:], g.block[pos:])
		p[n] ^= byte((g.off + int64(n)) >> 16)
		n += c
	}
	g.off += int64(n)
	return n, nil
}

func TestLargeBlobStreamsWithFlatMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 256 MiB")
	}
	const size = 256 << 20
	s := storetest.MustOpen(t)
	var before, after runtime.MemStats
	gen := &genReader{n: size, x: 1}
	gen.Read(nil) // allocate the pattern block before measuring
	runtime.GC()
	runtime.ReadMemStats(&before)
	id, n, err := s.WriteBlob(gen)
	mustOK(t, err)
	runtime.ReadMemStats(&after)
	if n != size {
		t.Fatalf("wrote %d bytes", n)
	}
	// TotalAlloc counts every allocation, freed or not: streaming must
	// not allocate anything proportional to the content.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Fatalf("writing %d MiB allocated %d MiB", size>>20, grew>>20)
	}
	// Reading back streams and verifies, also with flat memory.
	rc, err := s.OpenBlob(id)
	mustOK(t, err)
	runtime.ReadMemStats(&before)
	h := store.NewBlobHasher()
	got, err := io.CopyBuffer(h, rc, make([]byte, 1<<20))
	rc.Close()
	mustOK(t, err)
	runtime.ReadMemStats(&after)
	if got != size || h.Sum() != id {
		t.Fatalf("read back %d bytes hashing to %s", got, h.Sum().Short())
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Fatalf("reading %d MiB allocated %d MiB", size>>20, grew>>20)
	}
	// The large object would make the cleanup Check slow; drop it.
	if _, err := s.GC(nil); err != nil {
		t.Fatal(err)
	}
}

func TestWriteBlobFile(t *testing.T) {
	s := storetest.MustOpen(t)
	src := filepath.Join(t.TempDir(), "src")
	content := bytes.Repeat([]byte("file content "), 50000)
	mustOK(t, os.WriteFile(src, content, 0o644))
	id, n, err := s.WriteBlobFile(src)
	mustOK(t, err)
	if id != store.BlobID(content) || n != int64(len(content)) {
		t.Fatalf("WriteBlobFile = %s, %d", id.Short(), n)
	}
	// Same filesystem as the store: the clone path (if supported) and the
	// copy path must agree.
	src2 := filepath.Join(s.Dir(), "src2")
	mustOK(t, os.WriteFile(src2, content, 0o644))
	defer os.Remove(src2)
	b := s.NewBlobBatch()
	id2, _, err := b.WriteBlobFile(src2)
	mustOK(t, err)
	mustOK(t, b.Commit())
	if id2 != id {
		t.Fatal("batch WriteBlobFile gave a different id")
	}
	_, _, err = s.WriteBlobFile(filepath.Join(t.TempDir(), "missing"))
	wantIs(t, err, os.ErrNotExist)
}

func TestBatchBlobsInvisibleUntilCommit(t *testing.T) {
	s := storetest.MustOpen(t)
	b := s.NewBlobBatch()
	id, err := b.WriteBlobBytes([]byte("pending"))
	mustOK(t, err)
	if ok, _ := s.HasBlob(id); ok {
		t.Fatal("batch blob visible before Commit")
	}
	mustOK(t, b.Commit())
	if ok, _ := s.HasBlob(id); !ok {
		t.Fatal("batch blob missing after Commit")
	}
}

func TestCorruptTreeAndGeneration(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	defer s.Close()
	blob, err := s.WriteBlobBytes([]byte("x"))
	mustOK(t, err)
	tid, err := s.PutTree(&store.Tree{Entries: []store.Entry{{Name: "x", Kind: store.KindFile, Size: 1, ID: blob}}})
	mustOK(t, err)
	gid, err := s.PutGeneration(&store.Generation{Root: tid, Workspace: "w", Kind: store.GenCreate})
	mustOK(t, err)
	other, err := s.PutTree(&store.Tree{Entries: []store.Entry{{Name: "y", Kind: store.KindFile, Size: 1, ID: blob}}})
	mustOK(t, err)
	// Swap in another valid tree's bytes: decodes fine, hash mismatches.
	mustOK(t, s.DB().Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("trees"))
		if err := b.Put(tid[:], append([]byte{}, b.Get(other[:])...)); err != nil {
			return err
		}
		g := tx.Bucket([]byte("generations"))
		return g.Put(gid[:], []byte(`{"root":"`+tid.String()+`","workspace":"w","kind":"commit","time":0}`))
	}))
	_, err = s.GetTree(tid)
	wantIs(t, err, store.ErrCorrupt)
	_, err = s.GetGeneration(gid)
	wantIs(t, err, store.ErrCorrupt)
	ps, err := s.Check()
	mustOK(t, err)
	if !hasProblem(ps, store.ProblemCorruptTree, tid.String()) || !hasProblem(ps, store.ProblemCorruptGeneration, gid.String()) {
		t.Fatalf("Check missed corrupt metadata: %v", ps)
	}
}

func TestCheckFindsDanglingReferences(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	defer s.Close()
	sub := storetest.PutFiles(t, s, map[string]string{"f": "sub file"})
	missingBlob := store.BlobID([]byte("never stored"))
	root, err := s.PutTree(&store.Tree{Entries: []store.Entry{
		{Name: "gone", Kind: store.KindFile, Size: 12, ID: missingBlob},
		{Name: "sub", Kind: store.KindDir, ID: sub},
	}})
	mustOK(t, err)
	gen, err := s.PutGeneration(&store.Generation{Root: root, Workspace: "w", Kind: store.GenCreate})
	mustOK(t, err)
	gen2 := storetest.PutGen(t, s, "w", store.GenCommit, map[string]string{"a": "b"})
	storetest.MustCreate(t, s, "w", "", gen, store.ID{})
	_, err = s.CompareAndAppend("w", gen, store.HeadEntry{Gen: gen2, Kind: store.GenCommit}, nil)
	mustOK(t, err)
	ps, err := s.Check()
	mustOK(t, err)
	if len(ps) != 1 || !hasProblem(ps, store.ProblemMissingBlob, missingBlob.String()) {
		t.Fatalf("want exactly the missing blob, got %v", ps)
	}
	// Remove a subtree and a generation from under the head log.
	mustOK(t, s.DB().Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("trees")).Delete(sub[:]); err != nil {
			return err
		}
		return tx.Bucket([]byte("generations")).Delete(gen2[:])
	}))
	ps, err = s.Check()
	mustOK(t, err)
	if !hasProblem(ps, store.ProblemMissingTree, sub.String()) || !hasProblem(ps, store.ProblemDanglingHead, gen2.String()) {
		t.Fatalf("Check missed dangling references: %v", ps)
	}
}

// TestOpenShrinksTmp: a tmp directory grown by many staged files (an
// import) is made again at open once empty, so that later opens do not
// read its empty directory blocks.
func TestOpenShrinksTmp(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, store.Options{})
	mustOK(t, err)
	mustOK(t, s.Close())
	tmp := filepath.Join(dir, "tmp")
	shard := filepath.Join(tmp, "5") // a shard grown by a batch, as tmp itself was by older versions
	mustOK(t, os.Mkdir(shard, 0o755))
	for i := range 5000 {
		mustOK(t, os.WriteFile(filepath.Join(tmp, fmt.Sprintf("blob-staged-%06d", i)), nil, 0o600))
		mustOK(t, os.WriteFile(filepath.Join(shard, fmt.Sprintf("blob-staged-%06d", i)), nil, 0o600))
	}
	grown, err := os.Stat(tmp)
	mustOK(t, err)
	if grown.Size() <= 64<<10 {
		t.Skipf("the file system did not grow tmp past 64 KiB (%d bytes)", grown.Size())
	}
	s = storetest.MustOpenDir(t, dir, store.Options{})
	after, err := os.Stat(tmp)
	mustOK(t, err)
	if after.Size() >= grown.Size() || after.Size() > 64<<10 {
		t.Fatalf("tmp after open: %d bytes (was %d)", after.Size(), grown.Size())
	}
	if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
		t.Fatalf("tmp after open: %d entries, %v", len(ents), err)
	}
	// The store still writes through it.
	if _, err := s.WriteBlobBytes([]byte("after")); err != nil {
		t.Fatal(err)
	}
}

func TestReopenPersists(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, store.Options{})
	mustOK(t, err)
	gen := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a/b": "deep", "c": "top"})
	storetest.MustCreate(t, s, "main", "", gen, store.ID{})
	mustOK(t, s.PutMeta("ns", "k", []byte("v")))
	mustOK(t, s.Close())
	// Stray temp files from a "crash" are cleaned at open, in tmp and in
	// its shard directories.
	stray := filepath.Join(dir, "tmp", "blob-123")
	mustOK(t, os.WriteFile(stray, []byte("partial"), 0o600))
	mustOK(t, os.MkdirAll(filepath.Join(dir, "tmp", "3"), 0o755))
	strayShard := filepath.Join(dir, "tmp", "3", "blob-456")
	mustOK(t, os.WriteFile(strayShard, []byte("partial"), 0o600))

	s = storetest.MustOpenDir(t, dir, store.Options{})
	for _, p := range []string{stray, strayShard} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stray temp file %s survived open", p)
		}
	}
	// A blob written after the open recreates its shard.
	if _, err := s.WriteBlobBytes([]byte("after the crash")); err != nil {
		t.Fatal(err)
	}
	w, err := s.GetWorkspace("main")
	mustOK(t, err)
	if w.Head != gen {
		t.Fatalf("head %s after reopen", w.Head.Short())
	}
	g, err := s.GetGeneration(gen)
	mustOK(t, err)
	tr, err := s.GetTree(g.Root)
	mustOK(t, err)
	if len(tr.Entries) != 2 {
		t.Fatalf("root tree %v", tr.Entries)
	}
	if v, err := s.GetMeta("ns", "k"); err != nil || string(v) != "v" {
		t.Fatalf("meta after reopen: %q %v", v, err)
	}
}

func TestReadOnlyOpen(t *testing.T) {
	dir := t.TempDir()
	_, err := store.Open(dir, store.Options{ReadOnly: true})
	wantIs(t, err, store.ErrNotFound)
	s := openDir(t, dir, store.Options{})
	gen := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "1"})
	storetest.MustCreate(t, s, "main", "", gen, store.ID{})
	mustOK(t, s.Close())

	ro := openDir(t, dir, store.Options{ReadOnly: true})
	defer ro.Close()
	if w, err := ro.GetWorkspace("main"); err != nil || w.Head != gen {
		t.Fatalf("read-only GetWorkspace: %+v %v", w, err)
	}
	_, err = ro.WriteBlobBytes([]byte("x"))
	wantIs(t, err, store.ErrReadOnly)
	_, err = ro.PutTree(&store.Tree{})
	wantIs(t, err, store.ErrReadOnly)
	wantIs(t, ro.PutMeta("a", "b", nil), store.ErrReadOnly)
	_, err = ro.GC(nil)
	wantIs(t, err, store.ErrReadOnly)
	ps, err := ro.Check()
	mustOK(t, err)
	if len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
}

// mountReadOnlyTmpfs mounts an empty read-only tmpfs at dir, or skips.
func mountTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if err := unix.Mount("none", dir, "tmpfs", 0, opts); err != nil {
		t.Skipf("cannot mount tmpfs (%v)", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
}

func TestReadOnlyDirectoryError(t *testing.T) {
	parent := t.TempDir()
	if os.Geteuid() != 0 {
		mustOK(t, os.Chmod(parent, 0o555))
		defer os.Chmod(parent, 0o755)
	} else {
		mountTmpfs(t, parent, "size=1m")
		mustOK(t, unix.Mount("none", parent, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""))
	}
	_, err := store.Open(filepath.Join(parent, "store"), store.Options{})
	if err == nil {
		t.Fatal("opened a store in a read-only directory")
	}
	if !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EACCES) {
		t.Fatalf("error does not carry the cause: %v", err)
	}
	if !strings.Contains(err.Error(), "store") {
		t.Fatalf("error lacks context: %v", err)
	}
}

// TestReadOnlyExistingStore: a store whose filesystem became read-only
// refuses a writable open with the cause (the writability check), and
// still opens read-only.
func TestReadOnlyExistingStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to remount a tmpfs read-only")
	}
	parent := t.TempDir()
	mountTmpfs(t, parent, "size=8m")
	dir := filepath.Join(parent, "store")
	s, err := store.Open(dir, store.Options{})
	mustOK(t, err)
	mustOK(t, s.Close())
	mustOK(t, unix.Mount("none", parent, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""))
	_, err = store.Open(dir, store.Options{})
	if !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("writable open of a read-only store: %v", err)
	}
	ro, err := store.Open(dir, store.Options{ReadOnly: true})
	mustOK(t, err)
	mustOK(t, ro.Close())
}

func TestCorruptMetaFile(t *testing.T) {
	cases := map[string]func(path string) error{
		"empty":   func(p string) error { return os.Truncate(p, 0) },
		"half":    func(p string) error { return os.Truncate(p, 6000) },
		"garbage": func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte{0xa5}, 32768), 0o600) },
		"one-page": func(p string) error {
			return os.Truncate(p, 4096)
		},
		"data-pages": func(p string) error {
			// Keep both meta pages, scribble over every page after them.
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			page := int64(os.Getpagesize())
			_, err = f.WriteAt(bytes.Repeat([]byte{0xff}, int(fi.Size()-2*page)), 2*page)
			return err
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openDir(t, dir, store.Options{})
			gen := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "1"})
			storetest.MustCreate(t, s, "main", "", gen, store.ID{})
			mustOK(t, s.Close())
			mustOK(t, damage(filepath.Join(dir, "meta.db")))
			s, err := store.Open(dir, store.Options{LockTimeout: 100 * time.Millisecond})
			if err == nil {
				// Some damage is only visible on read; it must still
				// surface as corruption, never as an empty store.
				defer s.Close()
				_, err = s.ListWorkspaces()
			}
			wantIs(t, err, store.ErrCorrupt)
		})
	}
}

func TestMissingMetaWithObjectsIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	_, err := s.WriteBlobBytes([]byte("x"))
	mustOK(t, err)
	mustOK(t, s.Close())
	mustOK(t, os.Remove(filepath.Join(dir, "meta.db")))
	_, err = store.Open(dir, store.Options{})
	wantIs(t, err, store.ErrCorrupt)
}

func TestIncompatibleFormat(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	mustOK(t, s.DB().Update(func(tx *bolt.Tx) error {
		v, _ := json.Marshal(map[string]any{"version": 2, "hash": store.HashName})
		return tx.Bucket([]byte("format")).Put([]byte("format"), v)
	}))
	mustOK(t, s.Close())
	_, err := store.Open(dir, store.Options{})
	wantIs(t, err, store.ErrIncompatible)
}

func TestLockedStore(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	defer s.Close()
	start := time.Now()
	_, err := store.Open(dir, store.Options{LockTimeout: 100 * time.Millisecond})
	wantIs(t, err, store.ErrLocked)
	if time.Since(start) > 5*time.Second {
		t.Fatal("lock wait not bounded")
	}
}

// TestOpenWaitsForRelease: an Open that finds the store locked gets it
// once the holder closes, within its timeout; the early poll neither
// steals the lock nor keeps it.
func TestOpenWaitsForRelease(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	closed := make(chan error, 1)
	go func() {
		time.Sleep(30 * time.Millisecond) // the holder works a while
		closed <- s.Close()
	}()
	s2, err := store.Open(dir, store.Options{LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("open after the holder closed: %v", err)
	}
	mustOK(t, <-closed)
	// The second opener holds the lock now.
	_, err = store.Open(dir, store.Options{LockTimeout: 50 * time.Millisecond})
	wantIs(t, err, store.ErrLocked)
	mustOK(t, s2.Close())
	s3 := openDir(t, dir, store.Options{})
	mustOK(t, s3.Close())
}

func TestFailedBlobWriteLeavesNothing(t *testing.T) {
	for _, step := range []string{"blob.before-fsync", "blob.before-rename"} {
		t.Run(step, func(t *testing.T) {
			s := storetest.MustOpen(t)
			prev := store.SetFailpoint(func(name string) error {
				if name == step {
					return &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
				}
				return nil
			})
			defer func() { store.SetFailpoint(prev) }()
			_, _, err := s.WriteBlob(strings.NewReader("content"))
			wantIs(t, err, syscall.ENOSPC)
			if ok, _ := s.HasBlob(store.BlobID([]byte("content"))); ok {
				t.Fatal("failed write left an object")
			}
			assertEmptyTmp(t, s)
		})
	}
}

// assertEmptyTmp checks that tmp holds no file (its shard directories may
// remain).
func assertEmptyTmp(t *testing.T, s *store.Store) {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(s.Dir(), "tmp"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	mustOK(t, err)
	if len(files) != 0 {
		t.Fatalf("tmp not empty: %v", files)
	}
}

func TestRealENOSPC(t *testing.T) {
	dir := t.TempDir()
	mountTmpfs(t, dir, "size=2m")
	s := openDir(t, dir, store.Options{})
	defer s.Close()
	_, _, err := s.WriteBlob(&genReader{n: 4 << 20, x: 7})
	wantIs(t, err, syscall.ENOSPC)
	assertEmptyTmp(t, s)
	b := s.NewBlobBatch()
	_, _, err = b.WriteBlob(&genReader{n: 4 << 20, x: 8})
	wantIs(t, err, syscall.ENOSPC)
	assertEmptyTmp(t, s)
	// The store still works once space is there again.
	_, err = s.WriteBlobBytes([]byte("small"))
	mustOK(t, err)
}

func TestFailedBatchCommitPublishesNothing(t *testing.T) {
	s := storetest.MustOpen(t)
	b := s.NewBlobBatch()
	id, err := b.WriteBlobBytes([]byte("batched"))
	mustOK(t, err)
	prev := store.SetFailpoint(func(name string) error {
		if name == "batch.before-rename" {
			return syscall.EIO
		}
		return nil
	})
	err = b.Commit()
	store.SetFailpoint(prev)
	wantIs(t, err, syscall.EIO)
	if ok, _ := s.HasBlob(id); ok {
		t.Fatal("blob published by failed commit")
	}
	mustOK(t, b.Commit())
	if ok, _ := s.HasBlob(id); !ok {
		t.Fatal("retried commit did not publish")
	}
	assertEmptyTmp(t, s)
}

func TestFailedHeadAppendChangesNothing(t *testing.T) {
	s := storetest.MustOpen(t)
	g0 := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "0"})
	g1 := storetest.PutGen(t, s, "main", store.GenCommit, map[string]string{"a": "1"})
	storetest.MustCreate(t, s, "main", "", g0, store.ID{})
	crash := errors.New("crash")
	prev := store.SetFailpoint(func(name string) error {
		if name == "head.append" {
			return crash
		}
		return nil
	})
	_, err := s.CompareAndAppend("main", g0, store.HeadEntry{Gen: g1, Kind: store.GenCommit, Operation: "op"}, nil)
	store.SetFailpoint(prev)
	wantIs(t, err, crash)
	w, err := s.GetWorkspace("main")
	mustOK(t, err)
	log, err := s.HeadLog("main", 0)
	mustOK(t, err)
	if w.Head != g0 || len(log) != 1 {
		t.Fatalf("failed append left traces: %+v %v", w, log)
	}
	if _, ok, _ := s.FindOperation("main", "op"); ok {
		t.Fatal("failed append indexed its operation")
	}
}

func TestGCKeepsEveryHeadLogEntry(t *testing.T) {
	s := storetest.MustOpen(t)
	g0 := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"old": "old content"})
	g1 := storetest.PutGen(t, s, "main", store.GenCommit, map[string]string{"new": "new content"})
	storetest.MustCreate(t, s, "main", "", g0, store.ID{})
	_, err := s.CompareAndAppend("main", g0, store.HeadEntry{Gen: g1, Kind: store.GenCommit}, nil)
	mustOK(t, err)
	freed, err := s.GC(nil)
	mustOK(t, err)
	if freed != 0 {
		t.Fatalf("GC freed %d bytes of reachable history", freed)
	}
	// Undo must still be able to go back to g0.
	if _, err := s.ReadBlob(store.BlobID([]byte("old content"))); err != nil {
		t.Fatalf("old head's blob: %v", err)
	}
	// Deleting the workspace makes all of it garbage.
	mustOK(t, s.DeleteWorkspace("main"))
	freed, err = s.GC(nil)
	mustOK(t, err)
	if want := int64(len("old content") + len("new content")); freed != want {
		t.Fatalf("freed %d, want %d", freed, want)
	}
	ps, err := s.Check()
	mustOK(t, err)
	if len(ps) != 0 {
		t.Fatalf("problems after GC: %v", ps)
	}
}

func TestChildrenSorted(t *testing.T) {
	s := storetest.MustOpen(t)
	g := storetest.PutGen(t, s, "p", store.GenCreate, nil)
	storetest.MustCreate(t, s, "p", "", g, store.ID{})
	// "p" must not pick up children of "p.x" or "pq" through prefixes.
	storetest.MustCreate(t, s, "pq", "", g, store.ID{})
	storetest.MustCreate(t, s, "pq-kid", "pq", g, g)
	for _, n := range []string{"z", "a", "m"} {
		storetest.MustCreate(t, s, n, "p", g, g)
	}
	kids, err := s.Children("p")
	mustOK(t, err)
	if !slices.Equal(kids, []string{"a", "m", "z"}) {
		t.Fatalf("Children = %v", kids)
	}
}

func TestConcurrentSameBlob(t *testing.T) {
	s := storetest.MustOpen(t)
	const n = 16
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			_, err := s.WriteBlobBytes([]byte("same content"))
			errs <- err
		}()
	}
	close(start)
	for range n {
		mustOK(t, <-errs)
	}
	got, err := s.ReadBlob(store.BlobID([]byte("same content")))
	mustOK(t, err)
	if string(got) != "same content" {
		t.Fatalf("content %q", got)
	}
	assertEmptyTmp(t, s)
}

func TestConcurrentCreateOfOneStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			s, err := store.Open(dir, store.Options{NoSync: true, LockTimeout: 10 * time.Second})
			if err == nil {
				_, err = s.WriteBlobBytes([]byte("x"))
				if cerr := s.Close(); err == nil {
					err = cerr
				}
			}
			errs <- err
		}()
	}
	for range n {
		mustOK(t, <-errs)
	}
	s := storetest.MustOpenDir(t, dir, store.Options{NoSync: true})
	if ok, _ := s.HasBlob(store.BlobID([]byte("x"))); !ok {
		t.Fatal("blob lost")
	}
}

func TestCrashAfterRenameKeepsValidObject(t *testing.T) {
	s := storetest.MustOpen(t)
	prev := store.SetFailpoint(func(name string) error {
		if name == "blob.before-dirsync" {
			return syscall.EIO
		}
		return nil
	})
	_, err := s.WriteBlobBytes([]byte("renamed"))
	store.SetFailpoint(prev)
	wantIs(t, err, syscall.EIO)
	// The object is complete (it was synced before the rename); a retry
	// deduplicates and succeeds.
	id, err := s.WriteBlobBytes([]byte("renamed"))
	mustOK(t, err)
	if _, err := s.ReadBlob(id); err != nil {
		t.Fatal(err)
	}
}

// TestGCConcurrentWithCommits runs GC in a loop while writers build and
// publish new generations under HoldGC: nothing a head reaches may be lost.
func TestGCConcurrentWithCommits(t *testing.T) {
	s := storetest.MustOpen(t)
	g0 := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "0"})
	storetest.MustCreate(t, s, "main", "", g0, store.ID{})
	done := make(chan struct{})
	gcErr := make(chan error, 1)
	go func() {
		defer close(gcErr)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.GC(nil); err != nil {
				gcErr <- err
				return
			}
		}
	}()
	head := g0
	for i := range 30 {
		release := s.HoldGC()
		// Garbage from the previous round is fair game; this round's
		// objects are protected until the append.
		g := storetest.PutGen(t, s, "main", store.GenCommit, map[string]string{"a": string(rune('a' + i)), "d/x": strings.Repeat("y", i)})
		_, err := s.CompareAndAppend("main", head, store.HeadEntry{Gen: g, Kind: store.GenCommit}, nil)
		release()
		mustOK(t, err)
		head = g
		// Also write garbage the GC should be free to collect.
		_, err = s.WriteBlobBytes([]byte(strings.Repeat("garbage", i+1)))
		mustOK(t, err)
	}
	close(done)
	mustOK(t, <-gcErr)
	ps, err := s.Check()
	mustOK(t, err)
	if len(ps) != 0 {
		t.Fatalf("problems: %v", ps)
	}
}

// TestPublishGenerationIsOneStep: the generation and its head entry commit
// together; a failed append (a crash before commit, a moved head) leaves
// neither behind.
func TestPublishGenerationIsOneStep(t *testing.T) {
	s := storetest.MustOpen(t)
	g0 := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "0"})
	storetest.MustCreate(t, s, "main", "", g0, store.ID{})
	root := storetest.PutFiles(t, s, map[string]string{"a": "1"})
	gen := &store.Generation{Root: root, Parents: []store.ID{g0}, Workspace: "main", Kind: store.GenCommit, Operation: "op", Time: s.Now()}
	entry := store.HeadEntry{Kind: store.GenCommit, Operation: "op"}

	crash := errors.New("crash")
	prev := store.SetFailpoint(func(name string) error {
		if name == "head.append" {
			return crash
		}
		return nil
	})
	_, _, err := s.PublishGeneration(gen, "main", g0, entry, nil)
	store.SetFailpoint(prev)
	wantIs(t, err, crash)
	enc, err := gen.Encode()
	mustOK(t, err)
	id := store.GenerationID(enc)
	w, err := s.GetWorkspace("main")
	mustOK(t, err)
	if w.Head != g0 {
		t.Fatalf("a failed publish moved the head to %s", w.Head.Short())
	}
	if ok, err := s.HasGeneration(id); err != nil || ok {
		t.Fatalf("a failed publish stored its generation (%v, %v)", ok, err)
	}

	_, _, err = s.PublishGeneration(gen, "main", root, entry, nil) // wrong expected head
	wantIs(t, err, store.ErrHeadMoved)
	if ok, err := s.HasGeneration(id); err != nil || ok {
		t.Fatalf("a publish against a moved head stored its generation (%v, %v)", ok, err)
	}

	got, w, err := s.PublishGeneration(gen, "main", g0, entry, nil)
	mustOK(t, err)
	if got != id || w.Head != id {
		t.Fatalf("published %s, head %s; want %s", got.Short(), w.Head.Short(), id.Short())
	}
	log, err := s.HeadLog("main", 0)
	mustOK(t, err)
	if len(log) != 2 || log[0].Gen != id || log[0].Operation != "op" {
		t.Fatalf("head log after publish: %+v", log)
	}
}

// TestGetTreeCopiesAndGC: GetTree hands out a copy each time (a caller
// changing its tree changes no one else's, cached or not), and a tree
// that GC swept reads as missing afterwards although it was read (and
// cached) before.
func TestGetTreeCopiesAndGC(t *testing.T) {
	s := storetest.MustOpen(t)
	root := storetest.PutFiles(t, s, map[string]string{"a": "1", "b": "2"})
	t1, err := s.GetTree(root)
	mustOK(t, err)
	t1.Entries[0].Name = "changed"
	t1.Entries = t1.Entries[:1]
	for range 2 {
		t2, err := s.GetTree(root)
		mustOK(t, err)
		if len(t2.Entries) != 2 || t2.Entries[0].Name != "a" {
			t.Fatalf("GetTree after a caller changed its copy: %+v", t2.Entries)
		}
		t2.Entries[1].Name = "changed too"
	}
	// Nothing references root: GC sweeps it.
	if _, err := s.GC(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTree(root); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTree of a swept tree: %v, want ErrNotFound", err)
	}
}

// meta.db grows in sparse 16 MiB steps: losing the unwritten tail loses
// nothing and the store opens; losing a page the meta page counts is
// corruption, reported at open before bbolt touches the missing page.
func TestMetaTruncatedTailAndPages(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	gen := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "1"})
	storetest.MustCreate(t, s, "main", "", gen, store.ID{})
	mustOK(t, s.Close())
	path := filepath.Join(dir, "meta.db")
	fi, err := os.Stat(path)
	mustOK(t, err)
	written := fi.Sys().(*syscall.Stat_t).Blocks * 512
	if written >= fi.Size() {
		t.Skipf("meta.db is not sparse here (%d bytes written of %d)", written, fi.Size())
	}
	mustOK(t, os.Truncate(path, written))
	s = openDir(t, dir, store.Options{})
	ws, err := s.ListWorkspaces()
	mustOK(t, err)
	if len(ws) != 1 || ws[0].Name != "main" {
		t.Fatalf("after losing the unwritten tail: workspaces %v", ws)
	}
	mustOK(t, s.Close())
	page := int64(os.Getpagesize())
	fi, err = os.Stat(path)
	mustOK(t, err)
	mustOK(t, os.Truncate(path, min(fi.Size(), written)-page))
	_, err = store.Open(dir, store.Options{LockTimeout: 100 * time.Millisecond})
	wantIs(t, err, store.ErrCorrupt)
}

// TestStoreIsPrivate: a new store's directory is 0700 and its objects
// 0400; an existing store open to others is tightened at open, with a
// warning, and a private one is left alone silently.
func TestStoreIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	s := openDir(t, dir, store.Options{})
	id, err := s.WriteBlobBytes([]byte("secret"))
	mustOK(t, err)
	mustOK(t, s.Close())
	for p, want := range map[string]os.FileMode{dir: 0o700, filepath.Dir(s.BlobPath(id)): 0o700, s.BlobPath(id): 0o400} {
		fi, err := os.Stat(p)
		mustOK(t, err)
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", p, fi.Mode().Perm(), want)
		}
	}
	mustOK(t, os.Chmod(dir, 0o755)) // as stores were made before
	var warned []string
	s = openDir(t, dir, store.Options{Warn: func(m string) { warned = append(warned, m) }})
	mustOK(t, s.Close())
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 || len(warned) != 1 || !strings.Contains(warned[0], "made it private") {
		t.Fatalf("reopen of a 0755 store: mode %04o, warnings %q", fi.Mode().Perm(), warned)
	}
	warned = nil
	s = openDir(t, dir, store.Options{Warn: func(m string) { warned = append(warned, m) }})
	mustOK(t, s.Close())
	if len(warned) != 0 {
		t.Fatalf("a private store warned: %q", warned)
	}
}
