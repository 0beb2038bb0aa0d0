// Package blobtest is the conformance suite of the blob plane: every
// blobs.Store implementation must pass Run.
package blobtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/acyclicfs/acyclicfs/blobs"
)

// Harness makes planes for the suite.
type Harness struct {
	// New returns an empty plane.
	New func(t *testing.T) blobs.Store
	// Corrupt replaces object id's stored content by b, keeping its ID (as
	// a disk error or a stray write would). Nil skips the corruption test.
	Corrupt func(t *testing.T, s blobs.Store, id blobs.ID, b []byte)
	// Crashing returns an empty plane whose writes stop at the durable step
	// named by crashAt (as a process killed there would; "" never stops),
	// and reopen, which returns the plane as the next process finds it.
	// Nil skips the crash tests.
	Crashing func(t *testing.T) (s blobs.Store, crashAt func(step string), reopen func() blobs.Store)
}

// Run runs the suite against h.
func Run(t *testing.T, h Harness) {
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, h) })
	t.Run("IDIsContentHash", func(t *testing.T) { testIDIsContentHash(t, h) })
	t.Run("IdempotentPut", func(t *testing.T) { testIdempotentPut(t, h) })
	t.Run("ConcurrentPuts", func(t *testing.T) { testConcurrentPuts(t, h) })
	t.Run("Missing", func(t *testing.T) { testMissing(t, h) })
	t.Run("ListSeesEveryPut", func(t *testing.T) { testList(t, h) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, h) })
	t.Run("Batch", func(t *testing.T) { testBatch(t, h) })
	if h.Corrupt != nil {
		t.Run("VerifyDetectsCorruption", func(t *testing.T) { testCorruption(t, h) })
	}
	if h.Crashing != nil {
		t.Run("CrashBeforeBatchPublish", func(t *testing.T) { testCrashBeforePublish(t, h) })
		t.Run("CrashMidBatchPublish", func(t *testing.T) { testCrashMidPublish(t, h) })
		t.Run("CrashMidPut", func(t *testing.T) { testCrashMidPut(t, h) })
	}
}

func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func put3(t *testing.T, put func(io.Reader) (blobs.ID, int64, error), b []byte) blobs.ID {
	t.Helper()
	id, n, err := put(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(b)) {
		t.Fatalf("put %d bytes: length %d", len(b), n)
	}
	return id
}

// wantContent checks every read path gives b for id.
func wantContent(t *testing.T, s blobs.Store, id blobs.ID, b []byte) {
	t.Helper()
	got, err := s.Read(id)
	if err != nil {
		t.Fatalf("read %s: %v", id.Short(), err)
	}
	if !bytes.Equal(got, b) {
		t.Fatalf("read %s: %d bytes, want %d", id.Short(), len(got), len(b))
	}
	rc, err := s.Open(id)
	if err != nil {
		t.Fatalf("open %s: %v", id.Short(), err)
	}
	got, err = io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatalf("stream %s: %v", id.Short(), err)
	}
	if !bytes.Equal(got, b) {
		t.Fatalf("stream %s: %d bytes, want %d", id.Short(), len(got), len(b))
	}
	in, err := s.Stat(id)
	if err != nil {
		t.Fatalf("stat %s: %v", id.Short(), err)
	}
	if in.Size != int64(len(b)) || in.ID != id {
		t.Fatalf("stat %s: %+v, want size %d", id.Short(), in, len(b))
	}
}

func wantAbsent(t *testing.T, s blobs.Store, id blobs.ID) {
	t.Helper()
	if _, err := s.Stat(id); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("stat %s: %v, want ErrNotFound", id.Short(), err)
	}
	if _, err := s.Read(id); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("read %s: %v, want ErrNotFound", id.Short(), err)
	}
	if _, err := s.Open(id); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("open %s: %v, want ErrNotFound", id.Short(), err)
	}
}

