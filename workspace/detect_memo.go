package workspace

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/store"
	"lukechampine.com/blake3"
)

// detectMemo remembers, per directory of an in-place base, the listing of
// DIR under which detection last found every file of the directory's tree
// unchanged. Detection runs at every lease end and used to compare every
// file of every directory acyclicfs ever stored (a fingerprint hash, a
// store lookup, for files it wrote a shadow lookup): after 60 directories
// of 100 files had been changed, a lease that changed nothing spent
// 110-180 ms in it. A verdict is a function of the directory's tree, the
// listing's names and lstats, and the shadow fingerprints it consulted;
// when all three are as before, the files' verdicts are too, and only the
// directory's subdirectories are looked at again (their contents do not
// show in this listing). The digest covers every field the fingerprints
// use (inode, mode, size, mtime, ctime) and more.
type detectMemo struct {
	mu    sync.Mutex
	seen  map[detectKey]detectSeen
	quiet map[detectKey]detectQuiet // listings remembered for the change watcher (detect_watch.go)
	// primed is, per base, the watcher its root was primed with.
	primed map[store.ID]store.Watcher
	hits   atomic.Int64 // directories whose files were known unchanged (tests)
	// quietHits counts directories answered from events, not listed;
	// listings the directories listed (tests).
	quietHits, listings atomic.Int64
}

type detectKey struct {
	base store.ID
	path string
}

type detectSeen struct {
	tree       store.ID
	digest     [32]byte
	shadowRoot store.ID    // the shadow then: while it is the same, so are its answers
	shadow     []shadowUse // the lookups the verdicts relied on
}

// shadowUse is one shadow lookup a verdict relied on, and its answer.
type shadowUse struct {
	path string
	val  string
	ok   bool
}

// detectMemoMax bounds the memo; past it, it starts over.
const detectMemoMax = 1 << 16

// unchanged reports whether key's files were found unchanged under the
// same tree and listing digest, with every shadow lookup answering as then:
// the same shadow root, or each lookup again (still) when it moved (a
// zero shadow answers nothing).
func (dm *detectMemo) unchanged(key detectKey, tree store.ID, digest [32]byte, shadowRoot store.ID, still func(shadowUse) bool) bool {
	dm.mu.Lock()
	s, ok := dm.seen[key]
	dm.mu.Unlock()
	if !ok || s.tree != tree || s.digest != digest {
		return false
	}
	if s.shadowRoot != shadowRoot {
		for _, u := range s.shadow {
			if shadowRoot.IsZero() || !still(u) {
				return false
			}
		}
		// The answers held: they are the new shadow's too.
		dm.mu.Lock()
		if cur, ok := dm.seen[key]; ok && cur.tree == tree && cur.digest == digest {
			cur.shadowRoot = shadowRoot
			dm.seen[key] = cur
		}
		dm.mu.Unlock()
	}
	dm.hits.Add(1)
	return true
}

// record keeps (or, when the files changed, forgets) key's verdict.
func (dm *detectMemo) record(key detectKey, tree store.ID, digest [32]byte, shadowRoot store.ID, uses []shadowUse, unchanged bool) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	if !unchanged {
		delete(dm.seen, key)
		return
	}
	if dm.seen == nil || len(dm.seen) >= detectMemoMax {
		dm.seen = map[detectKey]detectSeen{}
	}
	dm.seen[key] = detectSeen{tree: tree, digest: digest, shadowRoot: shadowRoot, shadow: uses}
}

// usesOf returns the shadow answers key's remembered verdict relied on.
func (dm *detectMemo) usesOf(key detectKey) []shadowUse {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	return dm.seen[key].shadow
}

func (dm *detectMemo) quietOf(key detectKey) (detectQuiet, bool) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	q, ok := dm.quiet[key]
	return q, ok
}

func (dm *detectMemo) rememberQuiet(key detectKey, q detectQuiet) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	if dm.quiet == nil || len(dm.quiet) >= detectMemoMax {
		dm.quiet = map[detectKey]detectQuiet{}
	}
	dm.quiet[key] = q
}

// primeOnce reports whether base's root is to be primed for w: true the
// first time it is asked for w.
func (dm *detectMemo) primeOnce(base store.ID, w store.Watcher) bool {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	if dm.primed[base] == w {
		return false
	}
	// A new watcher (a new mount): what was remembered with the last one
	// is of no use, and would keep it alive.
	for k, q := range dm.quiet {
		if k.base == base && q.w != w {
			delete(dm.quiet, k)
		}
	}
	if dm.primed == nil {
		dm.primed = map[store.ID]store.Watcher{}
	}
	dm.primed[base] = w
	return true
}

func (dm *detectMemo) forgetQuiet(key detectKey) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	delete(dm.quiet, key)
}

// listingDigest hashes a listing's names and the lstat fields of each
// entry.
func listingDigest(ents []dirfd.Entry) [32]byte {
	h := blake3.New(32, nil)
	var b []byte
	for i := range ents {
		st := &ents[i].Stat
		b = b[:0]
		b = binary.LittleEndian.AppendUint32(b, uint32(len(ents[i].Name)))
		b = append(b, ents[i].Name...)
		for _, v := range []uint64{st.Dev, st.Ino, uint64(st.Mode), uint64(st.Nlink), uint64(st.Uid), uint64(st.Gid), uint64(st.Size),
			uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec), uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec)} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		h.Write(b)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}
