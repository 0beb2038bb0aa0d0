package corestate

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

type lineage struct {
	Workspace string `json:"workspace"`
	Parent    string `json:"parent,omitempty"`
	Ready     bool   `json:"ready"`
}

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Check(); err != nil {
			t.Errorf("Check at cleanup: %v", err)
		}
	})
	return s
}

func mustCAS(t *testing.T, s *Store, family, key string, rev uint64, v any) uint64 {
	t.Helper()
	n, err := s.CompareAndSwap(family, key, rev, v)
	if err != nil {
		t.Fatalf("CompareAndSwap(%s/%q, %d): %v", family, key, rev, err)
	}
	return n
}

func mustLoad(t *testing.T, s *Store, family, key string) (lineage, uint64, bool) {
	t.Helper()
	var v lineage
	rev, found, err := s.Load(family, key, &v)
	if err != nil {
		t.Fatalf("Load(%s/%q): %v", family, key, err)
	}
	return v, rev, found
}

func TestOpenCreatesNothingUntilFirstMutation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := openStore(t, dir)
	if _, _, found := mustLoad(t, s, "lineage", "ws"); found {
		t.Fatal("empty store has a record")
	}
	if keys, err := s.Keys("lineage"); err != nil || len(keys) != 0 {
		t.Fatalf("Keys = %v, %v", keys, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reads created the root: %v", err)
	}
	mustCAS(t, s, "lineage", "ws", 0, lineage{Workspace: "ws"})
	if _, err := os.Stat(filepath.Join(dir, "lineage", hexKey("ws")+".json")); err != nil {
		t.Fatalf("record file missing after write: %v", err)
	}
}

// Seed: state_survives_reopen_and_recovers_previous_record.
func TestStateSurvivesReopenAndRecoversPreviousRecord(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	want := lineage{Workspace: "durable", Ready: true}
	mustCAS(t, s, "lineage", "durable", 0, want)
	p := newRecordPaths(dir, "lineage", "durable")
	copyFile(t, p.current, p.previous)
	writeFile(t, p.current, "torn")
	writeFile(t, p.next, "uncommitted")

	reopened := openStore(t, dir)
	got, rev, found := mustLoad(t, reopened, "lineage", "durable")
	if !found || rev != 1 || got != want {
		t.Fatalf("Load = %+v rev %d found %v, want %+v rev 1", got, rev, found, want)
	}
	b, err := os.ReadFile(p.current)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeEnvelope(b); err != nil {
		t.Fatalf("current not repaired: %v", err)
	}
}

func TestTornCurrentRecoversPrevious(t *testing.T) {
	for name, tear := range map[string]func(t *testing.T, path string){
		"truncated": func(t *testing.T, path string) {
			if err := os.Truncate(path, 7); err != nil {
				t.Fatal(err)
			}
		},
		"empty":   func(t *testing.T, path string) { writeFile(t, path, "") },
		"garbage": func(t *testing.T, path string) { writeFile(t, path, "\x00\xff{{") },
		"concatenated": func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			writeFile(t, path, string(b)+string(b))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir)
			mustCAS(t, s, "lineage", "k", 0, lineage{Workspace: "one"})
			p := newRecordPaths(dir, "lineage", "k")
			copyFile(t, p.current, p.previous)
			mustCAS(t, s, "lineage", "k", 1, lineage{Workspace: "two"})
			// Simulate the crash window: previous kept, current torn.
			copyFile(t, p.current, p.next)
			tear(t, p.current)
			if err := os.Rename(p.next, p.previous+".tmp"); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(p.previous+".tmp", p.previous); err != nil {
				t.Fatal(err)
			}
			got, rev, found := mustLoad(t, openStore(t, dir), "lineage", "k")
			if !found || rev != 2 || got.Workspace != "two" {
				t.Fatalf("Load = %+v rev %d found %v", got, rev, found)
			}
		})
	}
}

func TestBothTornIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	mustCAS(t, s, "lineage", "k", 0, lineage{Workspace: "one"})
	p := newRecordPaths(dir, "lineage", "k")
	writeFile(t, p.current, `{"revision":1,"val`)
	writeFile(t, p.previous, `not json`)
	if _, _, err := s.Load("lineage", "k", &lineage{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load with both copies torn = %v, want ErrCorrupt", err)
	}
	if _, err := s.CompareAndSwap("lineage", "k", 1, lineage{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("CAS over corrupt record = %v, want ErrCorrupt", err)
	}
	if err := s.Check(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Check = %v, want ErrCorrupt", err)
	}
	// Leave a clean directory for the cleanup Check.
	if err := os.RemoveAll(p.dir); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptCurrentWithoutPreviousIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	mustCAS(t, s, "lineage", "k", 0, lineage{Workspace: "one"})
	p := newRecordPaths(dir, "lineage", "k")
	for _, bad := range []string{`{"revision":0,"value":{}}`, `{"value":{}}`, `{"revision":3}`, `{"revision":1,"value":{},"x":1}`, `[]`} {
		writeFile(t, p.current, bad)
		if _, _, err := s.Load("lineage", "k", nil); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Load(%s) = %v, want ErrCorrupt", bad, err)
		}
	}
	// A value that does not fit the caller's type is corrupt too.
	writeFile(t, p.current, `{"revision":1,"value":{"ready":"yes"}}`)
	if _, _, err := s.Load("lineage", "k", &lineage{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("schema mismatch = %v, want ErrCorrupt", err)
	}
	if err := os.RemoveAll(p.dir); err != nil {
		t.Fatal(err)
	}
}

// Seed: previous_only_materialization_journal_is_discoverable_and_recovered.
func TestPreviousOnlyRecordIsDiscoverableAndRecovered(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	key := string(bytes.Repeat([]byte{0x73}, 16))
	p := newRecordPaths(dir, "materialization", key)
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, p.previous, `{"revision":1,"value":{"workspace":"journal","ready":false}}`)
	keys, err := s.Keys("materialization")
	if err != nil || !reflect.DeepEqual(keys, []string{key}) {
		t.Fatalf("Keys = %q, %v", keys, err)
	}
	got, rev, found := mustLoad(t, s, "materialization", key)
	if !found || rev != 1 || got.Workspace != "journal" {
		t.Fatalf("Load = %+v %d %v", got, rev, found)
	}
	if _, err := os.Stat(p.current); err != nil {
		t.Fatalf("previous not promoted: %v", err)
	}
}

// Seed: git_compatibility_delete_is_revision_fenced_and_durable.
func TestCompareAndDeleteIsRevisionFencedAndDurable(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		mustCAS(t, s, "git-compat", "ws", 0, lineage{Workspace: "legacy"})
		mustCAS(t, s, "git-compat-v9", "ws", 0, lineage{Workspace: "main"})

		err := s.CompareAndDelete("git-compat-v9", "ws", 0)
		var ce *ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || ce.Actual != 1 || ce.Expected != 0 {
			t.Fatalf("stale delete = %v, want ConflictError actual 1", err)
		}
		if err := s.CompareAndDelete("git-compat-v9", "ws", 1); err != nil {
			t.Fatalf("delete: %v", err)
		}
		reopened := b.reopen(t, s)
		if _, _, found := mustLoad(t, reopened, "git-compat-v9", "ws"); found {
			t.Fatal("deleted record is back after reopen")
		}
		if _, _, found := mustLoad(t, reopened, "git-compat", "ws"); !found {
			t.Fatal("other family was touched")
		}
		// Deleting an absent record: 0 is a no-op, anything else conflicts.
		if err := s.CompareAndDelete("git-compat-v9", "ws", 0); err != nil {
			t.Fatalf("delete absent with 0: %v", err)
		}
		if err := s.CompareAndDelete("git-compat-v9", "ws", 1); !errors.Is(err, ErrConflict) {
			t.Fatalf("delete absent with 1 = %v", err)
		}
		if b.name != "file" {
			return
		}
		// The deleted record leaves no files behind, lock included.
		entries, _ := os.ReadDir(filepath.Join(s.root, "git-compat-v9"))
		if len(entries) != 0 {
			t.Fatalf("files left after delete: %v", entries)
		}
	})
}

func TestCompareAndSwapByRevision(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		if rev := mustCAS(t, s, "lineage", "ws", 0, lineage{Workspace: "a"}); rev != 1 {
			t.Fatalf("first revision = %d", rev)
		}
		_, err := s.CompareAndSwap("lineage", "ws", 0, lineage{Workspace: "b"})
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Actual != 1 || ce.Family != "lineage" || ce.Key != "ws" {
			t.Fatalf("create over existing = %v", err)
		}
		if _, err := s.CompareAndSwap("lineage", "ws", 5, lineage{}); !errors.Is(err, ErrConflict) {
			t.Fatalf("future revision = %v", err)
		}
		if rev := mustCAS(t, s, "lineage", "ws", 1, lineage{Workspace: "b"}); rev != 2 {
			t.Fatalf("second revision = %d", rev)
		}
		got, rev, _ := mustLoad(t, s, "lineage", "ws")
		if got.Workspace != "b" || rev != 2 {
			t.Fatalf("Load = %+v rev %d", got, rev)
		}
		if _, err := s.CompareAndSwap("lineage", "ws", 2, func() {}); err == nil {
			t.Fatal("unencodable value accepted")
		}
	})
}

