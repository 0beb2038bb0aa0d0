package corestate

import (
	gocontext "context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/meta/etcdmeta"
	"pgregory.net/rapid"
)

var errInjected = errors.New("injected plane failure")

// failingPlane runs a write transaction's closure and then fails the
// commit when fail is set: the plane's answer to a transaction it could
// not commit. Nothing of the transaction may become visible.
type failingPlane struct {
	meta.Store
	fail bool
}

func (f *failingPlane) Update(ctx gocontext.Context, fn func(meta.Tx) error) error {
	if !f.fail {
		return f.Store.Update(ctx, fn)
	}
	return f.Store.Update(ctx, func(tx meta.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errInjected
	})
}

// TestPropertyPlaneMatchesModel drives two Stores over one plane (two
// nodes' views) with compare-and-swaps, updates, deletes and multi-record
// transactions, some stale, some failed by the plane, and checks every
// record, revision and key list against a model after every step.
func TestPropertyPlaneMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		fp := &failingPlane{Store: meta.NewMemory()}
		var stores [2]*Store
		for i := range stores {
			s, err := OpenPlane(fp, PlaneOptions{Families: []string{"a", "b"}})
			if err != nil {
				rt.Fatal(err)
			}
			stores[i] = s
		}
		type rk struct{ family, key string }
		var all []rk
		for _, f := range []string{"a", "b"} {
			for _, k := range []string{"x", "y", "z"} {
				all = append(all, rk{f, k})
			}
		}
		model := map[rk]modelRecord{}
		pick := func(rt *rapid.T) *Store { return stores[rapid.IntRange(0, 1).Draw(rt, "node")] }
		expectRev := func(rt *rapid.T, r rk) (uint64, bool) {
			cur := model[r].rev
			if rapid.IntRange(0, 4).Draw(rt, "stale") == 0 {
				return cur + 1, false
			}
			return cur, true
		}
		failing := func(rt *rapid.T) bool {
			fp.fail = rapid.IntRange(0, 5).Draw(rt, "plane-fails") == 0
			return fp.fail
		}
		rt.Repeat(map[string]func(*rapid.T){
			"cas": func(rt *rapid.T) {
				r := rapid.SampledFrom(all).Draw(rt, "record")
				v := rapid.IntRange(0, 1000).Draw(rt, "value")
				rev, ok := expectRev(rt, r)
				fail := failing(rt)
				got, err := pick(rt).CompareAndSwap(r.family, r.key, rev, v)
				fp.fail = false
				switch {
				case !ok:
					if !errors.Is(err, ErrConflict) {
						rt.Fatalf("stale CAS = %v", err)
					}
				case fail:
					if !errors.Is(err, errInjected) {
						rt.Fatalf("failed CAS = %v", err)
					}
				case err != nil || got != rev+1:
					rt.Fatalf("CAS = %d, %v", got, err)
				default:
					model[r] = modelRecord{value: v, rev: rev + 1}
				}
			},
			"update": func(rt *rapid.T) {
				r := rapid.SampledFrom(all).Draw(rt, "record")
				fail := failing(rt)
				err := pick(rt).Update(r.family, r.key, func(cur []byte) ([]byte, bool, error) {
					n := 0
					if cur != nil {
						var err error
						if n, err = strconv.Atoi(string(cur)); err != nil {
							return nil, false, err
						}
					}
					return []byte(strconv.Itoa(n + 1)), false, nil
				})
				fp.fail = false
				switch {
				case fail:
					if !errors.Is(err, errInjected) {
						rt.Fatalf("failed update = %v", err)
					}
				case err != nil:
					rt.Fatalf("update: %v", err)
				default:
					cur := model[r]
					model[r] = modelRecord{value: cur.value + 1, rev: cur.rev + 1}
				}
			},
			"delete": func(rt *rapid.T) {
				r := rapid.SampledFrom(all).Draw(rt, "record")
				rev, ok := expectRev(rt, r)
				err := pick(rt).CompareAndDelete(r.family, r.key, rev)
				switch {
				case !ok:
					if !errors.Is(err, ErrConflict) {
						rt.Fatalf("stale delete = %v", err)
					}
				case err != nil:
					rt.Fatalf("delete: %v", err)
				default:
					delete(model, r)
				}
			},
			"tx": func(rt *rapid.T) {
				picked := rapid.SliceOfNDistinct(rapid.SampledFrom(all), 1, 4, func(r rk) string { return r.family + "/" + r.key }).Draw(rt, "records")
				var writes []Write
				allOK := true
				next := map[rk]*modelRecord{}
				for i, r := range picked {
					rev, ok := expectRev(rt, r)
					allOK = allOK && ok
					switch {
					case i > 0 && rapid.IntRange(0, 3).Draw(rt, "assert") == 0:
						writes = append(writes, Write{Family: r.family, Key: r.key, ExpectRev: rev, Assert: true})
					case rapid.IntRange(0, 3).Draw(rt, "delete") == 0:
						writes = append(writes, Write{Family: r.family, Key: r.key, ExpectRev: rev, Delete: true})
						next[r] = nil
					default:
						v := rapid.IntRange(0, 1000).Draw(rt, "value")
						writes = append(writes, Write{Family: r.family, Key: r.key, ExpectRev: rev, Value: v})
						next[r] = &modelRecord{value: v, rev: rev + 1}
					}
				}
				fail := failing(rt)
				err := pick(rt).Commit("tx", writes)
				fp.fail = false
				switch {
				case !allOK:
					if !errors.Is(err, ErrConflict) {
						rt.Fatalf("stale tx = %v", err)
					}
					return
				case fail:
					if !errors.Is(err, errInjected) {
						rt.Fatalf("failed tx = %v", err)
					}
					return
				case err != nil:
					rt.Fatalf("tx: %v", err)
				}
				for r, rec := range next {
					if rec == nil {
						delete(model, r)
					} else {
						model[r] = *rec
					}
				}
			},
			"": func(rt *rapid.T) {
				for _, s := range stores {
					for _, f := range []string{"a", "b"} {
						var want []string
						for _, r := range all {
							if _, ok := model[r]; ok && r.family == f {
								want = append(want, r.key)
							}
						}
						got, err := s.Keys(f)
						if err != nil || !slices.Equal(got, want) {
							rt.Fatalf("Keys(%s) = %q, %v; model %q", f, got, err, want)
						}
					}
					for _, r := range all {
						var v int
						rev, found, err := s.Load(r.family, r.key, &v)
						want, exists := model[r]
						if err != nil || found != exists || (found && (v != want.value || rev != want.rev)) {
							rt.Fatalf("%v = (%d rev %d found %v %v), model %+v found %v", r, v, rev, found, err, want, exists)
						}
					}
				}
			},
		})
		if err := stores[0].Check(); err != nil {
			rt.Fatalf("Check: %v", err)
		}
	})
}

