package blobs

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
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// Modes of what a Dir makes: private to its owner; objects are read-only.
const (
	dirMode  = 0o700
	blobMode = 0o400
)

// TmpShards is how many subdirectories of the temp directory hold temp
// object files (named 0 … TmpShards-1). A capture writes objects from
// several goroutines, and creates in one directory serialise on its lock:
// perf of the lease end after an untar of the Go tree put 21% of the
// daemon's samples in rwsem_spin_on_owner.
const TmpShards = 8

// Options configure OpenDir.
type Options struct {
	// Tmp is the directory temp object files are written in (on the same
	// file system as the objects); it must exist unless ReadOnly. Its
	// owner empties it while no Dir writes (the store does at open).
	Tmp string
	// ReadOnly refuses every write with ErrReadOnly.
	ReadOnly bool
	// NoSync skips every fsync. Tests only: a crash loses data.
	NoSync bool
	// Fail, if set, is asked at each durable step (the names in
	// store/failpoint.go: blob.before-fsync, blob.before-rename,
	// blob.before-dirsync, batch.before-sync, batch.before-rename) and the
	// write stops with its error. A crash-test hook.
	Fail func(step string) error
}

// Dir is the local blob plane: objects as files under one directory,
// OBJ/ab/cdef… for the ID abcdef…. All methods are safe for concurrent
// use.
type Dir struct {
	dir string // the objects directory
	opt Options

	// verified holds the IDs (ID -> struct{}) whose files OpenFile has
	// checked in this process.
	verified sync.Map

	tmpNext atomic.Uint64          // next tmp shard (tmpShard)
	tmpMade [TmpShards]atomic.Bool // tmp shards made by this process
}

var _ Store = (*Dir)(nil)

// OpenDir returns the plane kept in directory dir, which must exist
// (the store makes it private, 0700, with its own directory).
func OpenDir(dir string, opt Options) *Dir {
	return &Dir{dir: dir, opt: opt}
}

func (d *Dir) fail(step string) error {
	if d.opt.Fail != nil {
		return d.opt.Fail(step)
	}
	return nil
}

// Path returns the path of the file of object id (which may not exist).
// The mount opens it read-only; nobody may write to it.
func (d *Dir) Path(id ID) string {
	h := id.String()
	return filepath.Join(d.dir, h[:2], h[2:])
}

func openError(id ID, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return &missingError{id}
	}
	return fmt.Errorf("blob %s: %w", id.Short(), err)
}

// missingError is "blob ID: not found", formatted only when printed: the
// store asks the plane first for every blob, and base references of
// in-place workspaces are found only after the plane's miss.
type missingError struct{ id ID }

func (e *missingError) Error() string { return "blob " + e.id.Short() + ": " + ErrNotFound.Error() }

func (e *missingError) Unwrap() error { return ErrNotFound }

// Stat returns object id's size from its file's metadata.
func (d *Dir) Stat(id ID) (Info, error) {
	fi, err := os.Lstat(d.Path(id))
	if err != nil {
		return Info{}, openError(id, err)
	}
	return Info{ID: id, Size: fi.Size(), ModTime: storedAt(fi)}, nil
}

// Put streams r into the plane. Memory use is constant in the content
// size.
func (d *Dir) Put(r io.Reader) (ID, int64, error) {
	return d.put(func(f *os.File) (ID, int64, error) { return copyHashing(f, r) })
}

// PutBytes stores p.
func (d *Dir) PutBytes(p []byte) (ID, error) {
	id, _, err := d.Put(bytes.NewReader(p))
	return id, err
}

// PutFile stores the content of the regular file at path. On file systems
// that support it the data is cloned (FICLONE) rather than copied; the
// clone is still hashed, so the ID always matches what was stored even if
// the source changes meanwhile. A file with holes (at least 1 MiB) is
// stored sparse: only its data is read, hashed and written. A big dense
// file is copied with direct I/O (direct.go).
func (d *Dir) PutFile(path string) (ID, int64, error) {
	return d.put(cloneOrCopy(path))
}

// fillFunc writes content into a fresh temp file and returns the ID of
// exactly the bytes that end up in it, and their length.
type fillFunc func(f *os.File) (ID, int64, error)

func copyHashing(f *os.File, r io.Reader) (ID, int64, error) {
	h := NewHasher()
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
		if fi.Size() >= directMin {
			id, n, err := copyHashingDirect(f, src, fi.Size())
			if !errors.Is(err, errNoDirect) {
				if err != nil {
					return ID{}, n, fmt.Errorf("write blob from %s: %w", path, err)
				}
				return id, n, nil
			}
		}
		id, n, err := copyHashing(f, src)
		if err != nil {
			return ID{}, n, fmt.Errorf("write blob from %s: %w", path, err)
		}
		return id, n, nil
	}
}