func TestInvalidFamiliesAndKeys(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		for _, fam := range []string{"", "Upper", "a/b", "..", "_transactions", "a.b", strings.Repeat("a", 65)} {
			if _, err := s.CompareAndSwap(fam, "k", 0, 1); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("family %q: %v", fam, err)
			}
			if _, err := s.Keys(fam); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Keys(%q): %v", fam, err)
			}
		}
		for _, key := range []string{"", strings.Repeat("k", maxKeyBytes+1)} {
			if _, _, err := s.Load("f", key, nil); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("key of %d bytes: %v", len(key), err)
			}
		}
		if err := s.Commit("", []Write{{Family: "f", Key: "k", Value: 1}}); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("empty tx id: %v", err)
		}
	})
}

func TestAnyKeyBytesAreSafe(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		keys := []string{"../../etc/passwd", "\x00", "\xff\xfe", "a.previous", "x.next", "ünïcödé", strings.Repeat("z", maxKeyBytes)}
		for i, k := range keys {
			mustCAS(t, s, "keys", k, 0, i)
		}
		got, err := s.Keys("keys")
		if err != nil {
			t.Fatal(err)
		}
		want := append([]string(nil), keys...)
		slices.Sort(want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Keys = %q\nwant %q", got, want)
		}
		for i, k := range keys {
			var v int
			if rev, found, err := s.Load("keys", k, &v); err != nil || !found || rev != 1 || v != i {
				t.Fatalf("Load(%q) = %d %d %v %v", k, v, rev, found, err)
			}
		}
		if b.name != "file" {
			return
		}
		entries, _ := os.ReadDir(s.root)
		if len(entries) != 1 || entries[0].Name() != "keys" {
			t.Fatalf("keys escaped their family directory: %v", entries)
		}
	})
}

func TestKeysIgnoresInternalFiles(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	mustCAS(t, s, "fam", "a", 0, 1)
	mustCAS(t, s, "fam", "b", 0, 1)
	fam := filepath.Join(dir, "fam")
	for _, name := range []string{
		hexKey("c") + ".next.json", // uncommitted replacement only
		hexKey("d") + ".lock",      // lock of an absent record
		hexKey("e") + ".json.tmp",  // foreign temp file
		"ABCD.json",                // non-canonical hex
		"zz.json",                  // not hex
		".json",                    // empty stem
		hexKey("a") + ".previous.json",
		"notes.txt",
	} {
		writeFile(t, filepath.Join(fam, name), `{"revision":1,"value":1}`)
	}
	if err := os.Mkdir(filepath.Join(fam, hexKey("f")+".json.d"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := s.Keys("fam")
	if err != nil || !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("Keys = %q, %v", got, err)
	}
	if err := os.RemoveAll(fam); err != nil {
		t.Fatal(err)
	}
}

func TestUpdate(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		inc := func(cur []byte) ([]byte, bool, error) {
			n := 0
			if cur != nil {
				if err := json.Unmarshal(cur, &n); err != nil {
					return nil, false, err
				}
			}
			b, err := json.Marshal(n + 1)
			return b, false, err
		}
		for range 3 {
			if err := s.Update("counter", "c", inc); err != nil {
				t.Fatal(err)
			}
		}
		var n int
		if rev, _, err := s.Load("counter", "c", &n); err != nil || n != 3 || rev != 3 {
			t.Fatalf("after 3 updates: %d rev %d %v", n, rev, err)
		}
		boom := errors.New("boom")
		if err := s.Update("counter", "c", func([]byte) ([]byte, bool, error) { return nil, false, boom }); !errors.Is(err, boom) {
			t.Fatalf("fn error = %v", err)
		}
		if err := s.Update("counter", "c", func([]byte) ([]byte, bool, error) { return []byte("{bad"), false, nil }); err == nil {
			t.Fatal("invalid JSON accepted")
		}
		if err := s.Update("counter", "c", func([]byte) ([]byte, bool, error) { return nil, false, nil }); err != nil {
			t.Fatal(err)
		}
		if rev, _, _ := s.Load("counter", "c", &n); rev != 3 {
			t.Fatalf("no-op update changed revision to %d", rev)
		}
		if err := s.Update("counter", "c", func([]byte) ([]byte, bool, error) { return nil, true, nil }); err != nil {
			t.Fatal(err)
		}
		if _, found, _ := s.Load("counter", "c", nil); found {
			t.Fatal("deleted by Update but still found")
		}
		if err := s.Update("counter", "c", func(cur []byte) ([]byte, bool, error) {
			if cur != nil {
				t.Errorf("absent record passed %q", cur)
			}
			return nil, true, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// Seed: context_discard_bounds_bucket_bytes_before_deserialization.
func TestLoadBoundedRefusesBeforeDecoding(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		mustCAS(t, s, "buckets", "small", 0, []string{"a", "b"})
		var v []string
		if rev, found, err := s.LoadBounded("buckets", "small", 64, &v); err != nil || !found || rev != 1 || len(v) != 2 {
			t.Fatalf("small bucket: %v %v %v %v", v, rev, found, err)
		}
		b.rawPut(t, s, "buckets", "big", strings.Repeat(" ", 1_000_000)) // not even JSON
		if _, _, err := s.LoadBounded("buckets", "big", 64, &v); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("oversized bucket = %v, want ErrTooLarge", err)
		}
		if _, _, err := s.LoadBounded("buckets", "small", 8, &v); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("bound below record size = %v, want ErrTooLarge", err)
		}
		b.rawDelete(t, s, "buckets", "big")
	})
}

