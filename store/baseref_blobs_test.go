package store_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// TestBlobReadsThroughBaseRefs: every blob read falls back from the blob
// plane to base references the same way (viaRefs): an unresolved file or
// symlink ref reads its path while the fingerprint holds, a resolved one
// its resolution whatever the directory holds, a changed unresolved one
// is ErrBaseChanged, and a directory ref is no blob.
func TestBlobReadsThroughBaseRefs(t *testing.T) {
	dir := baseDir(t)
	s := openDir(t, t.TempDir(), store.Options{})
	defer s.Close()
	_, root, err := s.CreateBase(dir)
	mustOK(t, err)
	tr, err := s.GetTree(root)
	mustOK(t, err)
	a, link, sub := entry(t, tr, "a.txt").ID, entry(t, tr, "link").ID, entry(t, tr, "sub").ID

	// reads returns what each read path gives for id, or the first error.
	reads := func(id store.ID) (string, error) {
		b, err := s.ReadBlob(id)
		if err != nil {
			return "", err
		}
		rc, err := s.OpenBlob(id)
		if err != nil {
			return "", err
		}
		sb, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return "", err
		}
		f, err := s.OpenBlobFile(id)
		if err != nil {
			return "", err
		}
		fb, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return "", err
		}
		dst, err := os.Create(filepath.Join(t.TempDir(), "copy"))
		mustOK(t, err)
		defer dst.Close()
		if _, err := s.CopyBlob(id, dst); err != nil {
			return "", err
		}
		cb, err := os.ReadFile(dst.Name())
		mustOK(t, err)
		n, err := s.BlobSize(id)
		if err != nil {
			return "", err
		}
		if err := s.VerifyBlob(id); err != nil {
			return "", err
		}
		if ok, err := s.HasBlob(id); err != nil || !ok {
			t.Fatalf("HasBlob %s: %v %v after every read succeeded", id.Short(), ok, err)
		}
		if string(sb) != string(b) || string(fb) != string(b) || string(cb) != string(b) || n != int64(len(b)) {
			t.Fatalf("read paths disagree: %q %q %q %q size %d", b, sb, fb, cb, n)
		}
		return string(b), nil
	}

	if got, err := reads(a); err != nil || got != "hello" {
		t.Fatalf("unresolved file ref: %q %v", got, err)
	}
	if got, err := reads(link); err != nil || got != "a.txt" {
		t.Fatalf("unresolved symlink ref: %q %v", got, err)
	}

	// Resolved, a ref reads its resolution after the file changed.
	old, err := s.WriteBlobBytes([]byte("hello"))
	mustOK(t, err)
	mustOK(t, s.Resolve(a, old))
	mustOK(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("rewritten"), 0o644))
	if got, err := reads(a); err != nil || got != "hello" {
		t.Fatalf("resolved file ref after a rewrite: %q %v", got, err)
	}

	// Unresolved and changed: every path says so, HasBlob says absent.
	mustOK(t, os.Remove(filepath.Join(dir, "link")))
	mustOK(t, os.Symlink("elsewhere", filepath.Join(dir, "link")))
	if _, err := reads(link); !errors.Is(err, store.ErrBaseChanged) {
		t.Fatalf("changed symlink ref: %v, want ErrBaseChanged", err)
	}
	for name, f := range map[string]func() error{
		"OpenBlob":     func() error { _, err := s.OpenBlob(link); return err },
		"OpenBlobFile": func() error { _, err := s.OpenBlobFile(link); return err },
		"BlobSize":     func() error { _, err := s.BlobSize(link); return err },
		"VerifyBlob":   func() error { return s.VerifyBlob(link) },
		"CopyBlob":     func() error { _, err := s.CopyBlob(link, nil); return err },
	} {
		if err := f(); !errors.Is(err, store.ErrBaseChanged) {
			t.Fatalf("%s of a changed ref: %v, want ErrBaseChanged", name, err)
		}
	}
	if ok, err := s.HasBlob(link); ok || err != nil {
		t.Fatalf("HasBlob of a changed ref: %v %v, want false", ok, err)
	}

	// A directory ref and an unknown ID are no blobs.
	for _, id := range []store.ID{sub, store.BlobID([]byte("never stored"))} {
		if _, err := s.ReadBlob(id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("ReadBlob %s: %v, want ErrNotFound", id.Short(), err)
		}
		if ok, err := s.HasBlob(id); ok || err != nil {
			t.Fatalf("HasBlob %s: %v %v, want false", id.Short(), ok, err)
		}
	}
}
