package blobs

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Tier is a local Dir in front of a remote Store (object storage, a
// shared directory): the Dir becomes a cache of the remote. Writers put
// objects into the Dir as before and then Upload them; an object is
// referenced (a head published) only after Upload returned, so every
// published object is in the remote. A local miss is filled by Fetch,
// verified against the ID. The cache is bounded (TierOptions.CacheBytes):
// past it, the least recently used objects that the remote holds are
// removed from the Dir (never one being streamed by Open through the
// tier, nor one not yet uploaded).
//
// The bound is per process: each process that opens the store keeps its
// own recency list (seeded from the objects' mtimes on first need), and
// what another process added is counted when the list is next rebuilt.
// An object removed while a file descriptor of it is open stays readable
// through that descriptor.
//
// All methods are safe for concurrent use.
type Tier struct {
	local  *Dir
	remote Store
	opt    TierOptions

	// mu protects everything below.
	mu      sync.Mutex
	lru     *list.List // of *cacheEntry; front: most recently used
	ents    map[ID]*list.Element
	used    int64 // bytes of the objects in lru
	indexed bool  // lru holds every local object (seeded by index)
	// inRemote: when the remote was last seen holding each object (by
	// this process's upload, fetch or Stat). An upload trusts it for
	// TouchAfter: a GC elsewhere deletes only what is older than its
	// grace, which must be longer.
	inRemote map[ID]time.Time
	fetching map[ID]*fetchCall
	evicting bool
}

// TierOptions configure NewTier.
type TierOptions struct {
	// CacheBytes bounds the local objects' bytes; 0 means unbounded.
	CacheBytes int64
	// Uploads bounds the uploads in flight at once; 0 means 8.
	Uploads int
	// TouchAfter: an object found already in the remote whose stored time
	// is older than this is touched (see Toucher), so that a GC's grace
	// counts from the new reference; 0 means 10 minutes. It is also how
	// long the tier trusts its memory that the remote holds an object.
	// Must be well under the grace of any GC over the remote.
	TouchAfter time.Duration
	// Now is the clock stored times are compared with; nil means
	// time.Now.
	Now func() time.Time
}

type cacheEntry struct {
	id   ID
	size int64
	pins int // Open readers in flight
}

type fetchCall struct {
	done chan struct{}
	err  error
}

// NewTier puts local in front of remote.
func NewTier(local *Dir, remote Store, opt TierOptions) *Tier {
	if opt.Uploads <= 0 {
		opt.Uploads = 8
	}
	if opt.TouchAfter <= 0 {
		opt.TouchAfter = 10 * time.Minute
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Tier{
		local: local, remote: remote, opt: opt,
		lru: list.New(), ents: map[ID]*list.Element{},
		inRemote: map[ID]time.Time{}, fetching: map[ID]*fetchCall{},
	}
}

// Local is the cache directory.
func (t *Tier) Local() *Dir { return t.local }

// Remote is the remote plane.
func (t *Tier) Remote() Store { return t.remote }

// unavailable wraps a remote failure in ErrUnavailable (keeping the
// cause), unless it already is one.
func unavailable(what string, id ID, err error) error {
	if errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%s blob %s: %w", what, id.Short(), err)
	}
	return fmt.Errorf("%s blob %s: %w: %w", what, id.Short(), ErrUnavailable, err)
}

// Upload makes every object of ids (all in the local Dir) present in the
// remote, a few at a time, and returns when all are there: an error
// wrapping ErrUnavailable if the remote failed (the objects stay local;
// uploading again retries them). Objects the remote already holds are
// not sent again.
func (t *Tier) Upload(ids ...ID) error {
	if len(ids) == 1 {
		err := t.upload(ids[0], nil)
		t.evict()
		return err
	}
	// A directory remote takes many objects in one of its batches: one
	// sync of its file system at Commit instead of an fsync and a
	// directory sync per object (a 1,000-file import made 2,000 of them).
	var batch *sentBatch
	if d, ok := t.remote.(*Dir); ok {
		batch = &sentBatch{b: d.NewDirBatch()}
	}
	var g errgroup.Group
	g.SetLimit(t.opt.Uploads)
	for _, id := range ids {
		g.Go(func() error { return t.upload(id, batch) })
	}
	err := g.Wait()
	if batch != nil {
		if err == nil {
			err = batch.commit(t)
		} else {
			batch.b.Abort()
		}
	}
	t.evict()
	return err
}

// sentBatch collects the objects an Upload sends to a directory remote:
// they count as uploaded only once the batch committed.
type sentBatch struct {
	b   *DirBatch
	mu  sync.Mutex
	ids []ID
}

func (sb *sentBatch) commit(t *Tier) error {
	if err := sb.b.Commit(); err != nil {
		sb.b.Abort()
		return fmt.Errorf("upload %d blobs: %w: %w", len(sb.ids), ErrUnavailable, err)
	}
	for _, id := range sb.ids {
		t.uploaded(id)
	}
	return nil
}

func (t *Tier) upload(id ID, batch *sentBatch) error {
	t.mu.Lock()
	known := t.knownLocked(id)
	t.mu.Unlock()
	if known {
		t.touch(id, -1)
		return nil
	}
	in, err := t.remote.Stat(id)
	switch {
	case err == nil:
		if tc, ok := t.remote.(Toucher); ok && !in.ModTime.IsZero() && t.opt.Now().Sub(in.ModTime) > t.opt.TouchAfter {
			if err := tc.Touch(id); err != nil && !errors.Is(err, ErrNotFound) {
				return unavailable("upload", id, err)
			} else if err != nil {
				return t.send(id, batch) // collected meanwhile
			}
		}
	case errors.Is(err, ErrNotFound):
		return t.send(id, batch)
	default:
		return unavailable("upload", id, err)
	}
	t.uploaded(id)
	return nil
}

// send copies the local object to the remote.
func (t *Tier) send(id ID, batch *sentBatch) error {
	if batch != nil {
		got, _, err := batch.b.PutFile(t.local.Path(id))
		if err != nil {
			return unavailable("upload", id, err)
		}
		if got != id {
			return fmt.Errorf("upload blob %s: %w: the local file hashes to %s", id.Short(), ErrCorrupt, got.Short())
		}
		batch.mu.Lock()
		batch.ids = append(batch.ids, id)
		batch.mu.Unlock()
		return nil
	}
	if up, ok := t.remote.(Uploader); ok {
		if err := up.Upload(id, t.local.Path(id)); err != nil {
			return unavailable("upload", id, err)
		}
		t.uploaded(id)
		return nil
	}
	got, _, err := t.remote.PutFile(t.local.Path(id))
	if err != nil {
		return unavailable("upload", id, err)
	}
	if got != id {
		return fmt.Errorf("upload blob %s: %w: the local file hashes to %s", id.Short(), ErrCorrupt, got.Short())
	}
	t.uploaded(id)
	return nil
}

func (t *Tier) uploaded(id ID) {
	t.mu.Lock()
	t.inRemote[id] = t.opt.Now()
	t.mu.Unlock()
	t.touch(id, -1)
}

// Fetch fills the local Dir with object id from the remote, verified; an
// error wrapping ErrNotFound if the remote does not have it either,
// ErrUnavailable if the remote failed, ErrCorrupt if what it sent does
// not hash to id. Concurrent fetches of one object share one transfer.
// The fetched object stays in the cache until release is called (a
// nil-safe no-op on error): the caller opens it first.
func (t *Tier) Fetch(id ID) (release func(), err error) {
	t.mu.Lock()
	if c, ok := t.fetching[id]; ok {
		t.mu.Unlock()
		<-c.done
		if c.err != nil {
			return func() {}, c.err
		}
		return t.Pin(id), nil
	}
	c := &fetchCall{done: make(chan struct{})}
	t.fetching[id] = c
	t.mu.Unlock()

	var n int64
	n, c.err = t.fetch(id)
	release = func() {}
	if c.err == nil {
		t.touch(id, n)
		release = t.Pin(id)
	}

	t.mu.Lock()
	delete(t.fetching, id)
	t.mu.Unlock()
	close(c.done)
	if c.err == nil {
		t.evict()
	}
	return release, c.err
}

func (t *Tier) fetch(id ID) (int64, error) {
	rc, err := t.remote.Open(id)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, err
	case err != nil:
		return 0, unavailable("fetch", id, err)
	}
	defer rc.Close()
	n, err := t.local.Install(id, rc)
	switch {
	case err == nil:
	case errors.Is(err, ErrCorrupt), errors.Is(err, ErrReadOnly):
		return 0, fmt.Errorf("fetch blob %s: %w", id.Short(), err)
	default:
		// Install's error may be the remote's (a broken transfer) or the
		// local disk's; either way the object is not here.
		return 0, unavailable("fetch", id, err)
	}
	t.mu.Lock()
	t.inRemote[id] = t.opt.Now()
	t.mu.Unlock()
	return n, nil
}

