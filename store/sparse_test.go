package store_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// makeSparse writes a file of size bytes that is a hole but for data at
// the given offsets, and returns its logical content's data pieces.
func makeSparse(t *testing.T, path string, size int64, data map[int64][]byte) {
	t.Helper()
	f, err := os.Create(path)
	mustOK(t, err)
	defer f.Close()
	mustOK(t, f.Truncate(size))
	for off, b := range data {
		_, err := f.WriteAt(b, off)
		mustOK(t, err)
	}
}

func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	mustOK(t, syscall.Stat(path, &st))
	return st.Blocks * 512
}

// A file with holes is stored sparse: the object file has the holes (a
// 1 GiB file with 1 MiB of data takes about 1 MiB), its ID is the sparse
// ID of the logical content, every read path verifies it, and CopyBlob
// recreates the holes. A copy of the object made dense still verifies; a
// changed byte does not.
func TestWriteBlobFileSparse(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, store.Options{})
	const size = 256 << 20
	mid := bytes.Repeat([]byte("sparse!"), (1<<20)/7)
	src := filepath.Join(t.TempDir(), "src")
	makeSparse(t, src, size, map[int64][]byte{size / 2: mid, 5: []byte("head")})

	id, n, err := s.WriteBlobFile(src)
	mustOK(t, err)
	if n != size {
		t.Fatalf("length %d, want %d", n, size)
	}
	want, _, err := store.FileBlobID(src)
	mustOK(t, err)
	if id != want {
		t.Fatalf("WriteBlobFile ID %s, FileBlobID %s", id.Short(), want.Short())
	}
	obj := s.BlobPath(id)
	if a := allocated(t, obj); a > 2<<20 {
		t.Fatalf("object of a 256 MiB file with 1 MiB of data takes %d bytes", a)
	}
	if sz, err := s.BlobSize(id); err != nil || sz != size {
		t.Fatalf("BlobSize = %d, %v", sz, err)
	}
	mustOK(t, s.VerifyBlob(id))
	ps, err := s.Check()
	mustOK(t, err)
	if len(ps) != 0 {
		t.Fatalf("fsck: %v", ps)
	}

	// The streaming reader gives the logical content and verifies it.
	rc, err := s.OpenBlob(id)
	mustOK(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	mustOK(t, err)
	if len(got) != size || !bytes.Equal(got[size/2:size/2+int64(len(mid))], mid) || string(got[5:9]) != "head" || got[size-1] != 0 {
		t.Fatal("OpenBlob content differs")
	}

	// Export-style copy: holes kept, content equal.
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	mustOK(t, err)
	cn, err := s.CopyBlob(id, f)
	mustOK(t, err)
	mustOK(t, f.Close())
	if cn != size {
		t.Fatalf("CopyBlob copied %d", cn)
	}
	if a := allocated(t, out); a > 2<<20 {
		t.Fatalf("copy takes %d bytes", a)
	}
	if id2, _, err := store.FileBlobID(out); err != nil || id2 != id {
		t.Fatalf("copy hashes to %s, %v", id2.Short(), err)
	}

	// A dense copy of the object file still verifies (fresh process state:
	// a new Store), through the fallback to the other encoding.
	mustOK(t, os.Chmod(obj, 0o600))
	small := filepath.Join(t.TempDir(), "small")
	makeSparse(t, small, 3<<20, map[int64][]byte{1 << 20: []byte("x")})
	sid, _, err := s.WriteBlobFile(small)
	mustOK(t, err)
	sobj := s.BlobPath(sid)
	b, err := os.ReadFile(sobj)
	mustOK(t, err)
	mustOK(t, os.Chmod(sobj, 0o600))
	mustOK(t, os.WriteFile(sobj, b, 0o400)) // rewritten dense
	if a := allocated(t, sobj); a < 3<<20 {
		t.Fatalf("dense rewrite takes %d bytes", a)
	}
	mustOK(t, s.Close())
	s2 := openDir(t, dir, store.Options{ReadOnly: true})
	mustOK(t, s2.VerifyBlob(sid))
	if rb, err := s2.ReadBlob(sid); err != nil || !bytes.Equal(rb, b) {
		t.Fatalf("ReadBlob of the dense copy: %v", err)
	}

	// A changed byte in a hole is corruption.
	fw, err := os.OpenFile(obj, os.O_RDWR, 0)
	mustOK(t, err)
	_, err = fw.WriteAt([]byte{1}, 1<<20)
	mustOK(t, err)
	mustOK(t, fw.Close())
	mustOK(t, s2.Close())
	s3 := openDir(t, dir, store.Options{ReadOnly: true})
	defer s3.Close()
	wantIs(t, s3.VerifyBlob(id), store.ErrCorrupt)
	ps, err = s3.Check()
	mustOK(t, err)
	if !hasProblem(ps, store.ProblemCorruptBlob, id.String()) {
		t.Fatalf("Check did not name the corrupt sparse blob: %v", ps)
	}
}
