package corestate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// crashAt returns a failpoint hook failing at step, and the error it uses.
func crashAt(t *testing.T, step string) error {
	t.Helper()
	crash := fmt.Errorf("simulated crash at %s", step)
	restore := SetFailpointForTest(func(got string) error {
		if got == step {
			return crash
		}
		return nil
	})
	t.Cleanup(restore)
	return crash
}

func loadInt(t *testing.T, s *Store, family, key string) (int, uint64, bool) {
	t.Helper()
	var v int
	rev, found, err := s.Load(family, key, &v)
	if err != nil {
		t.Fatalf("Load(%s/%q): %v", family, key, err)
	}
	return v, rev, found
}

func TestCommitAppliesAllWrites(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		mustCAS(t, s, "a", "1", 0, 10)
		mustCAS(t, s, "a", "2", 0, 20)
		err := s.Commit("tx-1", []Write{
			{Family: "b", Key: "new", Value: 1},
			{Family: "a", Key: "1", ExpectRev: 1, Value: 11},
			{Family: "a", Key: "2", ExpectRev: 1, Delete: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		if v, rev, _ := loadInt(t, s, "a", "1"); v != 11 || rev != 2 {
			t.Fatalf("a/1 = %d rev %d", v, rev)
		}
		if _, _, found := loadInt(t, s, "a", "2"); found {
			t.Fatal("a/2 not deleted")
		}
		if v, rev, _ := loadInt(t, s, "b", "new"); v != 1 || rev != 1 {
			t.Fatalf("b/new = %d rev %d", v, rev)
		}
		if pending, err := s.PendingTransactions(); err != nil || len(pending) != 0 {
			t.Fatalf("journal left: %v %v", pending, err)
		}
		if err := s.Commit("tx-1", nil); err != nil {
			t.Fatalf("empty transaction: %v", err)
		}
	})
}

func TestCommitConflictAppliesNothing(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		mustCAS(t, s, "a", "1", 0, 10)
		mustCAS(t, s, "a", "2", 0, 20)
		err := s.Commit("tx", []Write{
			{Family: "a", Key: "1", ExpectRev: 1, Value: 11},
			{Family: "a", Key: "2", ExpectRev: 7, Value: 21},
			{Family: "a", Key: "3", Value: 31},
		})
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Key != "2" || ce.Actual != 1 || ce.Expected != 7 {
			t.Fatalf("Commit = %v, want conflict on a/2", err)
		}
		if v, rev, _ := loadInt(t, s, "a", "1"); v != 10 || rev != 1 {
			t.Fatalf("a/1 changed: %d rev %d", v, rev)
		}
		if _, _, found := loadInt(t, s, "a", "3"); found {
			t.Fatal("a/3 created by a failed transaction")
		}
	})
}

func TestCommitRejectsDuplicateWrites(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		s := b.open(t)
		err := s.Commit("tx", []Write{{Family: "a", Key: "k", Value: 1}, {Family: "a", Key: "k", Value: 2}})
		if !errors.Is(err, ErrInvalidTransaction) {
			t.Fatalf("duplicate write = %v", err)
		}
	})
}

