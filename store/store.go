package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
	"github.com/acyclicfs/acyclicfs/meta"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/internal/lockfile"
)

// FormatVersion is the on-disk format version written into a new store.
const FormatVersion = 1

// Names inside the store directory.
const (
	objectsDirName = "objects"
	tmpDirName     = "tmp"
	metaFileName   = "meta.db"
	metaTempPrefix = "meta.db.new-"
)

// Bucket names in meta.db. Values are part of the on-disk format.
var (
	bucketFormat      = []byte("format")
	bucketTrees       = []byte("trees")
	bucketGenerations = []byte("generations")
	bucketWorkspaces  = []byte("workspaces")
	bucketChildren    = []byte("children")
	bucketHeads       = []byte("heads")
	bucketOperations  = []byte("operations")
	bucketMeta        = []byte("meta")
	// In-place bases (baseref.go): base ID → baseRecord JSON; base ref ID
	// → encoding; base ref ID → the 32-byte ID of its resolved content.
	bucketBases        = []byte("bases")
	bucketBaseRefs     = []byte("baserefs")
	bucketBaseResolved = []byte("baseref-resolved")

	keyFormat = []byte("format")
)

// allBuckets are created by Open; gates is owned by gate.go but created
// eagerly so read-only stores see it.
var allBuckets = [][]byte{
	bucketFormat, bucketTrees, bucketGenerations, bucketWorkspaces,
	bucketChildren, bucketHeads, bucketOperations, bucketMeta, bucketGates,
	bucketBases, bucketBaseRefs, bucketBaseResolved,
}

// addedBuckets appeared after stores of this format already existed; a
// writable Open creates them in such a store before validating it.
var addedBuckets = [][]byte{bucketBases, bucketBaseRefs, bucketBaseResolved}

// formatRecord is the value under format/format.
type formatRecord struct {
	Version int    `json:"version"`
	Hash    string `json:"hash"`
}

// Options configure Open.
type Options struct {
	// Clock returns the store clock in Unix milliseconds; nil means the
	// wall clock. Lease expiry is judged against it.
	Clock func() int64
	// ReadOnly opens meta.db shared and refuses every write.
	ReadOnly bool
	// LockTimeout bounds the wait for bbolt's file lock; 0 means 2s. On
	// timeout Open returns an error wrapping ErrLocked.
	LockTimeout time.Duration
	// NoSync skips every fsync. Tests only: a crash loses data.
	NoSync bool
	// Warn, if set, is told when Open had to make an existing store
	// private (its directory was open to other users).
	Warn func(msg string)
	// Watchers, if set, makes the change watchers of attached bases
	// (OpenBaseWatched); nil: bases are not watched.
	Watchers Watchers
	// Meta, if set, is the metadata plane the store keeps every record on
	// (trees, generations, heads, ...) instead of dir/meta.db: the
	// directory then holds only the blob plane (objects/, tmp/). The
	// caller owns the plane (Close leaves it open) and must not share one
	// plane's store namespaces between two stores over different blob
	// directories. A plane without a format record is made a new store
	// (unless ReadOnly); tmp/ is not cleaned at open, since no lock says
	// that no other writer has files in flight there. LockTimeout does
	// not apply.
	Meta meta.Store
	// MustExist, with Meta, refuses a plane without a format record and
	// without records (ErrMissing) instead of making it a new store: only
	// the command that configures a plane (init) creates the store on it.
	MustExist bool
	// HeadGuard, if set, is called inside every transaction that moves a
	// workspace's head (CompareAndAppend, CompareAndAppendMany,
	// PublishGeneration), once per workspace appended to, before the
	// append, like CheckPermitTx: an error aborts the transaction and is
	// returned wrapped. A node on etcd reads its claim of ws there, so
	// that the Txn that appends compares it (cluster.Node.HeadGuard); a
	// local store has none.
	HeadGuard func(tx meta.Tx, ws string) error
	// Remote, if set, is the blob plane every object is kept on (object
	// storage, a shared directory: see docs/scale-out.md); objects/ is
	// then a cache of it (blobs.Tier). A write returns, and a batch
	// commits, only once its objects are in the remote (an error wrapping
	// blobs.ErrUnavailable otherwise); a local miss is fetched, verified.
	// The caller owns the plane.
	Remote blobs.Store
	// CacheBytes bounds objects/ with a Remote: past it the least
	// recently used objects the remote holds are removed locally. 0 means
	// unbounded.
	CacheBytes int64
	// GCGrace spares, with a Remote, the remote's unreferenced objects
	// stored less than this long ago: another node's capture uploads its
	// objects before it publishes the head that references them. 0 means
	// DefaultGCGrace.
	GCGrace time.Duration
}

