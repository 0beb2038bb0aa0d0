package blobs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// DirBatch is a Dir's Batch. Objects stay in the temp directory until
// Commit, so an object file is always complete and durable.
type DirBatch struct {
	d *Dir

	// mu protects pending.
	mu sync.Mutex
	// pending maps each new object to its synced-at-Commit temp file.
	pending map[ID]string
}

var _ Batch = (*DirBatch)(nil)

// NewBatch starts a batch.
func (d *Dir) NewBatch() Batch { return d.NewDirBatch() }

// NewDirBatch is NewBatch with its concrete type.
func (d *Dir) NewDirBatch() *DirBatch {
	return &DirBatch{d: d, pending: make(map[ID]string)}
}

// Put streams r into the batch.
func (b *DirBatch) Put(r io.Reader) (ID, int64, error) {
	return b.put(func(f *os.File) (ID, int64, error) { return copyHashing(f, r) })
}

// PutFile adds the content of the file at path (cloned if possible).
func (b *DirBatch) PutFile(path string) (ID, int64, error) {
	return b.put(cloneOrCopy(path))
}

// PutBytes adds p.
func (b *DirBatch) PutBytes(p []byte) (ID, error) {
	id, _, err := b.Put(bytes.NewReader(p))
	return id, err
}

func (b *DirBatch) put(fill fillFunc) (ID, int64, error) {
	tmp, id, n, err := b.d.writeTemp(fill, false)
	if err != nil {
		return ID{}, 0, err
	}
	if _, err := os.Lstat(b.d.Path(id)); err == nil {
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
// file system once instead of fsyncing each file: syncfs also flushes
// unrelated dirty data, which costs more than a few fsyncs on a busy
// machine but far less than thousands.
const syncfsThreshold = 64

// renameConcurrency bounds the renames of a batch commit in flight.
const renameConcurrency = 4

// syncConcurrency bounds the fsyncs of a batch in flight at once. Each
// waits mostly for the file system's journal commit, which concurrent
// fsyncs share: a capture of 10 files syncs them in one wave.
const syncConcurrency = 16

// Commit makes every object of the batch durable and visible: the data is
// synced (each file, or one syncfs for big batches), then renamed into
// place, then the directory entries are synced.
func (b *DirBatch) Commit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		return nil
	}
	d := b.d
	if err := d.fail("batch.before-sync"); err != nil {
		return err
	}
	useSyncfs := len(b.pending) >= syncfsThreshold
	var err error
	if useSyncfs {
		err = d.syncfs()
	} else if !d.opt.NoSync {
		ps := make([]string, 0, len(b.pending))
		for _, p := range b.pending {
			ps = append(ps, p)
		}
		err = syncPaths(ps)
	}
	if err != nil {
		return fmt.Errorf("commit blob batch: %w", err)
	}
	if err := d.fail("batch.before-rename"); err != nil {
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
		g.Go(func() error {
			fan := filepath.Dir(d.Path(p.id))
			_, statErr := os.Lstat(fan)
			err := d.publishTemp(p.tmp, p.id, false)
			dmu.Lock()
			if statErr != nil {
				dirs[d.dir] = true // a new fan-out entry
			}
			dirs[fan] = true
			delete(b.pending, p.id) // published, or its temp is gone
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
		err = d.syncfs()
	} else if !d.opt.NoSync {
		ds := make([]string, 0, len(dirs))
		for p := range dirs {
			ds = append(ds, p)
		}
		err = syncPaths(ds)
	}
	if err != nil {
		return fmt.Errorf("commit blob batch: %w", err)
	}
	return nil
}

// syncPaths fsyncs files or directories by name, up to syncConcurrency at
// a time, and returns the first error.
func syncPaths(paths []string) error {
	if len(paths) == 1 {
		return osfile.Sync(paths[0])
	}
	var g errgroup.Group
	g.SetLimit(syncConcurrency)
	for _, p := range paths {
		g.Go(func() error { return osfile.Sync(p) })
	}
	return g.Wait()
}

// Abort drops every object not yet committed.
func (b *DirBatch) Abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, tmp := range b.pending {
		os.Remove(tmp)
		delete(b.pending, id)
	}
}
