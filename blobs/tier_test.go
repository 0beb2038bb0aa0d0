package blobs_test

import (
	"errors"
	"os"
	"sync/atomic"
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

// Many objects uploaded to a directory remote go in one of its batches:
// the remote's per-object durable steps are not taken, and none counts as
// uploaded (or is visible in the remote) until the batch's commit
// succeeded. A failed commit is ErrUnavailable and the next Upload sends
// the objects again.
func TestTierUploadBatchesToDir(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	var commits atomic.Int32
	remote, _ := newDir(t, func(step string) error {
		switch {
		case step == "batch.before-sync":
			commits.Add(1)
		case step == "batch.before-rename" && failing.Load():
			return errors.New("injected: the shared directory's file system failed")
		}
		return nil
	})
	local, _ := newDir(t, nil)
	tier := blobs.NewTier(local, remote, blobs.TierOptions{})
	var ids []blobs.ID
	for i := range 40 {
		id, err := local.PutBytes([]byte{byte(i), 'x', byte(i >> 8)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := tier.Upload(ids...); !errors.Is(err, blobs.ErrUnavailable) {
		t.Fatalf("upload with a failing commit: %v, want ErrUnavailable", err)
	}
	for _, id := range ids {
		if _, err := remote.Stat(id); !errors.Is(err, blobs.ErrNotFound) {
			t.Fatalf("object %s visible in the remote after a failed batch: %v", id.Short(), err)
		}
	}
	failing.Store(false)
	if err := tier.Upload(ids...); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := remote.Stat(id); err != nil {
			t.Fatalf("object %s not in the remote: %v", id.Short(), err)
		}
	}
	if n := commits.Load(); n != 2 {
		t.Errorf("the remote saw %d batch commits for two Uploads of 40 objects, want 2 (one each)", n)
	}
}