// DefaultGCGrace is Options.GCGrace's default.
const DefaultGCGrace = time.Hour

// touchAfter is how long a tier trusts that the remote holds an object
// and how old a found object is before an upload touches it: at most a
// quarter of the grace, so that a GC elsewhere never deletes an object
// this node counted on within the time its capture takes to publish.
func touchAfter(grace time.Duration) time.Duration {
	if grace <= 0 {
		grace = DefaultGCGrace
	}
	return max(min(10*time.Minute, grace/4), time.Nanosecond)
}

// Store is an open store directory. All methods are safe for concurrent use.
type Store struct {
	trees    treeCache // decoded stored trees (GetTree)
	dir      string
	meta     meta.Store // the metadata plane: over db, or Options.Meta
	db       *bolt.DB   // meta.db; nil on an injected plane
	clock    func() int64
	readOnly bool
	// headGuard is Options.HeadGuard (nil: none).
	headGuard func(tx meta.Tx, ws string) error
	noSync    bool

	// gcMu protects gcHolds and gcRunning; gcCond (on gcMu) signals
	// changes to them. See HoldGC.
	gcMu      sync.Mutex
	gcCond    *sync.Cond
	gcHolds   int  // outstanding HoldGC holds
	gcRunning bool // a GC is marking or sweeping

	// objs is the blob plane: the objects directory (package blobs).
	objs *blobs.Dir
	// tier puts objs in front of Options.Remote; nil without one.
	tier *blobs.Tier
	// gcGrace is Options.GCGrace (or its default) with a Remote.
	gcGrace time.Duration

	// bases is the in-process state of in-place bases (baseref_store.go).
	bases baseMemo
	// watchers makes base watchers (Options.Watchers); nil: none.
	watchers Watchers
	// baseReads counts opens of base files' content (BaseReads).
	baseReads atomic.Int64
}

// Open opens the store in dir, creating it unless opt.ReadOnly. It never
// silently resets damaged metadata: a corrupt meta.db is an error wrapping
// ErrCorrupt, a different format an error wrapping ErrIncompatible.
func Open(dir string, opt Options) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	s := &Store{dir: abs, clock: opt.Clock, readOnly: opt.ReadOnly, noSync: opt.NoSync, watchers: opt.Watchers, headGuard: opt.HeadGuard}
	s.gcCond = sync.NewCond(&s.gcMu)
	s.objs = blobs.OpenDir(s.objectsDir(), blobs.Options{Tmp: s.tmpDir(), ReadOnly: opt.ReadOnly, NoSync: opt.NoSync, Fail: fail})
	if s.clock == nil {
		s.clock = func() int64 { return time.Now().UnixMilli() }
	}
	if opt.Remote != nil {
		s.tier = blobs.NewTier(s.objs, opt.Remote, blobs.TierOptions{
			CacheBytes: opt.CacheBytes,
			TouchAfter: touchAfter(opt.GCGrace),
			Now:        func() time.Time { return time.UnixMilli(s.clock()) },
		})
		s.gcGrace = opt.GCGrace
		if s.gcGrace <= 0 {
			s.gcGrace = DefaultGCGrace
		}
	}
	if !opt.ReadOnly {
		if err := s.createDirs(opt.Warn); err != nil {
			return nil, err
		}
	}
	if opt.Meta != nil {
		s.meta = opt.Meta
		if err := s.initPlane(opt.MustExist); err != nil {
			return nil, err
		}
		if err := s.validate(); err != nil {
			return nil, err
		}
		return s, nil
	}
	metaPath := filepath.Join(abs, metaFileName)
	fi, err := os.Stat(metaPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if opt.ReadOnly {
			return nil, fmt.Errorf("open store %s read-only: no %s: %w", abs, metaFileName, ErrNotFound)
		}
		if err := s.initMeta(); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("open store %s: %w", abs, err)
	case fi.Size() == 0:
		// meta.db is created complete (see initMeta), so an empty one was
		// truncated.
		return nil, fmt.Errorf("open store %s: %s is empty (truncated): %w", abs, metaFileName, ErrCorrupt)
	}
	timeout := opt.LockTimeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	// bbolt retries its lock every 50 ms; poll finer first, so that a
	// command right after an exiting daemon released the store does not
	// sleep most of that out (the first command after an unmount took
	// 61 ms instead of 10). bbolt still takes the lock itself.
	waitLockFree(metaPath, opt.ReadOnly, timeout)
	db, err := openBolt(metaPath, &bolt.Options{
		Timeout:         timeout,
		ReadOnly:        opt.ReadOnly,
		NoSync:          opt.NoSync,
		InitialMmapSize: initialMmapSize,
	})
	if err != nil {
		return nil, classifyOpenError(abs, err)
	}
	if err := checkLength(db, metaPath); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", abs, err)
	}
	s.db = db
	s.meta = meta.NewBolt(db)
	if !opt.ReadOnly {
		if err := s.addBuckets(); err != nil {
			db.Close()
			return nil, err
		}
	}
	if err := s.validate(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.validateBuckets(); err != nil {
		db.Close()
		return nil, err
	}
	if !opt.ReadOnly {
		// We hold bbolt's exclusive lock, so no other writer of this store
		// has temp files in flight.
		if err := s.cleanTmp(); err != nil {
			db.Close()
			return nil, err
		}
	}
	return s, nil
}

