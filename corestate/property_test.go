package corestate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

type modelRecord struct {
	value int
	rev   uint64
}

// crashPlan fails the n-th failpoint step (1-based) and remembers which
// step that was; n == 0 never fails.
type crashPlan struct {
	n, seen int
	failed  string
}

var crashCounts = map[string]int{}

var errPlannedCrash = errors.New("planned crash")

func (c *crashPlan) install() (restore func()) {
	return SetFailpointForTest(func(step string) error {
		c.seen++
		if c.seen == c.n {
			c.failed = step
			crashCounts[step]++
			return errPlannedCrash
		}
		return nil
	})
}

// TestPropertyCrashRecoveryMatchesAtomicModel runs random sequences of CAS,
// compare-and-delete and transactions, each possibly cut short by a crash
// at a random durable step (and recovery possibly crashing too). After
// every step the reopened store must equal a model in which each completed
// operation happened atomically and each crashed one either fully happened
// (the crash came after the commit point) or not at all.
func TestPropertyCrashRecoveryMatchesAtomicModel(t *testing.T) {
	base := t.TempDir()
	defer func() { t.Logf("crashes: %v", crashCounts) }()
	keys := []string{"a", "b", "c", "d"}
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp(base, "prop")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := Open(dir, Options{NoSync: true})
		if err != nil {
			rt.Fatal(err)
		}
		model := map[string]modelRecord{}
		txn := 0

		expectRev := func(rt *rapid.T, key string) (uint64, bool) {
			cur := model[key].rev
			if rapid.IntRange(0, 4).Draw(rt, "stale") == 0 {
				return cur + 1 + uint64(rapid.IntRange(0, 2).Draw(rt, "skew")), false
			}
			return cur, true
		}
		// reopen simulates a restart; recovery itself may crash first.
		reopen := func(rt *rapid.T) {
			if rapid.Bool().Draw(rt, "crash-recovery") {
				plan := &crashPlan{n: rapid.IntRange(1, 4).Draw(rt, "recovery-step")}
				restore := plan.install()
				_, err := Open(dir, Options{NoSync: true})
				restore()
				if err != nil && !errors.Is(err, errPlannedCrash) {
					rt.Fatalf("recovery failed: %v", err)
				}
			}
			var err error
			if s, err = Open(dir, Options{NoSync: true}); err != nil {
				rt.Fatalf("reopen: %v", err)
			}
		}

		rt.Repeat(map[string]func(*rapid.T){
			"cas": func(rt *rapid.T) {
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				value := rapid.IntRange(0, 1000).Draw(rt, "value")
				rev, ok := expectRev(rt, key)
				plan := &crashPlan{n: rapid.IntRange(0, 3).Draw(rt, "crash-step")}
				restore := plan.install()
				_, err := s.CompareAndSwap("prop", key, rev, value)
				restore()
				switch {
				case !ok:
					if !errors.Is(err, ErrConflict) {
						rt.Fatalf("stale CAS = %v", err)
					}
				case plan.failed != "":
					if !errors.Is(err, errPlannedCrash) {
						rt.Fatalf("crashed CAS = %v", err)
					}
					reopen(rt)
				case err != nil:
					rt.Fatalf("CAS: %v", err)
				default:
					model[key] = modelRecord{value: value, rev: rev + 1}
				}
			},
			"update": func(rt *rapid.T) {
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				del := rapid.IntRange(0, 3).Draw(rt, "delete") == 0
				plan := &crashPlan{n: rapid.IntRange(0, 3).Draw(rt, "crash-step")}
				restore := plan.install()
				err := s.Update("prop", key, func(cur []byte) ([]byte, bool, error) {
					if del {
						return nil, true, nil
					}
					n := 0
					if cur != nil {
						if err := json.Unmarshal(cur, &n); err != nil {
							return nil, false, err
						}
					}
					return []byte(strconv.Itoa(n + 1)), false, nil
				})
				restore()
				switch {
				case plan.failed != "":
					if !errors.Is(err, errPlannedCrash) {
						rt.Fatalf("crashed update = %v", err)
					}
					reopen(rt)
				case err != nil:
					rt.Fatalf("update: %v", err)
				case del:
					delete(model, key)
				default:
					cur := model[key]
					model[key] = modelRecord{value: cur.value + 1, rev: cur.rev + 1}
				}
			},
			"delete": func(rt *rapid.T) {
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				rev, ok := expectRev(rt, key)
				err := s.CompareAndDelete("prop", key, rev)
				switch {
				case !ok:
					if !errors.Is(err, ErrConflict) {
						rt.Fatalf("stale delete = %v", err)
					}
				case err != nil:
					rt.Fatalf("delete: %v", err)
				default:
					delete(model, key)
				}
			},
			"tx": func(rt *rapid.T) {
				picked := rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 1, 3, rapid.ID[string]).Draw(rt, "keys")
				var writes []Write
				allOK := true
				next := map[string]*modelRecord{}
				for _, key := range picked {
					rev, ok := expectRev(rt, key)
					allOK = allOK && ok
					if rapid.IntRange(0, 3).Draw(rt, "delete") == 0 {
						writes = append(writes, Write{Family: "prop", Key: key, ExpectRev: rev, Delete: true})
						next[key] = nil
						continue
					}
					value := rapid.IntRange(0, 1000).Draw(rt, "value")
					writes = append(writes, Write{Family: "prop", Key: key, ExpectRev: rev, Value: value})
					next[key] = &modelRecord{value: value, rev: rev + 1}
				}
				// Fence one key the transaction does not write.
				for _, key := range keys {
					if _, written := next[key]; written || !rapid.Bool().Draw(rt, "assert") {
						continue
					}
					rev, ok := expectRev(rt, key)
					allOK = allOK && ok
					writes = append(writes, Write{Family: "prop", Key: key, ExpectRev: rev, Assert: true})
					break
				}
				plan := &crashPlan{n: rapid.IntRange(0, 14).Draw(rt, "crash-step")}
				restore := plan.install()
				txn++
				err := s.Commit(fmt.Sprintf("tx-%d", txn), writes)
				restore()
				applied := false
				switch {
				case !allOK:
					if !errors.Is(err, ErrConflict) {
						rt.Fatalf("stale tx = %v", err)
					}
				case plan.failed != "":
					if !errors.Is(err, errPlannedCrash) {
						rt.Fatalf("crashed tx = %v", err)
					}
					applied = plan.failed == "tx.after-commit"
					reopen(rt)
				case err != nil:
					rt.Fatalf("tx: %v", err)
				default:
					applied = true
				}
				if applied {
					for key, rec := range next {
						if rec == nil {
							delete(model, key)
						} else {
							model[key] = *rec
						}
					}
				}
			},
			"": func(rt *rapid.T) {
				for _, key := range keys {
					var v int
					rev, found, err := s.Load("prop", key, &v)
					if err != nil {
						rt.Fatalf("Load(%s): %v", key, err)
					}
					want, exists := model[key]
					if found != exists || (found && (v != want.value || rev != want.rev)) {
						rt.Fatalf("%s = (%d rev %d found %v), model (%d rev %d found %v)", key, v, rev, found, want.value, want.rev, exists)
					}
				}
				got, err := s.Keys("prop")
				if err != nil {
					rt.Fatal(err)
				}
				var want []string
				for k := range model {
					want = append(want, k)
				}
				slices.Sort(want)
				if !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
					rt.Fatalf("Keys = %q, model %q", got, want)
				}
				if pending, err := s.PendingTransactions(); err != nil || len(pending) != 0 {
					rt.Fatalf("pending after recovery: %q %v", pending, err)
				}
			},
		})
		if err := s.Check(); err != nil {
			rt.Fatalf("Check: %v", err)
		}
	})
}