// Seed: held_record_lock_is_bounded_without_stalling_unrelated_records.
func TestHeldRecordLockIsBoundedWithoutStallingUnrelatedRecords(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{LockTimeout: 200 * time.Millisecond, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	mustCAS(t, s, "lineage", "held", 0, lineage{Workspace: "held"})
	mustCAS(t, s, "lineage", "other", 0, lineage{Workspace: "other"})
	p := newRecordPaths(dir, "lineage", "held")
	// A separate open file description behaves like another process.
	held, err := os.OpenFile(p.lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	contender := make(chan error, 1)
	go func() {
		_, _, err := s.Load("lineage", "held", nil)
		contender <- err
	}()
	// The unrelated record proceeds with a zero-wait lock budget: if it
	// had to wait on the held lock at all, it would time out.
	quick, err := Open(dir, Options{LockTimeout: time.Nanosecond, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := quick.Load("lineage", "other", nil); err != nil || !found {
		t.Fatalf("unrelated record: found %v, %v", found, err)
	}
	if _, err := quick.CompareAndSwap("lineage", "other", 1, lineage{Workspace: "moved"}); err != nil {
		t.Fatalf("unrelated write: %v", err)
	}
	err = <-contender
	if !errors.Is(err, ErrLockTimeout) || !strings.Contains(err.Error(), p.lock) {
		t.Fatalf("contender = %v, want ErrLockTimeout naming %s", err, p.lock)
	}
	if err := s.Commit("tx", []Write{{Family: "lineage", Key: "other", ExpectRev: 2, Value: 1}, {Family: "lineage", Key: "held", ExpectRev: 1, Value: 2}}); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("tx over held record = %v, want ErrLockTimeout", err)
	}
	if _, rev, _ := mustLoad(t, quick, "lineage", "other"); rev != 2 {
		t.Fatalf("timed-out transaction changed a record (rev %d)", rev)
	}
	if err := unix.Flock(int(held.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Load("lineage", "held", nil); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func TestRecordCrashPointsKeepTheOldValue(t *testing.T) {
	for _, step := range []string{"record.after-next", "record.after-rotate"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir)
			mustCAS(t, s, "f", "k", 0, "old")
			crash := errors.New("crash")
			restore := SetFailpointForTest(func(got string) error {
				if got == step {
					return crash
				}
				return nil
			})
			_, err := s.CompareAndSwap("f", "k", 1, "new")
			restore()
			if !errors.Is(err, crash) {
				t.Fatalf("CAS with crash at %s = %v", step, err)
			}
			keys, err := s.Keys("f")
			if err != nil || len(keys) != 1 {
				t.Fatalf("Keys after crash = %q, %v", keys, err)
			}
			var v string
			rev, found, err := openStore(t, dir).Load("f", "k", &v)
			if err != nil || !found || rev != 1 || v != "old" {
				t.Fatalf("after crash at %s: %q rev %d found %v err %v", step, v, rev, found, err)
			}
			if _, err := s.CompareAndSwap("f", "k", 1, "new"); err != nil {
				t.Fatalf("write after recovery: %v", err)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(b))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