// waitLockFree polls, every 2 ms and for at most timeout, until path's
// flock could be taken (shared for a read-only open), and releases it at
// once. It only shortens the wait: whoever takes the lock in between
// makes bbolt wait as before, and any error leaves the wait to bbolt.
func waitLockFree(path string, shared bool, timeout time.Duration) {
	mode := lockfile.Exclusive
	if shared {
		mode = lockfile.Shared
	}
	l := lockfile.New(path, os.O_RDONLY)
	// A lock held by another process has no event to wait on: Wait polls.
	if l.Wait(context.Background(), mode, timeout, 2*time.Millisecond) == nil {
		_ = l.Unlock()
	}
}

// initialMmapSize is the address space bbolt maps meta.db into at open.
// Without it bbolt maps the file's size and, whenever a write transaction
// grows past the mapping, unmaps and maps again at twice the size — waiting
// for every read transaction to end, copying the write transaction's nodes
// off the old mapping and faulting the pages in again; a fresh store's
// first in-place lease end with 10 changes remapped six times in its one
// publish commit (64 KiB to 512 KiB). The mapping is address space only:
// pages are read in as bbolt touches them, as before.
const initialMmapSize = 1 << 30

// checkLength refuses a meta.db shorter than the pages its meta page
// counts (a truncated file). The mapping reaches past the end of the file
// (initialMmapSize), so bbolt would not notice until it touched a missing
// page, with a SIGBUS; and a file grown in 16 MiB steps can lose its sparse
// tail harmlessly, so its size alone says nothing.
func checkLength(db *bolt.DB, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", metaFileName, err)
	}
	return db.View(func(tx *bolt.Tx) error {
		if need := tx.Size(); fi.Size() < need {
			return fmt.Errorf("%s is %d bytes, shorter than the %d its pages take (truncated): %w", metaFileName, fi.Size(), need, ErrCorrupt)
		}
		return nil
	})
}

// openBolt is bolt.Open with its panics on damaged pages (it reads the
// freelist at open) turned into errors.
func openBolt(path string, opt *bolt.Options) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("bbolt panicked: %v", r)
		}
	}()
	return bolt.Open(path, 0o600, opt)
}

func classifyOpenError(dir string, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("open store %s: %w", dir, ErrLocked)
	case errors.Is(err, berrors.ErrVersionMismatch):
		return fmt.Errorf("open store %s: %s: %v: %w", dir, metaFileName, err, ErrIncompatible)
	}
	var errno syscall.Errno
	var pe *fs.PathError
	if errors.As(err, &pe) || errors.As(err, &errno) {
		// An OS error (permissions, read-only fs, I/O) is not corruption.
		return fmt.Errorf("open store %s: %w", dir, err)
	}
	// Everything else bbolt reports at open (invalid meta pages, checksum,
	// file size too small, bad mapping) means the file is damaged.
	return fmt.Errorf("open store %s: %s: %v: %w", dir, metaFileName, err, ErrCorrupt)
}

