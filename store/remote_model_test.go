package store_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

// The tier as a state machine: random writes (single and batched), reads
// through every path, and streaming readers held open, on two nodes with
// small caches over one shared directory. Every read returns the content
// written, from either node; the cache of a node never holds more than
// its bound plus the objects its open readers pin; an open reader's object
// stays in the cache; every object written is in the remote.
func TestRemoteCacheModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		remote := sharedDir(t)
		const bound = 6 << 10
		dirs := []string{t.TempDir(), t.TempDir()}
		var nodes []*store.Store
		for _, d := range dirs {
			nodes = append(nodes, storetest.MustOpenDir(t, d, store.Options{NoSync: true, Remote: remote, CacheBytes: bound}))
		}
		written := map[store.ID][]byte{}
		var ids []store.ID
		type reader struct {
			node int
			id   store.ID
			rc   io.ReadCloser
		}
		var open []reader
		gen := rapid.IntRange(0, 1999)
		content := func(i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "%05d", i), 1+i%400) } // 5 B to 2 KiB
		pinned := func(node int) int64 {
			seen := map[store.ID]bool{}
			var n int64
			for _, r := range open {
				if r.node == node && !seen[r.id] {
					seen[r.id] = true
					n += int64(len(written[r.id]))
				}
			}
			return n
		}
		rt.Repeat(map[string]func(*rapid.T){
			"write": func(rt *rapid.T) {
				n := rapid.IntRange(0, 1).Draw(rt, "node")
				c := content(gen.Draw(rt, "content"))
				id, err := nodes[n].WriteBlobBytes(c)
				if err != nil {
					rt.Fatal(err)
				}
				if _, ok := written[id]; !ok {
					ids = append(ids, id)
				}
				written[id] = c
			},
			"batch": func(rt *rapid.T) {
				n := rapid.IntRange(0, 1).Draw(rt, "node")
				b := nodes[n].NewBlobBatch()
				for range rapid.IntRange(1, 5).Draw(rt, "count") {
					c := content(gen.Draw(rt, "content"))
					id, err := b.WriteBlobBytes(c)
					if err != nil {
						rt.Fatal(err)
					}
					if _, ok := written[id]; !ok {
						ids = append(ids, id)
					}
					written[id] = c
				}
				if err := b.Commit(); err != nil {
					rt.Fatal(err)
				}
			},
			"read": func(rt *rapid.T) {
				if len(ids) == 0 {
					rt.Skip("nothing written")
				}
				n := rapid.IntRange(0, 1).Draw(rt, "node")
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				var got []byte
				var err error
				switch rapid.IntRange(0, 2).Draw(rt, "path") {
				case 0:
					got, err = nodes[n].ReadBlob(id)
				case 1:
					var f interface {
						io.Reader
						Close() error
					}
					f, err = nodes[n].OpenBlobFile(id)
					if err == nil {
						got, err = io.ReadAll(f)
						f.Close()
					}
				case 2:
					var sz int64
					sz, err = nodes[n].BlobSize(id)
					got = written[id][:min(int(sz), len(written[id]))]
					if err == nil && sz != int64(len(written[id])) {
						err = fmt.Errorf("size %d", sz)
					}
				}
				if err != nil || !bytes.Equal(got, written[id]) {
					rt.Fatalf("node %d reads %s: %d bytes, %v", n, id.Short(), len(got), err)
				}
			},
			"open": func(rt *rapid.T) {
				if len(ids) == 0 || len(open) >= 3 {
					rt.Skip("nothing to open")
				}
				n := rapid.IntRange(0, 1).Draw(rt, "node")
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				rc, err := nodes[n].OpenBlob(id)
				if err != nil {
					rt.Fatal(err)
				}
				open = append(open, reader{n, id, rc})
			},
			"close": func(rt *rapid.T) {
				if len(open) == 0 {
					rt.Skip("no reader")
				}
				i := rapid.IntRange(0, len(open)-1).Draw(rt, "reader")
				r := open[i]
				got, err := io.ReadAll(r.rc)
				r.rc.Close()
				if err != nil || !bytes.Equal(got, written[r.id]) {
					rt.Fatalf("reader of %s: %d bytes, %v", r.id.Short(), len(got), err)
				}
				open = append(open[:i], open[i+1:]...)
			},
			"": func(rt *rapid.T) {
				for n, d := range dirs {
					// A write or fetch may leave one object over the bound
					// until the next eviction; pinned objects stay.
					if got, _ := objectBytes(t, d); got > bound+pinned(n)+2<<10 {
						rt.Fatalf("node %d's cache holds %d bytes, bound %d, pinned %d", n, got, bound, pinned(n))
					}
				}
				for _, r := range open {
					h := r.id.String()
					if _, err := os.Lstat(filepath.Join(dirs[r.node], "objects", h[:2], h[2:])); err != nil {
						rt.Fatalf("node %d evicted %s while a reader has it open: %v", r.node, r.id.Short(), err)
					}
					if _, err := remote.Stat(blobs.ID(r.id)); err != nil {
						rt.Fatalf("open object %s not in the remote: %v", r.id.Short(), err)
					}
				}
			},
		})
		for _, r := range open {
			r.rc.Close()
		}
		for _, id := range ids {
			if _, err := remote.Stat(blobs.ID(id)); err != nil {
				rt.Fatalf("object %s not in the remote: %v", id.Short(), err)
			}
		}
	})
}
