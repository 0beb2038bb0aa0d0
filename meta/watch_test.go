package meta_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/meta"
)

// TestWatchModel drives the in-process watch (Memory, Bolt) with random
// watches, cancellations, commits, rollbacks and prefix deletes, and checks
// after every step what the one-slot, coalescing channel promises: events
// come in increasing revision order, each at the revision of a commit that
// wrote under the watch's prefix after the watch began, and once a commit
// returned, the watch holds (or has delivered) an event at least as new as
// the newest commit that changed a key under its prefix.
func TestWatchModel(t *testing.T) {
	planes := map[string]func(t *rapid.T) meta.Store{
		"memory": func(*rapid.T) meta.Store { return meta.NewMemory() },
	}
	dir := t.TempDir()
	n := 0
	planes["bolt"] = func(rt *rapid.T) meta.Store {
		n++
		b, err := meta.OpenBolt(filepath.Join(dir, fmt.Sprintf("m%d.db", n)), meta.BoltOptions{NoSync: true})
		if err != nil {
			rt.Fatal(err)
		}
		return b
	}
	for name, open := range planes {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				s := open(rt)
				if b, ok := s.(*meta.Bolt); ok {
					defer b.Close()
				}
				(&watchModel{s: s, w: s.(meta.Watcher), exists: map[string]bool{}}).run(rt)
			})
		})
	}
}

type modelWatch struct {
	prefix  string
	ch      <-chan meta.Event
	cancel  context.CancelFunc
	last    int64 // newest event received
	want    int64 // newest commit under prefix since the watch began
	matches map[int64]bool
}

type watchModel struct {
	s       meta.Store
	w       meta.Watcher
	watches []*modelWatch
	exists  map[string]bool // the keys stored
}

var (
	modelSpaces = []meta.Space{meta.NewSpace("a"), meta.NewSpace("b"), meta.NewSpace("a", "x")}
	modelLeaves = []string{"k1", "k2", "q"}
)

// keyPrefix is a watchable prefix: a namespace, or a leaf prefix in one.
func keyPrefix(rt *rapid.T, label string) meta.Key {
	sp := rapid.SampledFrom(modelSpaces).Draw(rt, label+"space")
	return sp.Prefix([]byte(rapid.SampledFrom([]string{"", "k", "k1", "q"}).Draw(rt, label+"leaf")))
}

func (m *watchModel) run(rt *rapid.T) {
	defer func() {
		for _, w := range m.watches {
			w.cancel()
		}
	}()
	rt.Repeat(map[string]func(*rapid.T){
		"watch": func(rt *rapid.T) {
			p := keyPrefix(rt, "w")
			ctx, cancel := context.WithCancel(context.Background())
			ch, err := m.w.Watch(ctx, p)
			if err != nil {
				rt.Fatal(err)
			}
			m.watches = append(m.watches, &modelWatch{prefix: string(p), ch: ch, cancel: cancel, matches: map[int64]bool{}})
		},
		"cancel": func(rt *rapid.T) {
			if len(m.watches) == 0 {
				rt.Skip("no watch")
			}
			i := rapid.IntRange(0, len(m.watches)-1).Draw(rt, "i")
			m.watches[i].cancel()
			m.watches = append(m.watches[:i], m.watches[i+1:]...)
		},
		"commit": func(rt *rapid.T) {
			type write struct {
				k      string
				del    bool
				prefix bool
			}
			var ws []write
			for range rapid.IntRange(0, 3).Draw(rt, "writes") {
				switch rapid.IntRange(0, 2).Draw(rt, "op") {
				case 0, 1:
					sp := rapid.SampledFrom(modelSpaces).Draw(rt, "space")
					ws = append(ws, write{k: string(sp.Key([]byte(rapid.SampledFrom(modelLeaves).Draw(rt, "leaf")))), del: rapid.Bool().Draw(rt, "del")})
				default:
					ws = append(ws, write{k: string(keyPrefix(rt, "d")), prefix: true})
				}
			}
			rollback := rapid.Bool().Draw(rt, "rollback")
			errRollback := errors.New("rollback")
			err := m.s.Update(context.Background(), func(tx meta.Tx) error {
				for _, w := range ws {
					var err error
					switch {
					case w.prefix:
						err = tx.DeletePrefix(meta.Key(w.k))
					case w.del:
						err = tx.Delete(meta.Key(w.k))
					default:
						err = tx.Put(meta.Key(w.k), []byte("v"))
					}
					if err != nil {
						return err
					}
				}
				if rollback {
					return errRollback
				}
				return nil
			})
			if rollback {
				if !errors.Is(err, errRollback) {
					rt.Fatalf("rollback: %v", err)
				}
				return
			}
			if err != nil {
				rt.Fatal(err)
			}
			if len(ws) == 0 {
				return // nothing written: no commit to report
			}
			rev, err := m.w.Revision(context.Background())
			if err != nil {
				rt.Fatal(err)
			}
			// Keys the commit changed: every put, every delete of a key
			// that existed. A delete of nothing may be reported, need not.
			var changed []string
			for _, w := range ws {
				switch {
				case w.prefix:
					for k := range m.exists {
						if strings.HasPrefix(k, w.k) {
							changed = append(changed, k)
							delete(m.exists, k)
						}
					}
				case w.del:
					if m.exists[w.k] {
						changed = append(changed, w.k)
					}
					delete(m.exists, w.k)
				default:
					changed = append(changed, w.k)
					m.exists[w.k] = true
				}
			}
			for _, mw := range m.watches {
				for _, w := range ws {
					if strings.HasPrefix(w.k, mw.prefix) || (w.prefix && strings.HasPrefix(mw.prefix, w.k)) {
						mw.matches[rev] = true
					}
				}
				for _, k := range changed {
					if strings.HasPrefix(k, mw.prefix) {
						mw.want = rev
					}
				}
			}
		},
		"": func(rt *rapid.T) {
			for _, mw := range m.watches {
				// Take what is there; the commits have returned, so their
				// events are in the channel already.
				for done := false; !done; {
					select {
					case ev := <-mw.ch:
						if ev.Rev <= mw.last {
							rt.Fatalf("watch %q: event %d after %d", mw.prefix, ev.Rev, mw.last)
						}
						if !mw.matches[ev.Rev] {
							rt.Fatalf("watch %q: event at revision %d, which wrote nothing under it", mw.prefix, ev.Rev)
						}
						mw.last = ev.Rev
					default:
						done = true
					}
				}
				if mw.last < mw.want {
					rt.Fatalf("watch %q: newest event %d, newest commit under it %d", mw.prefix, mw.last, mw.want)
				}
			}
		},
	})
}