// createDirs makes the directory skeleton and checks it writable, so a
// read-only location fails here with a clear error rather than on the
// first blob. The check is access(2), not a probe file: every CLI command
// opens the store, and a create and unlink in tmp/ cost two journalled
// directory changes each time.
//
// The store is private: its directory is 0700, so no other user reaches
// any object (blobs hold the content of files whatever their modes were).
// A store made before this rule, or a directory made by someone else for
// it, is tightened here and warn is told.
func (s *Store) createDirs(warn func(string)) error {
	for _, d := range []string{s.dir, s.objectsDir(), s.tmpDir()} {
		if err := os.MkdirAll(d, privateDirMode); err != nil {
			return fmt.Errorf("open store %s: create %s: %w", s.dir, d, err)
		}
	}
	if fi, err := os.Stat(s.dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(s.dir, fi.Mode().Perm()&0o700); err != nil {
			return fmt.Errorf("open store %s: make it private: %w", s.dir, err)
		}
		if warn != nil {
			warn(fmt.Sprintf("store %s was open to other users (mode %04o); made it private (%04o)", s.dir, fi.Mode().Perm(), fi.Mode().Perm()&0o700))
		}
	}
	if err := unix.Faccessat(unix.AT_FDCWD, s.tmpDir(), unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
		return fmt.Errorf("open store %s: directory not writable: %w", s.dir, &fs.PathError{Op: "access", Path: s.tmpDir(), Err: err})
	}
	return nil
}

// privateDirMode is the mode of what directories the store makes: private
// to its owner (see createDirs). Blobs are 0400 (package blobs).
const privateDirMode = 0o700

// initMeta creates meta.db atomically: built in tmp/, synced and linked
// into place, so a meta.db that exists was complete once.
func (s *Store) initMeta() error {
	// A missing meta.db next to existing objects means metadata was lost;
	// starting fresh would orphan everything. Unless another opener
	// created the store meanwhile: it links meta.db before it writes any
	// object, so look again for meta.db after seeing objects.
	if ents, err := os.ReadDir(s.objectsDir()); err == nil && len(ents) > 0 {
		if _, err := os.Stat(filepath.Join(s.dir, metaFileName)); err == nil {
			return nil
		}
		return fmt.Errorf("open store %s: %s missing but objects exist: %w", s.dir, metaFileName, ErrCorrupt)
	}
	// A unique temp name and link (not rename) make two processes creating
	// the same store at once safe: the first link wins, the loser drops
	// its copy and opens the winner's.
	// It lives in the store directory, not tmp/, because a concurrent
	// opener that won the race cleans tmp/.
	tmp := filepath.Join(s.dir, fmt.Sprintf("%s%d-%d", metaTempPrefix, os.Getpid(), time.Now().UnixNano()))
	defer os.Remove(tmp)
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second, NoSync: s.noSync})
	if err != nil {
		return fmt.Errorf("open store %s: create %s: %w", s.dir, metaFileName, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return initTx(&stx{Tx: meta.BoltTx(tx)})
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil && !s.noSync {
		err = osfile.Sync(tmp)
	}
	if err == nil {
		err = os.Link(tmp, filepath.Join(s.dir, metaFileName))
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
	}
	if err == nil && !s.noSync {
		err = osfile.Sync(s.dir)
	}
	if err != nil {
		return fmt.Errorf("open store %s: create %s: %w", s.dir, metaFileName, err)
	}
	return nil
}

// initTx writes a new store's records: the format record and the empty
// tree.
func initTx(tx *stx) error {
	rec, err := json.Marshal(formatRecord{Version: FormatVersion, Hash: HashName})
	if err != nil {
		return err
	}
	if err := tx.put(prefixFormat, keyFormat, rec); err != nil {
		return err
	}
	return tx.put(prefixTrees, emptyTreeID[:], emptyTreeEncoding())
}

// initPlane makes an injected plane without a format record a new store,
// or, opening read-only, refuses it with ErrNotFound (as a missing
// meta.db), or with mustExist refuses it with ErrMissing. A plane that
// has records but no format record is not one to start afresh over:
// ErrCorrupt (as a meta.db without one).
func (s *Store) initPlane(mustExist bool) error {
	run := s.update
	if s.readOnly {
		run = s.view
	}
	err := run(func(tx *stx) error {
		if ok, err := tx.has(prefixFormat, keyFormat); err != nil || ok {
			return err
		}
		for _, p := range []meta.Key{prefixTrees, prefixGenerations, spaceWorkspaces.Prefix(nil)} {
			some := false
			if err := tx.Scan(p, meta.ScanOptions{Limit: 1}, func(meta.Key, []byte) error { some = true; return nil }); err != nil {
				return err
			}
			if some {
				return fmt.Errorf("records but no format record: %w", ErrCorrupt)
			}
		}
		if mustExist {
			return fmt.Errorf("no format record and no records: %w", ErrMissing)
		}
		if s.readOnly {
			return fmt.Errorf("read-only: an empty metadata plane: %w", ErrNotFound)
		}
		return initTx(tx)
	})
	if err != nil {
		return fmt.Errorf("open store %s: create metadata: %w", s.dir, err)
	}
	return nil
}

// validate checks the format record.
func (s *Store) validate() error {
	return s.view(func(tx *stx) error {
		v, err := tx.get(prefixFormat, keyFormat)
		if err != nil {
			return fmt.Errorf("open store %s: format record: %w", s.dir, err)
		}
		if v == nil {
			return fmt.Errorf("open store %s: no format record: %w", s.dir, ErrCorrupt)
		}
		var rec formatRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("open store %s: format record: %v: %w", s.dir, err, ErrCorrupt)
		}
		if rec.Version != FormatVersion || rec.Hash != HashName {
			return fmt.Errorf("open store %s: format version %d hash %q, this binary understands version %d hash %q: %w",
				s.dir, rec.Version, rec.Hash, FormatVersion, HashName, ErrIncompatible)
		}
		return nil
	})
}

