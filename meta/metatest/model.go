package metatest

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/meta"
	"pgregory.net/rapid"
)

// errAbort rolls back a model transaction on purpose.
var errAbort = errors.New("abort")

// testModel drives random transactions (puts, deletes, prefix deletes,
// gets and scans, committed or rolled back) against the store and a map,
// and compares every read and the whole contents after each transaction.
func testModel(t *testing.T, s meta.Store) {
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		root := fmt.Sprintf("model-%d", run)
		spaces := []meta.Space{meta.NewSpace(root), meta.NewSpace(root, "x"), meta.NewSpace(root, "y/z"), meta.NewSpace(root + "%")}
		leaves := []string{"\x00", "k", "k\x00", "k\x00a", "k1", "kk", "\xff", "\xff\xff"}
		model := map[string]string{}
		genSpace := rapid.SampledFrom(spaces)
		genLeaf := rapid.SampledFrom(leaves)
		genPrefix := rapid.SampledFrom([]string{"", "k", "k\x00", "\xff", "z"})
		// expect lists model's keys of sp under leafPrefix as leaf=value.
		expect := func(m map[string]string, sp meta.Space, leafPrefix string, o meta.ScanOptions) []string {
			p := string(sp.Prefix([]byte(leafPrefix)))
			var keys []string
			for k := range m {
				if strings.HasPrefix(k, p) {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			if o.Reverse {
				for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
					keys[i], keys[j] = keys[j], keys[i]
				}
			}
			if o.Limit > 0 && len(keys) > o.Limit {
				keys = keys[:o.Limit]
			}
			out := []string{}
			for _, k := range keys {
				out = append(out, string(sp.Leaf(meta.Key(k)))+"="+m[k])
			}
			return out
		}
		got := func(tx meta.Tx, sp meta.Space, leafPrefix string, o meta.ScanOptions) ([]string, error) {
			out := []string{}
			err := tx.Scan(sp.Prefix([]byte(leafPrefix)), o, func(k meta.Key, v []byte) error {
				out = append(out, string(sp.Leaf(k))+"="+string(v))
				return nil
			})
			return out, err
		}
		rt.Repeat(map[string]func(*rapid.T){
			"update": func(rt *rapid.T) {
				work := map[string]string{}
				for k, v := range model {
					work[k] = v
				}
				abort := rapid.Bool().Draw(rt, "abort")
				n := rapid.IntRange(1, 6).Draw(rt, "ops")
				type op struct {
					kind       int
					sp         meta.Space
					leaf, pref string
					val        string
					o          meta.ScanOptions
				}
				ops := make([]op, n)
				for i := range ops {
					ops[i] = op{
						kind: rapid.IntRange(0, 4).Draw(rt, "kind"), sp: genSpace.Draw(rt, "space"),
						leaf: genLeaf.Draw(rt, "leaf"), pref: genPrefix.Draw(rt, "prefix"),
						val: rapid.StringMatching(`[a-z]{0,3}`).Draw(rt, "value"),
						o:   meta.ScanOptions{Reverse: rapid.Bool().Draw(rt, "reverse"), Limit: rapid.IntRange(0, 3).Draw(rt, "limit")},
					}
				}
				// The closure works on its own copy: it may be run again.
				err := s.Update(ctx, func(tx meta.Tx) error {
					w := map[string]string{}
					for k, v := range model {
						w[k] = v
					}
					for _, o := range ops {
						k := o.sp.Key([]byte(o.leaf))
						switch o.kind {
						case 0:
							if err := tx.Put(k, []byte(o.val)); err != nil {
								return err
							}
							w[string(k)] = o.val
						case 1:
							if err := tx.Delete(k); err != nil {
								return err
							}
							delete(w, string(k))
						case 2:
							if err := tx.DeletePrefix(o.sp.Prefix([]byte(o.pref))); err != nil {
								return err
							}
							p := string(o.sp.Prefix([]byte(o.pref)))
							for wk := range w {
								if strings.HasPrefix(wk, p) {
									delete(w, wk)
								}
							}
						case 3:
							v, ok, err := tx.Get(k)
							if err != nil {
								return err
							}
							if wv, wok := w[string(k)]; ok != wok || string(v) != wv {
								return fmt.Errorf("get %q in tx: %q %v, model %q %v", k, v, ok, wv, wok)
							}
						case 4:
							g, err := got(tx, o.sp, o.pref, o.o)
							if err != nil {
								return err
							}
							if want := expect(w, o.sp, o.pref, o.o); !same(g, want) {
								return fmt.Errorf("scan %s %q %+v in tx: %q, model %q", o.sp, o.pref, o.o, g, want)
							}
						}
					}
					work = w
					if abort {
						return errAbort
					}
					return nil
				})
				switch {
				case abort && errors.Is(err, errAbort):
				case !abort && err == nil:
					model = work
				default:
					rt.Fatalf("update (abort=%v): %v", abort, err)
				}
			},
			"view": func(rt *rapid.T) {
				sp, pref := genSpace.Draw(rt, "space"), genPrefix.Draw(rt, "prefix")
				o := meta.ScanOptions{Reverse: rapid.Bool().Draw(rt, "reverse"), Limit: rapid.IntRange(0, 3).Draw(rt, "limit")}
				err := s.View(ctx, func(tx meta.Tx) error {
					g, err := got(tx, sp, pref, o)
					if err != nil {
						return err
					}
					if want := expect(model, sp, pref, o); !same(g, want) {
						return fmt.Errorf("scan %s %q %+v: %q, model %q", sp, pref, o, g, want)
					}
					return nil
				})
				if err != nil {
					rt.Fatal(err)
				}
			},
			"": func(rt *rapid.T) {
				err := s.View(ctx, func(tx meta.Tx) error {
					for _, sp := range spaces {
						g, err := got(tx, sp, "", meta.ScanOptions{})
						if err != nil {
							return err
						}
						if want := expect(model, sp, "", meta.ScanOptions{}); !same(g, want) {
							return fmt.Errorf("contents of %s: %q, model %q", sp, g, want)
						}
						for _, l := range leaves {
							v, ok, err := tx.Get(sp.Key([]byte(l)))
							if err != nil {
								return err
							}
							if mv, mok := model[string(sp.Key([]byte(l)))]; ok != mok || !bytes.Equal(v, []byte(mv)) {
								return fmt.Errorf("get %s %q: %q %v, model %q %v", sp, l, v, ok, mv, mok)
							}
						}
					}
					return nil
				})
				if err != nil {
					rt.Fatal(err)
				}
			},
		})
	})
}
