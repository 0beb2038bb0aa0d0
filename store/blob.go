package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// copyBufSize is large enough for BLAKE3's SIMD paths to hash several
// chunks per call, small enough that many concurrent imports stay cheap.
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// BlobPath returns the path of the object file for id (which may not exist).
// The mount opens it read-only; nobody may write to it.
func (s *Store) BlobPath(id ID) string {
	h := id.String()
	return filepath.Join(s.dir, objectsDirName, h[:2], h[2:])
}

// HasBlob reports whether the object file for id exists. It does not verify
// the content. For a file or symlink base ref it reports whether the
// content is readable: resolved to a stored blob, or the path in the base
// directory still has the ref's fingerprint.
func (s *Store) HasBlob(id ID) (bool, error) {
	_, err := os.Lstat(s.BlobPath(id))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return s.hasRefBlob(id)
	}
	return false, fmt.Errorf("blob %s: %w", id.Short(), err)
}

func (s *Store) hasRefBlob(id ID) (bool, error) {
	st, ok, err := s.blobRef(id)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil || !ok:
		return false, err
	case st.resolved:
		_, err := os.Lstat(s.BlobPath(st.target))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	_, err = s.statRef(id, st.ref)
	if errors.Is(err, ErrBaseChanged) {
		return false, nil
	}
	return err == nil, err
}

// BlobSize returns the length of blob id from its file's metadata (for a
// base ref: its resolution's, or its path's after checking the
// fingerprint).
func (s *Store) BlobSize(id ID) (int64, error) {
	fi, err := os.Lstat(s.BlobPath(id))
	if err == nil {
		return fi.Size(), nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		st, ok, rerr := s.blobRef(id)
		switch {
		case rerr != nil:
			return 0, rerr
		case ok && st.resolved:
			fi, err = os.Lstat(s.BlobPath(st.target))
			if err != nil {
				return 0, blobOpenError(st.target, err)
			}
			return fi.Size(), nil
		case ok:
			sst, err := s.statRef(id, st.ref)
			if err != nil {
				return 0, err
			}
			return sst.Size, nil
		}
	}
	return 0, blobOpenError(id, err)
}

func blobOpenError(id ID, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob %s: %w", id.Short(), ErrNotFound)
	}
	return fmt.Errorf("blob %s: %w", id.Short(), err)
}

// WriteBlob streams r into the store and returns the blob's ID and length.
// Memory use is constant in the content size. The object is durable when
// WriteBlob returns; if it already existed nothing is written.
func (s *Store) WriteBlob(r io.Reader) (ID, int64, error) {
	return s.writeBlob(func(f *os.File) (ID, int64, error) { return copyHashing(f, r) })
}

// WriteBlobBytes stores p.
func (s *Store) WriteBlobBytes(p []byte) (ID, error) {
	id, _, err := s.WriteBlob(bytes.NewReader(p))
	return id, err
}

// WriteBlobFile stores the content of the regular file at path. On
// filesystems that support it the data is cloned (FICLONE) rather than
// copied; the clone is still hashed, so the ID always matches what was
// stored even if the source changes meanwhile. A file with holes (at least
// sparseMinHoles bytes) is stored as a sparse blob: only its data is read,
// hashed and written.
func (s *Store) WriteBlobFile(path string) (ID, int64, error) {
	return s.writeBlob(cloneOrCopy(path))
}

// fillFunc writes content into a fresh temp file and returns the ID of
// exactly the bytes that end up in it, and their length.
type fillFunc func(f *os.File) (ID, int64, error)

func copyHashing(f *os.File, r io.Reader) (ID, int64, error) {
	h := NewBlobHasher()
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	n, err := io.CopyBuffer(io.MultiWriter(f, h), struct{ io.Reader }{r}, *bp)
	if err != nil {
		return ID{}, n, fmt.Errorf("write blob: %w", err)
	}
	return h.Sum(), n, nil
}

func cloneOrCopy(path string) fillFunc {
	return func(f *os.File) (ID, int64, error) {
		src, err := osfile.Open(path, os.O_RDONLY, 0)
		if err != nil {
			return ID{}, 0, fmt.Errorf("write blob from %s: %w", path, err)
		}
		defer src.Close()
		if unix.IoctlFileClone(int(f.Fd()), int(src.Fd())) == nil {
			// Hash our private clone, not the source, which may change.
			id, n, err := hashOpenFile(f)
			if err != nil {
				return ID{}, n, fmt.Errorf("write blob from %s: hash clone: %w", path, err)
			}
			return id, n, nil
		}
		fi, err := src.Stat()
		if err != nil {
			return ID{}, 0, fmt.Errorf("write blob from %s: %w", path, err)
		}
		sparse, err := isSparse(src, fi.Size())
		if err != nil {
			return ID{}, 0, fmt.Errorf("write blob from %s: %w", path, err)
		}
		if sparse {
			// Only the data is read, hashed and written; what was read is
			// what is hashed, so a change meanwhile cannot mismatch.
			h := newSparseHasher()
			n, err := scanSparse(src, fi.Size(), h, func(p []byte, off int64) error {
				_, err := f.WriteAt(p, off)
				return err
			})
			if err == nil {
				err = f.Truncate(n)
			}
			if err != nil {
				return ID{}, n, fmt.Errorf("write blob from %s: %w", path, err)
			}
			return h.Sum(), n, nil
		}
		id, n, err := copyHashing(f, src)
		if err != nil {
			return ID{}, n, fmt.Errorf("write blob from %s: %w", path, err)
		}
		return id, n, nil
	}
}