// boltView and boltUpdate run fn on meta.db itself, for the checks and
// repairs of its bucket layout at open; see view for panics.
func (s *Store) boltView(fn func(tx *bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverCorrupt(&err)
	return s.db.View(fn)
}

func (s *Store) boltUpdate(fn func(tx *bolt.Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverCorrupt(&err)
	return s.db.Update(fn)
}

// validateBuckets checks that meta.db has every bucket (a read-only open
// cannot create those a writable one would on first write, and a missing
// one means damage). A missing format bucket is left for validate to
// report as a missing format record.
func (s *Store) validateBuckets() error {
	return s.boltView(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketFormat) == nil {
			return nil
		}
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				return fmt.Errorf("open store %s: bucket %q missing: %w", s.dir, b, ErrCorrupt)
			}
		}
		return nil
	})
}

// addBuckets creates the addedBuckets missing from an older store of this
// format; anything else is left for validate to report.
func (s *Store) addBuckets() error {
	missing := false
	err := s.boltView(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketFormat) == nil || len(checkFormatTx(&stx{Tx: meta.BoltTx(tx)})) > 0 {
			return nil
		}
		for _, b := range addedBuckets {
			missing = missing || tx.Bucket(b) == nil
		}
		return nil
	})
	if err != nil || !missing {
		return err
	}
	err = s.boltUpdate(func(tx *bolt.Tx) error {
		for _, b := range addedBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("open store %s: add buckets: %w", s.dir, err)
	}
	return nil
}

// maxTmpDirSize is the size of the tmp directory (its directory blocks)
// past which an open makes it again once it is empty.
const maxTmpDirSize = 64 << 10