// knownLocked reports whether the remote was seen holding id recently
// enough to trust it. Called with mu held.
func (t *Tier) knownLocked(id ID) bool {
	at, ok := t.inRemote[id]
	return ok && t.opt.Now().Sub(at) < t.opt.TouchAfter
}

// Touch records a use of local object id (most recently used first).
func (t *Tier) Touch(id ID) { t.touch(id, -1) }

// touch moves id to the front of the recency list, adding it with size
// (or its file's size if size < 0) if absent.
func (t *Tier) touch(id ID, size int64) {
	if t.opt.CacheBytes <= 0 {
		return
	}
	t.mu.Lock()
	if e, ok := t.ents[id]; ok {
		t.lru.MoveToFront(e)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	if size < 0 {
		in, err := t.local.Stat(id)
		if err != nil {
			return
		}
		size = in.Size
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.ents[id]; ok {
		t.lru.MoveToFront(e)
		return
	}
	t.ents[id] = t.lru.PushFront(&cacheEntry{id: id, size: size})
	t.used += size
}

// Pin keeps object id in the cache until the returned release is called.
func (t *Tier) Pin(id ID) (release func()) {
	if t.opt.CacheBytes <= 0 {
		return func() {}
	}
	t.touch(id, -1)
	t.mu.Lock()
	e, ok := t.ents[id]
	if ok {
		e.Value.(*cacheEntry).pins++
	}
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			if !ok {
				return
			}
			t.mu.Lock()
			e.Value.(*cacheEntry).pins--
			t.mu.Unlock()
		})
	}
}