// writeTemp fills a new temp file in STORE/tmp and returns its path, the
// content's ID and length. The temp file is closed, made read-only
// (blobMode) and, unless
// sync is false, fsynced. On error nothing is left behind.
func (s *Store) writeTemp(fill fillFunc, sync bool) (string, ID, int64, error) {
	if s.readOnly {
		return "", ID{}, 0, fmt.Errorf("write blob: %w", ErrReadOnly)
	}
	dir, err := s.tmpShard()
	if err != nil {
		return "", ID{}, 0, fmt.Errorf("write blob: %w", err)
	}
	f, err := osfile.CreateTemp(dir, "blob-")
	if err != nil {
		return "", ID{}, 0, fmt.Errorf("write blob: %w", err)
	}
	name := f.Name()
	id, n, err := fill(f)
	if err == nil {
		err = fail("blob.before-fsync")
	}
	if err == nil && sync && !s.noSync {
		if err = f.Sync(); err != nil {
			err = fmt.Errorf("write blob: fsync: %w", err)
		}
	}
	if err == nil {
		if err = f.Chmod(blobMode); err != nil {
			err = fmt.Errorf("write blob: %w", err)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write blob: close: %w", cerr)
	}
	if err != nil {
		os.Remove(name)
		return "", ID{}, 0, err
	}
	return name, id, n, nil
}

// tmpShards is how many subdirectories of STORE/tmp hold temp blob files.
// A capture writes blobs from several goroutines, and creates in one
// directory serialise on its lock: perf of the lease end after an untar
// of the Go tree put 21% of the daemon's samples in rwsem_spin_on_owner.
const tmpShards = 8

// tmpShard returns the next subdirectory of tmp for a temp blob file,
// making it on first use (an open of the store empties the shards, and
// makes again those a batch has grown: cleanTmp).
func (s *Store) tmpShard() (string, error) {
	i := s.tmpNext.Add(1) % tmpShards
	d := filepath.Join(s.tmpDir(), strconv.FormatUint(i, 10))
	if !s.tmpMade[i].Load() {
		if err := os.Mkdir(d, privateDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		s.tmpMade[i].Store(true)
	}
	return d, nil
}

// writeBlob is the durable single-blob path: temp → fsync → rename → fsync
// directory.
func (s *Store) writeBlob(fill fillFunc) (ID, int64, error) {
	defer s.HoldGC()()
	tmp, id, n, err := s.writeTemp(fill, true)
	if err != nil {
		return ID{}, 0, err
	}
	if err := s.publishTemp(tmp, id, true); err != nil {
		return ID{}, 0, err
	}
	return id, n, nil
}

// publishTemp renames a complete temp file into objects/. If the object
// already exists (every existing object is durable) the temp is dropped.
// With sync, the fan-out directory is fsynced so the rename survives a
// crash.
func (s *Store) publishTemp(tmp string, id ID, sync bool) error {
	final := s.BlobPath(id)
	if _, err := os.Lstat(final); err == nil {
		os.Remove(tmp)
		return nil
	}
	if err := fail("blob.before-rename"); err != nil {
		os.Remove(tmp)
		return err
	}
	fan := filepath.Dir(final)
	if err := os.Mkdir(fan, privateDirMode); err == nil {
		if sync && !s.noSync {
			if err := syncPath(s.objectsDir()); err != nil {
				os.Remove(tmp)
				return fmt.Errorf("write blob %s: %w", id.Short(), err)
			}
		}
	} else if !errors.Is(err, fs.ErrExist) {
		os.Remove(tmp)
		return fmt.Errorf("write blob %s: %w", id.Short(), err)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write blob %s: %w", id.Short(), err)
	}
	if err := fail("blob.before-dirsync"); err != nil {
		return err
	}
	if sync && !s.noSync {
		if err := syncPath(fan); err != nil {
			return fmt.Errorf("write blob %s: %w", id.Short(), err)
		}
	}
	return nil
}

// OpenBlob opens blob id for streaming. The reader verifies the content
// against id as it goes: the Read that reaches the end returns an error
// wrapping ErrCorrupt instead of io.EOF if the content does not match.
//
// For a base ref the resolution is opened, or else the file in the base
// directory after checking its fingerprint; the Read that reaches its end
// checks the fingerprint again (ErrBaseChanged if a write intervened).
func (s *Store) OpenBlob(id ID) (io.ReadCloser, error) {
	rc, err := s.openBlobObject(id)
	if !errors.Is(err, ErrNotFound) {
		return rc, err
	}
	st, ok, rerr := s.blobRef(id)
	switch {
	case rerr != nil:
		return nil, rerr
	case !ok:
		return nil, err
	case st.resolved:
		return s.openBlobObject(st.target)
	case st.ref.Kind == KindSymlink:
		b, err := s.readRefLink(id, st.ref)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	f, err := s.openRefFile(id, st.ref)
	if err != nil {
		return nil, err
	}
	return &refReader{f: f, id: id, ref: st.ref}, nil
}

// openBlobObject is OpenBlob of an object file.
func (s *Store) openBlobObject(id ID) (io.ReadCloser, error) {
	f, err := osfile.Open(s.BlobPath(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, blobOpenError(id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, blobOpenError(id, err)
	}
	sparse, err := isSparse(f, fi.Size())
	if err != nil {
		f.Close()
		return nil, blobOpenError(id, err)
	}
	var h contentHasher = NewBlobHasher()
	if sparse {
		h = newSparseHasher()
	}
	return &verifyingReader{f: f, h: h, id: id, size: fi.Size()}, nil
}

// verifyingReader hashes what it reads and checks the ID at EOF (in the
// encoding the file's holes suggest; if that does not match, the whole
// file is checked again by verifyObject, which tries the other).
type verifyingReader struct {
	f    *os.File
	h    contentHasher
	id   ID
	size int64 // from stat at open; the file is immutable
	n    int64
	err  error // sticky terminal error (io.EOF or corruption)
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.f.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case err == io.EOF:
		switch {
		case v.n != v.size:
			v.err = fmt.Errorf("%w: blob %s: read %d bytes, file has %d", ErrCorrupt, v.id.Short(), v.n, v.size)
		case v.h.Sum() != v.id:
			if verr := verifyObject(v.f, v.id); verr != nil {
				v.err = verr
			} else {
				v.err = io.EOF
			}
		default:
			v.err = io.EOF
		}
		return n, v.err
	case err != nil:
		return n, fmt.Errorf("read blob %s: %w", v.id.Short(), err)
	}
	return n, nil
}

func (v *verifyingReader) Close() error { return v.f.Close() }

// ReadBlob returns the whole content of blob id, verified. For a base ref
// it returns the resolution's content, or else the file's content (a
// symlink's target) in the base directory, checked against the ref's
// fingerprint before and after reading: ErrBaseChanged if it differs.
func (s *Store) ReadBlob(id ID) ([]byte, error) {
	b, err := s.readBlobObject(id)
	if !errors.Is(err, ErrNotFound) {
		return b, err
	}
	st, ok, rerr := s.blobRef(id)
	switch {
	case rerr != nil:
		return nil, rerr
	case !ok:
		return nil, err
	case st.resolved:
		return s.readBlobObject(st.target)
	}
	return s.readRef(id, st.ref)
}

// readBlobObject is ReadBlob of an object file.
func (s *Store) readBlobObject(id ID) ([]byte, error) {
	b, err := os.ReadFile(s.BlobPath(id))
	if err != nil {
		return nil, blobOpenError(id, err)
	}
	if got := BlobID(b); got != id && SparseBlobID(b) != id {
		return nil, fmt.Errorf("%w: blob %s: content hashes to %s", ErrCorrupt, id.Short(), got.Short())
	}
	return b, nil
}

// BlobBatch writes many blobs and syncs them together at Commit instead of
// one by one. Blobs stay in STORE/tmp until Commit, so an object file in
// objects/ is always complete and durable; callers must publish metadata
// that references batch blobs only after Commit returns. Its methods are
// safe for concurrent use.
type BlobBatch struct {
	s *Store

	// mu protects pending.
	mu sync.Mutex
	// pending maps each new blob to its synced-at-Commit temp file.
	pending map[ID]string
}

// NewBlobBatch starts a batch.
func (s *Store) NewBlobBatch() *BlobBatch {
	return &BlobBatch{s: s, pending: make(map[ID]string)}
}

// WriteBlob streams r into the batch.
func (b *BlobBatch) WriteBlob(r io.Reader) (ID, int64, error) {
	return b.write(func(f *os.File) (ID, int64, error) { return copyHashing(f, r) })
}

// WriteBlobFile adds the content of the file at path (cloned if possible).
func (b *BlobBatch) WriteBlobFile(path string) (ID, int64, error) {
	return b.write(cloneOrCopy(path))
}

// WriteBlobBytes adds p.
func (b *BlobBatch) WriteBlobBytes(p []byte) (ID, error) {
	id, _, err := b.WriteBlob(bytes.NewReader(p))
	return id, err
}

func (b *BlobBatch) write(fill fillFunc) (ID, int64, error) {
	tmp, id, n, err := b.s.writeTemp(fill, false)
	if err != nil {
		return ID{}, 0, err
	}
	if ok, _ := b.s.HasBlob(id); ok {
		os.Remove(tmp)
		return id, n, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.pending[id]; dup {
		os.Remove(tmp)
		return id, n, nil
	}
	b.pending[id] = tmp
	return id, n, nil
}

// syncfsThreshold is the batch size from which Commit flushes the whole
// filesystem once instead of fsyncing each file: syncfs also flushes
// unrelated dirty data, which costs more than a few fsyncs on a busy
// machine but far less than thousands.
const syncfsThreshold = 64

// Commit makes every blob of the batch durable and visible: the data is
// synced (each file, or one syncfs for big batches), then renamed into
// objects/, then the directory entries are synced. The batch can be used
// again afterwards. On error the blobs not yet published stay pending;
// call Commit again or Abort.
func (b *BlobBatch) Commit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		return nil
	}
	s := b.s
	defer s.HoldGC()()
	if err := fail("batch.before-sync"); err != nil {
		return err
	}
	useSyncfs := len(b.pending) >= syncfsThreshold
	var err error
	if useSyncfs {
		err = s.syncfs()
	} else {
		err = s.syncFiles(b.pending)
	}
	if err != nil {
		return fmt.Errorf("commit blob batch: %w", err)
	}
	if err := fail("batch.before-rename"); err != nil {
		return err
	}
	// Renames go a few at a time: each waits on its fan-out directory's
	// lock and journal, and a big batch (an import) renames thousands.
	var (
		dmu  sync.Mutex // guards dirs and b.pending's deletions
		dirs = map[string]bool{}
		g    errgroup.Group
	)
	g.SetLimit(renameConcurrency)
	type pendingBlob struct {
		id  ID
		tmp string
	}
	todo := make([]pendingBlob, 0, len(b.pending))
	for id, tmp := range b.pending {
		todo = append(todo, pendingBlob{id, tmp})
	}
	for _, p := range todo {
		id, tmp := p.id, p.tmp
		g.Go(func() error {
			fan := filepath.Dir(s.BlobPath(id))
			_, statErr := os.Lstat(fan)
			err := s.publishTemp(tmp, id, false)
			dmu.Lock()
			if statErr != nil {
				dirs[s.objectsDir()] = true // a new fan-out entry
			}
			dirs[fan] = true
			delete(b.pending, id) // published, or its temp is gone
			dmu.Unlock()
			if err != nil {
				return fmt.Errorf("commit blob batch: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if useSyncfs {
		err = s.syncfs()
	} else if !s.noSync {
		ds := make([]string, 0, len(dirs))
		for d := range dirs {
			ds = append(ds, d)
		}
		err = syncPathsConcurrently(ds)
	}
	if err != nil {
		return fmt.Errorf("commit blob batch: %w", err)
	}
	return nil
}

// renameConcurrency bounds the renames of a batch commit in flight.
const renameConcurrency = 4

// syncFiles fsyncs the temp files of a small batch concurrently, so the
// file system can merge their journal commits.
func (s *Store) syncFiles(pending map[ID]string) error {
	if s.noSync {
		return nil
	}
	ps := make([]string, 0, len(pending))
	for _, p := range pending {
		ps = append(ps, p)
	}
	return syncPathsConcurrently(ps)
}

// syncConcurrency bounds the fsyncs of a batch in flight at once. Each
// waits mostly for the file system's journal commit, which concurrent
// fsyncs share: a capture of 10 files syncs them in one wave.
const syncConcurrency = 16

// syncPathsConcurrently fsyncs files or directories by name, up to
// syncConcurrency at a time.
func syncPathsConcurrently(pending []string) error {
	if len(pending) == 1 {
		return syncPath(pending[0])
	}
	workers := min(len(pending), syncConcurrency)
	paths := make(chan string)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for p := range paths {
				if err := syncPath(p); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for _, p := range pending {
		paths <- p
	}
	close(paths)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Abort drops every blob not yet committed.
func (b *BlobBatch) Abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, tmp := range b.pending {
		os.Remove(tmp)
		delete(b.pending, id)
	}
}

// syncfs flushes the filesystem holding the store.
func (s *Store) syncfs() error {
	if s.noSync {
		return nil
	}
	f, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", s.dir, err)
	}
	return nil
}