// removeContents removes everything in directory dir.
func removeContents(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// cleanTmp removes temp files left by a crash.
// isShardName reports whether name is one of the blob plane's temp shards
// (anything else in tmp/ — a merge's scratch git directory — goes whole).
func isShardName(name string) bool {
	n, err := strconv.Atoi(name)
	return err == nil && n >= 0 && n < blobs.TmpShards && strconv.Itoa(n) == name
}

func (s *Store) cleanTmp() error {
	ents, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return fmt.Errorf("open store %s: %w", s.dir, err)
	}
	for _, e := range ents {
		p := filepath.Join(s.tmpDir(), e.Name())
		if fi, err := e.Info(); err == nil && fi.IsDir() && fi.Size() <= maxTmpDirSize && isShardName(e.Name()) {
			// A shard of normal size is kept, emptied: removing
			// a directory that a batch has grown costs 13-25 ms here, and
			// only a grown one needs making again (see below).
			if err := removeContents(p); err != nil {
				return fmt.Errorf("open store %s: clean tmp: %w", s.dir, err)
			}
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("open store %s: clean tmp: %w", s.dir, err)
		}
	}
	// A directory never shrinks: after an import staged 100,000 blobs in
	// tmp, listing it empty still read 3.5 MB of directory blocks at every
	// open (11 ms of a 13 ms fork). Empty now, and nobody else writes in
	// it, it is made again.
	if fi, err := os.Lstat(s.tmpDir()); err == nil && fi.Size() > maxTmpDirSize {
		if err := os.Remove(s.tmpDir()); err == nil {
			if err := os.Mkdir(s.tmpDir(), privateDirMode); err != nil {
				return fmt.Errorf("open store %s: make tmp again: %w", s.dir, err)
			}
		}
	}
	// A meta.db being created by a process that crashed; a fresh one may
	// belong to a concurrent creator, so only old ones go.
	old, _ := filepath.Glob(filepath.Join(s.dir, metaTempPrefix+"*"))
	for _, p := range old {
		if fi, err := os.Stat(p); err == nil && time.Since(fi.ModTime()) > 10*time.Minute {
			os.Remove(p)
		}
	}
	return nil
}

// Close closes meta.db (an injected plane stays open). Blobs need no
// closing.
func (s *Store) Close() error {
	if s.db == nil {
		return nil
	}
	s.closeGitReaders()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", s.dir, err)
	}
	return nil
}

// Dir returns the absolute store directory.
func (s *Store) Dir() string { return s.dir }

// Meta returns the store's metadata plane, for packages that keep their
// own records beside the heads and gates and change both in one
// transaction (window/ keeps its snapshots there and opens, renews and
// fences gates with OpenGateTx...). They must not write this package's
// namespaces except through its ...Tx functions. Its transactions refuse
// writes (ErrReadOnly) on a store opened read-only and turn a bbolt panic
// on a damaged page into ErrCorrupt, as the store's own do.
func (s *Store) Meta() meta.Store { return storeMeta{s} }

// storeMeta is the store's metadata plane (over meta.db or injected),
// with the store's read-only refusal and panic handling.
type storeMeta struct{ s *Store }

func (m storeMeta) View(ctx context.Context, fn func(meta.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.s.viewMeta(fn)
}

func (m storeMeta) Update(ctx context.Context, fn func(meta.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.s.updateMeta(fn)
}

// Now returns the store clock in Unix milliseconds.
func (s *Store) Now() int64 { return s.clock() }

// ReadOnly reports whether the store was opened read-only.
func (s *Store) ReadOnly() bool { return s.readOnly }

// HoldGC keeps GC from running until release is called, and waits for a
// running GC to finish first. An operation that writes objects and then
// references them from a head (commit, capture, import, rebase, land)
// holds it from its first write to its append, so GC never sweeps objects
// that are about to become reachable. Holds may nest and overlap freely;
// GC waits until none is held. release is idempotent.
func (s *Store) HoldGC() (release func()) {
	s.gcMu.Lock()
	for s.gcRunning {
		s.gcCond.Wait()
	}
	s.gcHolds++
	s.gcMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.gcMu.Lock()
			s.gcHolds--
			if s.gcHolds == 0 {
				s.gcCond.Broadcast()
			}
			s.gcMu.Unlock()
		})
	}
}

// beginGC waits until no hold is outstanding and marks GC running; new
// holds wait until endGC.
func (s *Store) beginGC() {
	s.gcMu.Lock()
	for s.gcRunning || s.gcHolds > 0 {
		s.gcCond.Wait()
	}
	s.gcRunning = true
	s.gcMu.Unlock()
}

func (s *Store) endGC() {
	s.gcMu.Lock()
	s.gcRunning = false
	s.gcCond.Broadcast()
	s.gcMu.Unlock()
}

func (s *Store) objectsDir() string { return filepath.Join(s.dir, objectsDirName) }
func (s *Store) tmpDir() string     { return filepath.Join(s.dir, tmpDirName) }