// Seed: prepared_context_transaction_rolls_back_partial_record_application,
// generalised to a crash after 1 of 3 writes (an update, a create, a delete).
func TestPreparedTransactionRollsBackPartialApplication(t *testing.T) {
	for _, step := range []string{"tx.after-prepare", "tx.after-apply-1", "tx.after-apply-2", "tx.after-apply-3"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir)
			mustCAS(t, s, "a", "update", 0, 1)
			mustCAS(t, s, "a", "update", 1, 2)
			mustCAS(t, s, "a", "delete", 0, 3)
			crash := crashAt(t, step)
			err := s.Commit("tx", []Write{
				{Family: "a", Key: "update", ExpectRev: 2, Value: 20},
				{Family: "a", Key: "create", Value: 30},
				{Family: "a", Key: "delete", ExpectRev: 1, Delete: true},
			})
			if !errors.Is(err, crash) {
				t.Fatalf("Commit = %v, want the crash", err)
			}
			SetFailpointForTest(nil)
			if pending, _ := s.PendingTransactions(); !reflect.DeepEqual(pending, []string{"tx"}) {
				t.Fatalf("pending after crash = %q", pending)
			}
			reopened, err := Open(dir, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			if v, rev, _ := loadInt(t, reopened, "a", "update"); v != 2 || rev != 2 {
				t.Fatalf("update = %d rev %d, want pre-image 2 rev 2", v, rev)
			}
			if _, _, found := loadInt(t, reopened, "a", "create"); found {
				t.Fatal("created record survived rollback")
			}
			if v, rev, found := loadInt(t, reopened, "a", "delete"); !found || v != 3 || rev != 1 {
				t.Fatalf("deleted record = %d rev %d found %v, want restored", v, rev, found)
			}
			if pending, _ := reopened.PendingTransactions(); len(pending) != 0 {
				t.Fatalf("journal left after recovery: %q", pending)
			}
			// The id is reusable once resolved.
			if err := reopened.Commit("tx", []Write{{Family: "a", Key: "update", ExpectRev: 2, Value: 21}}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRecoverReportsRolledBackAndForward(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	crashAt(t, "tx.after-apply-1")
	_ = s.Commit("back", []Write{{Family: "a", Key: "1", Value: 1}, {Family: "a", Key: "2", Value: 2}})
	crashAt(t, "tx.after-commit")
	_ = s.Commit("forward", []Write{{Family: "b", Key: "1", Value: 1}, {Family: "b", Key: "2", Value: 2}})
	SetFailpointForTest(nil)
	rep, err := s.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep.RolledBack, []string{"back"}) || !reflect.DeepEqual(rep.RolledForward, []string{"forward"}) {
		t.Fatalf("report = %+v", rep)
	}
	if keys, _ := s.Keys("a"); len(keys) != 0 {
		t.Fatalf("rolled back keys remain: %q", keys)
	}
	if keys, _ := s.Keys("b"); !reflect.DeepEqual(keys, []string{"1", "2"}) {
		t.Fatalf("rolled forward keys = %q", keys)
	}
	if rep, err := s.Recover(); err != nil || len(rep.RolledBack)+len(rep.RolledForward) != 0 {
		t.Fatalf("second Recover = %+v, %v", rep, err)
	}
}

// Seed: committed_context_transaction_rolls_forward_missing_record_application.
func TestCommittedTransactionRollsForwardMissingApplication(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	mustCAS(t, s, "a", "1", 0, 1)
	mustCAS(t, s, "a", "2", 0, 2)
	// A committed journal whose second write never reached the record.
	j := journal{Version: journalVersion, ID: hexKey("tx"), Phase: phaseCommitted, Writes: []journalWrite{
		{Family: "a", Key: hexKey("1"), Before: env(1, "1"), After: env(2, "10")},
		{Family: "a", Key: hexKey("2"), Before: env(1, "2"), After: env(2, "20")},
		{Family: "a", Key: hexKey("3"), After: env(1, "30")},
	}}
	jp := s.journalPaths("tx")
	if err := os.MkdirAll(jp.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.writeJournal(jp, j, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.writeJournaled(newRecordPaths(dir, "a", "1"), *env(2, "10")); err != nil {
		t.Fatal(err)
	}
	reopened := openStore(t, dir)
	for key, want := range map[string]int{"1": 10, "2": 20, "3": 30} {
		if v, _, found := loadInt(t, reopened, "a", key); !found || v != want {
			t.Fatalf("a/%s = %d found %v, want %d", key, v, found, want)
		}
	}
}

func env(rev uint64, value string) *envelope {
	return &envelope{Revision: rev, Value: json.RawMessage(value)}
}

func TestRecoverLeavesDivergedRecordsAlone(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	mustCAS(t, s, "a", "1", 0, 1)
	crashAt(t, "tx.after-apply-2")
	_ = s.Commit("tx", []Write{{Family: "a", Key: "1", ExpectRev: 1, Value: 10}, {Family: "a", Key: "2", Value: 20}})
	SetFailpointForTest(nil)
	// A live writer that never ran Recover builds on the partial state.
	mustCAS(t, s, "a", "1", 2, 100)
	rep, err := s.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diverged) != 1 || !reflect.DeepEqual(rep.RolledBack, []string{"tx"}) {
		t.Fatalf("report = %+v", rep)
	}
	if v, rev, _ := loadInt(t, s, "a", "1"); v != 100 || rev != 3 {
		t.Fatalf("later write destroyed: %d rev %d", v, rev)
	}
	if _, _, found := loadInt(t, s, "a", "2"); found {
		t.Fatal("a/2 not rolled back")
	}
}

func TestRecoverSkipsJournalOfLiveOwner(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	crashAt(t, "tx.after-apply-1")
	_ = s.Commit("live", []Write{{Family: "a", Key: "1", Value: 1}})
	SetFailpointForTest(nil)
	jp := s.journalPaths("live")
	held, err := os.OpenFile(jp.lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Recover()
	if err != nil || !reflect.DeepEqual(rep.Busy, []string{"live"}) || len(rep.RolledBack) != 0 {
		t.Fatalf("Recover with held journal = %+v, %v", rep, err)
	}
	impatient, err := Open(dir, Options{LockTimeout: 20 * time.Millisecond, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := impatient.Commit("live", []Write{{Family: "a", Key: "2", Value: 1}}); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("commit reusing a live transaction id = %v, want ErrLockTimeout", err)
	}
	_ = unix.Flock(int(held.Fd()), unix.LOCK_UN)
	if err := s.Commit("live", []Write{{Family: "a", Key: "2", Value: 1}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("commit reusing a pending id = %v, want ErrConflict", err)
	}
	if rep, err := s.Recover(); err != nil || !reflect.DeepEqual(rep.RolledBack, []string{"live"}) {
		t.Fatalf("Recover after release = %+v, %v", rep, err)
	}
}

func TestCorruptJournalStopsRecovery(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	jp := s.journalPaths("bad")
	writeFile(t, jp.current, `{"revision":1,"value":{"version":1,"phase":"maybe"}}`)
	if _, err := s.Recover(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Recover = %v, want ErrCorrupt", err)
	}
	if _, err := Open(dir, Options{NoSync: true}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	if err := os.RemoveAll(jp.dir); err != nil {
		t.Fatal(err)
	}
}

// Seed: local_transactions_work_without_a_tokio_runtime — in Go, plain
// goroutines; 16 of them increment shared counters through transactions.
func TestTransactionsFromSixteenGoroutines(t *testing.T) {
	forBackends(t, func(t *testing.T, b backend) {
		// Polling flock is not fair; on a loaded machine a worker may lose the
		// race for longer than the default bound. This test is about atomicity.
		s := b.open(t)
		if b.name == "file" {
			var err error
			if s, err = Open(t.TempDir(), Options{NoSync: true, LockTimeout: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		const workers, rounds = 16, 8
		keys := []string{"x", "y", "z"}
		var wg sync.WaitGroup
		errs := make(chan error, workers+1)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					// Two of the three counters, chosen by worker, so lock sets overlap.
					pick := []string{keys[w%3], keys[(w+1)%3]}
					for attempt := 0; ; attempt++ {
						var writes []Write
						for _, k := range pick {
							var n int
							rev, _, err := s.Load("counter", k, &n)
							if err != nil {
								errs <- err
								return
							}
							writes = append(writes, Write{Family: "counter", Key: k, ExpectRev: rev, Value: n + 1})
						}
						err := s.Commit(fmt.Sprintf("w%d-r%d-a%d", w, r, attempt), writes)
						if err == nil {
							break
						}
						if !errors.Is(err, ErrConflict) {
							errs <- err
							return
						}
					}
				}
			}()
		}
		// A concurrent recoverer must treat every live journal as busy and
		// never roll anything back or forward.
		done := make(chan struct{})
		recovered := make(chan RecoveryReport, 1)
		go func() {
			var total RecoveryReport
			for {
				select {
				case <-done:
					recovered <- total
					return
				default:
				}
				rep, err := s.Recover()
				if err != nil {
					errs <- err
					<-done
					recovered <- total
					return
				}
				total.RolledBack = append(total.RolledBack, rep.RolledBack...)
				total.RolledForward = append(total.RolledForward, rep.RolledForward...)
			}
		}()
		wg.Wait()
		close(done)
		if rep := <-recovered; len(rep.RolledBack)+len(rep.RolledForward) != 0 {
			t.Fatalf("Recover interfered with live commits: %+v", rep)
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		total := 0
		for _, k := range keys {
			n, rev, _ := loadInt(t, s, "counter", k)
			if uint64(n) != rev {
				t.Fatalf("counter %s = %d at revision %d: an increment was lost or doubled", k, n, rev)
			}
			total += n
		}
		if total != workers*rounds*2 {
			t.Fatalf("total increments = %d, want %d", total, workers*rounds*2)
		}
	})
}

// A real failure after prepare (not a simulated crash) is rolled back in
// place before Commit returns, so the error means "nothing applied" and no
// journal is left behind.
func TestCommitRollsBackInPlaceOnRealFailure(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	mustCAS(t, s, "a", "1", 0, 1)
	mustCAS(t, s, "a", "2", 0, 2)
	// A directory where a2's replacement file must go makes its write fail.
	blocker := newRecordPaths(dir, "a", "2").next
	if err := os.Mkdir(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	err := s.Commit("tx", []Write{{Family: "a", Key: "1", ExpectRev: 1, Value: 10}, {Family: "a", Key: "2", ExpectRev: 1, Value: 20}})
	if err == nil {
		t.Fatal("Commit succeeded over an unwritable record")
	}
	if v, rev, _ := loadInt(t, s, "a", "1"); v != 1 || rev != 1 {
		t.Fatalf("a/1 = %d rev %d, want rolled back to 1 rev 1", v, rev)
	}
	if pending, _ := s.PendingTransactions(); len(pending) != 0 {
		t.Fatalf("journal left after in-place rollback: %q", pending)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit("tx", []Write{{Family: "a", Key: "1", ExpectRev: 1, Value: 10}, {Family: "a", Key: "2", ExpectRev: 1, Value: 20}}); err != nil {
		t.Fatalf("retry: %v", err)
	}
}
