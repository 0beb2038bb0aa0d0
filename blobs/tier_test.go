package blobs_test

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/blobs"
)

// A fetch verifies what the remote sends: content that does not hash to
// the ID is ErrCorrupt and leaves nothing in the cache; sound content is
// installed and served.
func TestTierFetchVerifies(t *testing.T) {
	remote := blobs.NewMem()
	id, err := remote.PutBytes([]byte("the real content"))
	if err != nil {
		t.Fatal(err)
	}
	local, _ := newDir(t, nil)
	tier := blobs.NewTier(local, remote, blobs.TierOptions{})

	remote.Corrupt(id, []byte("something else!!"))
	release, err := tier.Fetch(id)
	release()
	if !errors.Is(err, blobs.ErrCorrupt) {
		t.Fatalf("fetch of corrupt content: %v, want ErrCorrupt", err)
	}
	if _, err := os.Lstat(local.Path(id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("corrupt content installed: %v", err)
	}

	remote.Corrupt(id, []byte("the real content"))
	release, err = tier.Fetch(id)
	release()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := local.Read(id); err != nil || string(b) != "the real content" {
		t.Fatalf("after fetch: %q, %v", b, err)
	}
	if _, err := tier.Fetch(blobs.Sum([]byte("absent"))); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("fetch of an absent object: %v", err)
	}
}

// A sparse object (stored with holes, its ID in the sparse encoding)
// goes to a shared directory and comes back into another cache under the
// same ID.
func TestTierSparseRoundTrip(t *testing.T) {
	remote, err := blobs.OpenShared(t.TempDir(), blobs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir() + "/sparse"
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data after a hole"), 4<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	a, _ := newDir(t, nil)
	id, _, err := a.PutFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if id == blobs.Sum(mustRead(t, src)) {
		t.Skip("the file system keeps no holes here")
	}
	if err := blobs.NewTier(a, remote, blobs.TierOptions{}).Upload(id); err != nil {
		t.Fatal(err)
	}
	b, _ := newDir(t, nil)
	release, err := blobs.NewTier(b, remote, blobs.TierOptions{}).Fetch(id)
	release()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Verify(id); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(b.Path(id), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 >= 1<<20 {
		t.Fatalf("the fetched sparse object takes %d bytes on disk: its holes were written", st.Blocks*512)
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