// writeTemp fills a new temp file and returns its path, the content's ID
// and length. The temp file is closed, made read-only (blobMode) and,
// unless sync is false, fsynced. On error nothing is left behind.
func (d *Dir) writeTemp(fill fillFunc, sync bool) (string, ID, int64, error) {
	if d.opt.ReadOnly {
		return "", ID{}, 0, fmt.Errorf("write blob: %w", ErrReadOnly)
	}
	return d.writeTempAlways(fill, sync)
}

// writeTempAlways is writeTemp also on a read-only plane (a cache fill,
// which changes no content).
func (d *Dir) writeTempAlways(fill fillFunc, sync bool) (string, ID, int64, error) {
	dir, err := d.tmpShard()
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
		err = d.fail("blob.before-fsync")
	}
	if err == nil && sync && !d.opt.NoSync {
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

// tmpShard returns the next subdirectory of the temp directory for a temp
// object file, making it on first use.
func (d *Dir) tmpShard() (string, error) {
	i := d.tmpNext.Add(1) % TmpShards
	p := filepath.Join(d.opt.Tmp, strconv.FormatUint(i, 10))
	if !d.tmpMade[i].Load() {
		if err := os.Mkdir(p, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		d.tmpMade[i].Store(true)
	}
	return p, nil
}

// put is the durable single-object path: temp → fsync → rename → fsync
// directory.
func (d *Dir) put(fill fillFunc) (ID, int64, error) {
	tmp, id, n, err := d.writeTemp(fill, true)
	if err != nil {
		return ID{}, 0, err
	}
	if err := d.publishTemp(tmp, id, true); err != nil {
		return ID{}, 0, err
	}
	return id, n, nil
}

// publishTemp renames a complete temp file into place. If the object
// already exists (every existing object is durable) the temp is dropped.
// With sync, the fan-out directory is fsynced so the rename survives a
// crash.
func (d *Dir) publishTemp(tmp string, id ID, sync bool) error {
	final := d.Path(id)
	if _, err := os.Lstat(final); err == nil {
		os.Remove(tmp)
		return nil
	}
	if err := d.fail("blob.before-rename"); err != nil {
		os.Remove(tmp)
		return err
	}
	fan := filepath.Dir(final)
	if err := os.Mkdir(fan, dirMode); err == nil {
		if sync && !d.opt.NoSync {
			if err := osfile.Sync(d.dir); err != nil {
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
	if err := d.fail("blob.before-dirsync"); err != nil {
		return err
	}
	if sync && !d.opt.NoSync {
		if err := osfile.Sync(fan); err != nil {
			return fmt.Errorf("write blob %s: %w", id.Short(), err)
		}
	}
	return nil
}

// Open opens object id for streaming, verifying as it goes.
func (d *Dir) Open(id ID) (io.ReadCloser, error) {
	f, err := osfile.Open(d.Path(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, openError(id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, openError(id, err)
	}
	sparse, err := isSparse(f, fi.Size())
	if err != nil {
		f.Close()
		return nil, openError(id, err)
	}
	var h contentHasher = NewHasher()
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

// Read returns object id's whole content, verified.
func (d *Dir) Read(id ID) ([]byte, error) {
	b, err := os.ReadFile(d.Path(id))
	if err != nil {
		return nil, openError(id, err)
	}
	if got := Sum(b); got != id && SparseSum(b) != id {
		return nil, fmt.Errorf("%w: blob %s: content hashes to %s", ErrCorrupt, id.Short(), got.Short())
	}
	return b, nil
}

// OpenFile opens object id's file for reading by offset (the mount serves
// and passes through such files). The first open of an object in this
// process reads it whole (a sparse one: its data) and checks its address;
// later opens trust that check, as object files are immutable (0400,
// replaced only by rename). An object that does not match is an error
// wrapping ErrCorrupt, never served.
func (d *Dir) OpenFile(id ID) (*os.File, error) {
	f, err := osfile.Open(d.Path(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, openError(id, err)
	}
	if _, ok := d.verified.Load(id); ok {
		return f, nil
	}
	if err := verifyObject(f, id); err != nil {
		f.Close()
		if errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		return nil, fmt.Errorf("verify blob %s: %w", id.Short(), err)
	}
	d.verified.Store(id, struct{}{})
	return f, nil
}

// Verify checks object id's address once per process (see OpenFile), so
// that callers can pay for the check before taking their own locks.
func (d *Dir) Verify(id ID) error {
	if _, ok := d.verified.Load(id); ok {
		return nil
	}
	f, err := d.OpenFile(id)
	if err != nil {
		return err
	}
	return f.Close()
}

// ReadVerified returns object id's content when it is size bytes long,
// checked against its address once per process as OpenFile checks it, but
// reading the file once: an object not yet verified is hashed from the
// bytes read (a small file's first open reads it whole anyway). Content of
// another length gives nil and no error once the object is verified (the
// caller then reads it otherwise); a mismatch is an error wrapping
// ErrCorrupt, as from OpenFile. Meant for small objects: size bytes are
// held in memory.
func (d *Dir) ReadVerified(id ID, size int64) ([]byte, error) {
	f, err := osfile.Open(d.Path(id), os.O_RDONLY, 0)
	if err != nil {
		return nil, openError(id, err)
	}
	defer f.Close()
	b := make([]byte, size)
	n, rerr := f.ReadAt(b, 0)
	whole := rerr == nil && int64(n) == size
	if whole {
		var one [1]byte // nothing may follow
		m, _ := f.ReadAt(one[:], size)
		whole = m == 0
	}
	if _, ok := d.verified.Load(id); ok {
		if !whole {
			return nil, nil
		}
		return b, nil
	}
	if whole && Sum(b) == id {
		d.verified.Store(id, struct{}{})
		return b, nil
	}
	// Another length, a sparse encoding, a read error or corruption: the
	// full check decides, as OpenFile's.
	if err := verifyObject(f, id); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		return nil, fmt.Errorf("verify blob %s: %w", id.Short(), err)
	}
	d.verified.Store(id, struct{}{})
	if !whole {
		return nil, nil
	}
	return b, nil
}

// CopyTo writes object id's content into dst (empty, opened for writing)
// and keeps its holes: a sparse object's holes are holes in dst. The
// content is verified first (once per process, as OpenFile).
func (d *Dir) CopyTo(id ID, dst *os.File) (int64, error) {
	f, err := d.OpenFile(id)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, openError(id, err)
	}
	if err := osfile.CopySparse(dst, f, fi.Size()); err != nil {
		return 0, fmt.Errorf("copy blob %s: %w", id.Short(), err)
	}
	return fi.Size(), nil
}

// List calls fn for every object file whose name is an ID (see Walk for
// the others).
func (d *Dir) List(fn func(Info) error) error {
	return d.Walk(func(id ID, _ string, fi fs.FileInfo, nameErr error) error {
		if nameErr != nil {
			return nil
		}
		return fn(Info{ID: id, Size: fi.Size(), ModTime: storedAt(fi)})
	})
}

// Walk calls fn for every file in the plane's directory, with its path and
// the ID its path names, or nameErr if the path is not an object's (what
// fsck reports).
func (d *Dir) Walk(fn func(id ID, path string, fi fs.FileInfo, nameErr error) error) error {
	fans, err := os.ReadDir(d.dir)
	if err != nil {
		return err
	}
	for _, fan := range fans {
		fanPath := filepath.Join(d.dir, fan.Name())
		if !fan.IsDir() {
			fi, _ := fan.Info()
			if err := fn(ID{}, fanPath, fi, errors.New("not an object fan-out directory")); err != nil {
				return err
			}
			continue
		}
		ents, err := os.ReadDir(fanPath)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := filepath.Join(fanPath, e.Name())
			fi, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed concurrently
			}
			if err != nil {
				return err
			}
			id, perr := parseID(fan.Name() + e.Name())
			if perr == nil && !fi.Mode().IsRegular() {
				perr = errors.New("not a regular file")
			}
			if err := fn(id, p, fi, perr); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseID parses an object name: 64 hex characters.
func parseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*IDSize {
		return id, fmt.Errorf("%q is not %d hex characters", s, 2*IDSize)
	}
	if _, err := hexDecode(id[:], s); err != nil {
		return id, fmt.Errorf("%q: %v", s, err)
	}
	return id, nil
}

// Delete removes object id; an absent object is no error.
func (d *Dir) Delete(id ID) error {
	if d.opt.ReadOnly {
		return fmt.Errorf("delete blob %s: %w", id.Short(), ErrReadOnly)
	}
	if err := os.Remove(d.Path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete blob %s: %w", id.Short(), err)
	}
	d.verified.Delete(id)
	return nil
}

// syncfs flushes the file system holding the plane.
func (d *Dir) syncfs() error {
	if d.opt.NoSync {
		return nil
	}
	f, err := os.Open(d.dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", d.dir, err)
	}
	return nil
}

// storedAt is when a blob file became an object, as far as GC's grace for
// objects written during a sweep is concerned: the later of its mtime and
// its ctime, which a write, the chmod to the object mode and a rename or
// link into objects/ all set (a file cloned or linked in may keep an older
// mtime).
func storedAt(fi os.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if c := time.Unix(0, st.Ctim.Nano()); c.After(fi.ModTime()) {
			return c
		}
	}
	return fi.ModTime()
}