func listed(t *testing.T, s blobs.Store) map[blobs.ID]int64 {
	t.Helper()
	out := map[blobs.ID]int64{}
	err := s.List(func(in blobs.Info) error {
		if _, dup := out[in.ID]; dup {
			return fmt.Errorf("object %s listed twice", in.ID.Short())
		}
		out[in.ID] = in.Size
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func content(i, n int) []byte {
	b := bytes.Repeat([]byte{byte(i)}, n)
	copy(b, fmt.Sprintf("object %d", i))
	return b
}

func writeFile(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func testRoundTrip(t *testing.T, h Harness) {
	s := h.New(t)
	for _, n := range []int{0, 1, 4095, 4096, 300 << 10} {
		b := content(n%251, n)
		id := must(s.PutBytes(b))(t)
		wantContent(t, s, id, b)
		if got := put3(t, s.Put, b); got != id {
			t.Fatalf("Put and PutBytes of %d bytes: %s and %s", n, got.Short(), id.Short())
		}
		fid, fn, err := s.PutFile(writeFile(t, b))
		if err != nil || fid != id || fn != int64(n) {
			t.Fatalf("PutFile of %d bytes: %s %d %v, want %s", n, fid.Short(), fn, err, id.Short())
		}
	}
}

func testIDIsContentHash(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(7, 10000)
	id := must(s.PutBytes(b))(t)
	if want := blobs.Sum(b); id != want {
		t.Fatalf("id %s, want the content hash %s", id.Short(), want.Short())
	}
	p := writeFile(t, b)
	fid, _, err := blobs.FileSum(p)
	if err != nil || fid != id {
		t.Fatalf("FileSum %s %v, want %s", fid.Short(), err, id.Short())
	}
	if other := must(s.PutBytes(content(8, 10000)))(t); other == id {
		t.Fatal("two contents, one id")
	}
}

func testIdempotentPut(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(3, 5000)
	a := must(s.PutBytes(b))(t)
	c := must(s.PutBytes(b))(t)
	if a != c {
		t.Fatalf("ids %s and %s for one content", a.Short(), c.Short())
	}
	if l := listed(t, s); len(l) != 1 || l[a] != int64(len(b)) {
		t.Fatalf("listed %v, want one object of %d bytes", l, len(b))
	}
	wantContent(t, s, a, b)
}

func testConcurrentPuts(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(5, 64<<10)
	const n = 16
	ids := make([]blobs.ID, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if i%2 == 0 {
				ids[i], errs[i] = s.PutBytes(b)
				return
			}
			bt := s.NewBatch()
			ids[i], errs[i] = bt.PutBytes(b)
			if errs[i] == nil {
				errs[i] = bt.Commit()
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("put %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("put %d: id %s, want %s", i, ids[i].Short(), ids[0].Short())
		}
	}
	if l := listed(t, s); len(l) != 1 {
		t.Fatalf("listed %d objects, want 1", len(l))
	}
	wantContent(t, s, ids[0], b)
}

func testMissing(t *testing.T, h Harness) {
	s := h.New(t)
	wantAbsent(t, s, blobs.Sum([]byte("never stored")))
}

func testList(t *testing.T, h Harness) {
	s := h.New(t)
	want := map[blobs.ID]int64{}
	for i := range 40 {
		b := content(i, 100+i)
		want[must(s.PutBytes(b))(t)] = int64(len(b))
	}
	bt := s.NewBatch()
	for i := 40; i < 80; i++ {
		b := content(i, 100+i)
		want[must(bt.PutBytes(b))(t)] = int64(len(b))
	}
	if err := bt.Commit(); err != nil {
		t.Fatal(err)
	}
	got := listed(t, s)
	if len(got) != len(want) {
		t.Fatalf("listed %d objects, want %d", len(got), len(want))
	}
	for id, n := range want {
		if got[id] != n {
			t.Fatalf("object %s listed with %d bytes, want %d", id.Short(), got[id], n)
		}
	}
}

func testDelete(t *testing.T, h Harness) {
	s := h.New(t)
	keep := must(s.PutBytes(content(1, 10)))(t)
	gone := must(s.PutBytes(content(2, 10)))(t)
	if err := s.Delete(gone); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, s, gone)
	wantContent(t, s, keep, content(1, 10))
	if err := s.Delete(gone); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if l := listed(t, s); len(l) != 1 {
		t.Fatalf("listed %d objects after delete, want 1", len(l))
	}
	// Stored again after a delete, it is back.
	if again := must(s.PutBytes(content(2, 10)))(t); again != gone {
		t.Fatal("id changed")
	}
	wantContent(t, s, gone, content(2, 10))
}

func testBatch(t *testing.T, h Harness) {
	s := h.New(t)
	bt := s.NewBatch()
	var ids []blobs.ID
	for i := range 5 {
		ids = append(ids, must(bt.PutBytes(content(i, 2000)))(t))
	}
	ids = append(ids, put3(t, bt.Put, content(9, 3000)))
	fid, _, err := bt.PutFile(writeFile(t, content(10, 4000)))
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, fid)
	if dup := must(bt.PutBytes(content(0, 2000)))(t); dup != ids[0] {
		t.Fatal("a content put twice in a batch has two ids")
	}
	for _, id := range ids {
		wantAbsent(t, s, id) // nothing visible before Commit
	}
	if err := bt.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids[:5] {
		wantContent(t, s, id, content(i, 2000))
	}
	wantContent(t, s, ids[5], content(9, 3000))
	wantContent(t, s, ids[6], content(10, 4000))
	// Usable again; Abort drops what is pending.
	gone := must(bt.PutBytes(content(20, 100)))(t)
	bt.Abort()
	if err := bt.Commit(); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, s, gone)
	if l := listed(t, s); len(l) != len(ids) {
		t.Fatalf("listed %d objects, want %d", len(l), len(ids))
	}
}

func testCorruption(t *testing.T, h Harness) {
	for _, n := range []int{100, 200 << 10} {
		s := h.New(t)
		b := content(4, n)
		id := must(s.PutBytes(b))(t)
		bad := bytes.Clone(b)
		bad[len(bad)/2] ^= 0xff
		h.Corrupt(t, s, id, bad)
		if _, err := s.Read(id); !errors.Is(err, blobs.ErrCorrupt) {
			t.Fatalf("read of a corrupt object (%d bytes): %v, want ErrCorrupt", n, err)
		}
		rc, err := s.Open(id)
		if err == nil {
			_, err = io.ReadAll(rc)
			rc.Close()
		}
		if !errors.Is(err, blobs.ErrCorrupt) {
			t.Fatalf("stream of a corrupt object (%d bytes): %v, want ErrCorrupt", n, err)
		}
	}
}

// testCrashBeforePublish: a process dies after a batch's data was synced,
// before any object was published: the next process sees none of them,
// and stores them again normally.
func testCrashBeforePublish(t *testing.T, h Harness) {
	s, crashAt, reopen := h.Crashing(t)
	crashAt("batch.before-rename")
	bt := s.NewBatch()
	var ids []blobs.ID
	for i := range 10 {
		ids = append(ids, must(bt.PutBytes(content(i, 1000)))(t))
	}
	if err := bt.Commit(); err == nil {
		t.Fatal("commit went through the crash point")
	}
	s = reopen()
	for _, id := range ids {
		wantAbsent(t, s, id)
	}
	if l := listed(t, s); len(l) != 0 {
		t.Fatalf("listed %d objects after the crash, want none", len(l))
	}
	crashAt("")
	bt = s.NewBatch()
	for i := range 10 {
		must(bt.PutBytes(content(i, 1000)))(t)
	}
	if err := bt.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		wantContent(t, s, id, content(i, 1000))
	}
}

// testCrashMidPublish: a process dies while publishing a batch: whatever
// the next process sees is whole objects of the batch, each complete and
// verified (the metadata that names them is written only after Commit, so
// a reader never reaches a partly published batch).
func testCrashMidPublish(t *testing.T, h Harness) {
	s, crashAt, reopen := h.Crashing(t)
	bt := s.NewBatch()
	want := map[blobs.ID][]byte{}
	for i := range 10 {
		b := content(i, 1000+i)
		want[must(bt.PutBytes(b))(t)] = b
	}
	crashAt("blob.before-dirsync")
	if err := bt.Commit(); err == nil {
		t.Fatal("commit went through the crash point")
	}
	s = reopen()
	for id := range listed(t, s) {
		b, ok := want[id]
		if !ok {
			t.Fatalf("object %s after the crash is no batch object", id.Short())
		}
		wantContent(t, s, id, b)
	}
}

// testCrashMidPut: a process dies between a single put's steps: the
// object is absent or whole.
func testCrashMidPut(t *testing.T, h Harness) {
	for i, step := range []string{"blob.before-fsync", "blob.before-rename", "blob.before-dirsync"} {
		s, crashAt, reopen := h.Crashing(t)
		b := content(i, 5000)
		crashAt(step)
		if _, err := s.PutBytes(b); err == nil {
			t.Fatalf("put went through the crash point %s", step)
		}
		s = reopen()
		if _, err := s.Stat(blobs.Sum(b)); err == nil {
			wantContent(t, s, blobs.Sum(b), b)
		} else {
			wantAbsent(t, s, blobs.Sum(b))
		}
		if l := listed(t, s); len(l) > 1 {
			t.Fatalf("crash at %s: %d objects", step, len(l))
		}
	}
}