func TestPlaneRefusesFamiliesItDoesNotKeep(t *testing.T) {
	s, err := OpenPlane(meta.NewMemory(), PlaneOptions{Families: []string{"contexts"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwap("mounts", "w", 0, 1); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("CAS in a family not on the plane = %v, want ErrInvalidKey", err)
	}
	if err := s.Commit("t", []Write{{Family: "contexts", Key: "c", Value: 1}, {Family: "mounts", Key: "w", Value: 1}}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("Commit touching a family not on the plane = %v", err)
	}
	if _, found, err := s.Load("contexts", "c", nil); err != nil || found {
		t.Fatalf("refused commit wrote contexts/c: %v %v", found, err)
	}
	if _, err := OpenPlane(meta.NewMemory(), PlaneOptions{Families: []string{"Bad"}}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("bad family = %v", err)
	}
}

func TestPlaneCheckFindsCorruptRecords(t *testing.T) {
	s, err := OpenPlane(meta.NewMemory(), PlaneOptions{Families: []string{"contexts"}})
	if err != nil {
		t.Fatal(err)
	}
	mustCAS(t, s, "contexts", "ok", 0, 1)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	planeBackend.rawPut(t, s, "contexts", "bad", `{"revision":0,"value":1}`)
	if err := s.Check(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Check = %v, want ErrCorrupt", err)
	}
	if _, _, err := s.Load("contexts", "bad", nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of a corrupt record = %v", err)
	}
}

// TestPlaneOnEtcd runs the plane on a real 3-member etcd cluster: two
// Stores, through clients of different members, increment shared counters
// in multi-record transactions without losing or doubling one; both see
// the same records; and a transaction beyond etcd's limits is refused
// whole, before it reaches etcd.
func TestPlaneOnEtcd(t *testing.T) {
	c := etcdtest.Start(t)
	var stores [2]*Store
	for i := range stores {
		s, err := OpenPlane(etcdmeta.New(c.Client(i), "cs-test"), PlaneOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	const workers, rounds = 4, 5
	keys := []string{"x", "y", "z"}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			s := stores[w%2]
			for range rounds {
				pick := []string{keys[w%3], keys[(w+1)%3]}
				for {
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
					err := s.Commit("inc", writes)
					if err == nil {
						break
					}
					if !errors.Is(err, ErrConflict) {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for _, k := range keys {
		n, rev, _ := loadInt(t, stores[1], "counter", k)
		if uint64(n) != rev {
			t.Fatalf("counter %s = %d at revision %d: an increment was lost or doubled", k, n, rev)
		}
		total += n
	}
	if total != workers*rounds*2 {
		t.Fatalf("total = %d, want %d", total, workers*rounds*2)
	}
	if got, err := stores[0].Keys("counter"); err != nil || !reflect.DeepEqual(got, keys) {
		t.Fatalf("Keys = %q, %v", got, err)
	}
	// The bound is etcd's: a commit of exactly MaxWrites records goes
	// through; one more is refused whole before it reaches etcd.
	limit := stores[0].pl.limits.MaxWrites
	var big []Write
	for i := range limit + 1 {
		big = append(big, Write{Family: "big", Key: fmt.Sprint(i), Value: i})
	}
	if err := stores[0].Commit("big", big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("commit of %d records = %v, want ErrTooLarge", len(big), err)
	}
	if got, err := stores[1].Keys("big"); err != nil || len(got) != 0 {
		t.Fatalf("oversized commit left %q, %v", got, err)
	}
	if err := stores[0].Commit("big", big[:limit]); err != nil {
		t.Fatalf("commit of %d records (the limit): %v", limit, err)
	}
	if got, err := stores[1].Keys("big"); err != nil || len(got) != limit {
		t.Fatalf("after the commit at the limit B lists %d records, %v", len(got), err)
	}
}
