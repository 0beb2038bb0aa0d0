package blobs_test

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/acyclicfs/acyclicfs/blobs"
)

// TestReadVerified: the one-pass read of a small object returns its
// content only when the file holds exactly that content, reports
// corruption as OpenFile does (also a correct prefix followed by more
// bytes), and gives nil without error for a length other than asked.
func TestReadVerified(t *testing.T) {
	content := []byte("package main\n\nfunc main() {}\n")
	for _, tc := range []struct {
		name    string
		file    []byte // the object file's bytes; nil: as stored
		size    int64
		want    []byte
		corrupt bool
	}{
		{name: "intact", size: int64(len(content)), want: content},
		{name: "other length asked", size: int64(len(content)) - 1},
		{name: "flipped byte", file: append([]byte("P"), content[1:]...), size: int64(len(content)), corrupt: true},
		{name: "appended byte", file: append(append([]byte{}, content...), 'x'), size: int64(len(content)), corrupt: true},
		{name: "truncated", file: content[:10], size: int64(len(content)), corrupt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newDir(t, nil)
			id, err := d.PutBytes(content)
			if err != nil {
				t.Fatal(err)
			}
			if tc.file != nil {
				p := d.Path(id)
				if err := os.Chmod(p, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, tc.file, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := d.ReadVerified(id, tc.size)
			if tc.corrupt {
				if !errors.Is(err, blobs.ErrCorrupt) {
					t.Fatalf("ReadVerified of a corrupt object: %q, %v; want ErrCorrupt", got, err)
				}
				if _, err := d.OpenFile(id); !errors.Is(err, blobs.ErrCorrupt) {
					t.Fatalf("OpenFile after a failed ReadVerified: %v; want ErrCorrupt (nothing cached)", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("ReadVerified: %q, %v; want %q", got, err, tc.want)
			}
			// Verified now, once per process: OpenFile does not hash again.
			f, err := d.OpenFile(id)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		})
	}
}

// TestReadVerifiedSparse: an object stored in the sparse encoding (its
// ID is not the dense sum of its bytes) is still verified and read.
func TestReadVerifiedSparse(t *testing.T) {
	d, _ := newDir(t, nil)
	content := make([]byte, 1<<20)
	copy(content[len(content)-5:], "tail\n")
	id, _, err := d.Put(bytes.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.ReadVerified(id, int64(len(content)))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("ReadVerified of a (possibly sparse) object: %d bytes, %v", len(got), err)
	}
}
