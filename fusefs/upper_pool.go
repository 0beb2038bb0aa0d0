package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
// later open of the state directory deletes any left over as strays) and
// are kept open; the snapshot's directory sync covers their renames like
// any other upper file name.
type upperPool struct {
	dir string

	mu      sync.Mutex
	files   []*os.File
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
	if p.stopped || len(p.files) >= poolSize {
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		f.Close()
		os.Remove(name)
		return false
	}
	p.files = append(p.files, f)
	return len(p.files) < poolSize
}

// take renames a pool file to path and returns it open, or nil if the
// pool is empty (or the rename failed).
func (p *upperPool) take(path string) *os.File {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	n := len(p.files)
	if n == 0 {
		p.mu.Unlock()
		p.signal()
		return nil
	}
	f := p.files[n-1]
	p.files = p.files[:n-1]
	p.mu.Unlock()
	if n-1 < poolLowWater {
		p.signal()
	}
	if err := os.Rename(f.Name(), path); err != nil {
		f.Close()
		os.Remove(f.Name())
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
	files := p.files
	p.files = nil
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	for _, f := range files {
		f.Close()
		os.Remove(f.Name())
	}
}