// Open streams object id from the cache (fetching it on a miss); the
// object stays cached until the reader is closed.
func (t *Tier) Open(id ID) (io.ReadCloser, error) {
	rc, err := t.local.Open(id)
	if errors.Is(err, ErrNotFound) {
		release, ferr := t.Fetch(id)
		if ferr != nil {
			return nil, ferr
		}
		rc, err = t.local.Open(id)
		release()
	}
	if err != nil {
		return nil, err
	}
	return &pinnedReader{ReadCloser: rc, release: t.Pin(id)}, nil
}

type pinnedReader struct {
	io.ReadCloser
	release func()
}

func (p *pinnedReader) Close() error {
	defer p.release()
	return p.ReadCloser.Close()
}

// CacheBytes returns the bytes of the local objects the tier counts.
func (t *Tier) CacheBytes() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.used
}

// index seeds the recency list with every local object, the oldest
// (by stored time) least recently used. Called with evicting set.
func (t *Tier) index() error {
	var all []Info
	if err := t.local.List(func(in Info) error { all = append(all, in); return nil }); err != nil {
		return fmt.Errorf("index blob cache: %w", err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ModTime.After(all[j].ModTime) })
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, in := range all {
		if _, ok := t.ents[in.ID]; ok {
			continue
		}
		t.ents[in.ID] = t.lru.PushBack(&cacheEntry{id: in.ID, size: in.Size})
		t.used += in.Size
	}
	t.indexed = true
	return nil
}

// evict removes least recently used objects until the cache is within
// its bound. Only objects the remote holds go (known from this
// process's uploads and fetches, or asked of the remote); pinned ones
// stay. One evictor runs at a time; failures leave the cache over its
// bound until the next try.
func (t *Tier) evict() {
	if t.opt.CacheBytes <= 0 {
		return
	}
	t.mu.Lock()
	if t.evicting || (t.indexed && t.used <= t.opt.CacheBytes) {
		t.mu.Unlock()
		return
	}
	t.evicting = true
	indexed := t.indexed
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.evicting = false
		t.mu.Unlock()
	}()
	if !indexed {
		if err := t.index(); err != nil {
			return
		}
	}
	skipped := map[ID]bool{}
	for {
		t.mu.Lock()
		if t.used <= t.opt.CacheBytes {
			t.mu.Unlock()
			return
		}
		var victim *cacheEntry
		for e := t.lru.Back(); e != nil; e = e.Prev() {
			c := e.Value.(*cacheEntry)
			if c.pins == 0 && !skipped[c.id] {
				victim = c
				break
			}
		}
		known := victim != nil && t.knownLocked(victim.id)
		t.mu.Unlock()
		if victim == nil {
			return // everything left is pinned or not in the remote
		}
		if !known {
			if _, err := t.remote.Stat(victim.id); err != nil {
				skipped[victim.id] = true
				continue
			}
		}
		t.mu.Lock()
		e, ok := t.ents[victim.id]
		if !ok || e.Value.(*cacheEntry).pins > 0 {
			t.mu.Unlock()
			skipped[victim.id] = true
			continue
		}
		t.lru.Remove(e)
		delete(t.ents, victim.id)
		t.used -= victim.size
		t.inRemote[victim.id] = t.opt.Now()
		t.mu.Unlock()
		if err := t.local.Delete(victim.id); err != nil {
			return
		}
	}
}

// Forget drops object id from the recency list (GC removed its file).
func (t *Tier) Forget(id ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.ents[id]; ok {
		t.lru.Remove(e)
		delete(t.ents, id)
		t.used -= e.Value.(*cacheEntry).size
	}
}

// ForgetRemote drops what the tier knows of object id in the remote (GC
// deleted it there).
func (t *Tier) ForgetRemote(id ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inRemote, id)
}
