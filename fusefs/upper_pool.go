package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// upperPool keeps empty upper files created ahead of time, so that a
// CREATE renames one into place instead of allocating an inode on the
// request path. On a busy ext4 the allocation is the dominant cost of a
// create: perf of the daemon during an untar put 22% of its samples in
// createUpper's open(O_CREAT), nearly all in ext4's scan past recently
// deleted inodes (recently_deleted), under the overlay lock. A rename in
// the same directory allocates nothing.
//
// Pool files live in the upper directory as pool-N (not a number, so a
// later open of the state directory deletes any left over as strays); the
// snapshot's directory sync covers their renames like any other upper file
// name. The pool keeps names, not descriptors: opening an existing file
// allocates nothing, and a mount does not hold 64 descriptors that appear
// and vanish as the filler runs (go-fuse's posix FdLeak check counts the
// process's descriptors around a workload and saw the filler's).
type upperPool struct {
	dir string

	mu      sync.Mutex
	names   []string
	next    int  // sequence for pool file names
	stopped bool // stop was called: no new files

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

const (
	poolSize     = 64 // files kept ready
	poolLowWater = 32 // refill when fewer remain
)

// startUpperPool starts filling a pool in dir.
func startUpperPool(dir string) *upperPool {
	p := &upperPool{dir: dir, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	p.signal()
	return p
}

func (p *upperPool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *upperPool) run() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		}
		for p.fill() {
		}
	}
}

// fill adds one file; it reports whether more are wanted.
func (p *upperPool) fill() bool {
	p.mu.Lock()
	if p.stopped || len(p.names) >= poolSize {
		p.mu.Unlock()
		return false
	}
	name := filepath.Join(p.dir, fmt.Sprintf("pool-%d", p.next))
	p.next++
	p.mu.Unlock()
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return false // the request path creates its own files meanwhile
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		os.Remove(name)
		return false
	}
	p.names = append(p.names, name)
	return len(p.names) < poolSize
}

// take renames a pool file to path and returns it open, or nil if the
// pool is empty (or the rename failed).
func (p *upperPool) take(path string) *os.File {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	n := len(p.names)
	if n == 0 {
		p.mu.Unlock()
		p.signal()
		return nil
	}
	name := p.names[n-1]
	p.names = p.names[:n-1]
	p.mu.Unlock()
	if n-1 < poolLowWater {
		p.signal()
	}
	// rename(2) itself: os.Rename would first lstat path to refuse
	// replacing a directory, a negative lookup in the upper directory that
	// cost a third of the rename (perf of create + unlink of 10,000 files).
	if err := unix.Rename(name, path); err != nil {
		os.Remove(name)
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		os.Remove(path)
		return nil
	}
	return f
}

// close stops the filler and deletes the files left in the pool.
func (p *upperPool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		<-p.done
		return
	}
	p.stopped = true
	names := p.names
	p.names = nil
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	for _, name := range names {
		os.Remove(name)
	}
}
