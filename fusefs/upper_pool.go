package fusefs

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// upperPool keeps empty upper files created ahead of time, so that a
// CREATE opens one instead of allocating an inode on the request path. On
// a busy ext4 the allocation is the dominant cost of a create: perf of the
// daemon during an untar put 22% of its samples in createUpper's
// open(O_CREAT), nearly all in ext4's scan past recently deleted inodes
// (recently_deleted), under the overlay lock.
//
// Each pool file is already named as an upper file: by an inode number
// the filler reserved from the overlay (reserve), which the new inode
// then takes. A CREATE thus changes no directory: an earlier pool named
// its files pool-N and renamed one into place per create, and the renames
// and the filler's creates serialised on the upper directory's lock (perf
// of an untar: 12% of the daemon's samples spinning in rwsem_spin_on_owner,
// 25 µs per rename). A reserved number is never reused (nextIno only
// grows), and whatever the pool holds at a crash is an upper file no
// inode references, which the next open of the state directory deletes
// (removeStrayUppers). The snapshot's directory sync covers the pool
// files' names like any other upper file's.
//
// The pool keeps names, not descriptors: opening an existing file
// allocates nothing, and a mount does not hold 64 descriptors that appear
// and vanish as the filler runs (go-fuse's posix FdLeak check counts the
// process's descriptors around a workload and saw the filler's).
type upperPool struct {
	dir     string
	reserve func() uint64 // a fresh inode number (takes the overlay lock)

	mu      sync.Mutex
	nums    []uint64 // reserved numbers whose files exist, oldest first
	stopped bool     // stop was called: no new files

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

const (
	poolSize     = 64 // files kept ready
	poolLowWater = 32 // refill when fewer remain
)

// newUpperPool returns a pool of files in dir named by reserve's numbers;
// start begins filling it.
func newUpperPool(dir string, reserve func() uint64) *upperPool {
	return &upperPool{dir: dir, reserve: reserve, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func (p *upperPool) start() {
	go p.run()
	p.signal()
}

func (p *upperPool) path(num uint64) string {
	return filepath.Join(p.dir, strconv.FormatUint(num, 10))
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
	if p.stopped || len(p.nums) >= poolSize {
		p.mu.Unlock()
		return false
	}
	p.mu.Unlock()
	num := p.reserve()
	f, err := osfile.Open(p.path(num), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return false // the request path creates its own files meanwhile
	}
	if err := f.Close(); err != nil {
		os.Remove(p.path(num))
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		os.Remove(p.path(num))
		return false
	}
	p.nums = append(p.nums, num)
	return len(p.nums) < poolSize
}

// take returns a pool file's inode number and the file, open read-write,
// or 0 and nil if the pool is empty (or the open failed).
func (p *upperPool) take() (uint64, *os.File) {
	if p == nil {
		return 0, nil
	}
	p.mu.Lock()
	n := len(p.nums)
	if n == 0 {
		p.mu.Unlock()
		p.signal()
		return 0, nil
	}
	num := p.nums[0]
	p.nums = p.nums[1:]
	p.mu.Unlock()
	if n-1 < poolLowWater {
		p.signal()
	}
	f, err := osfile.Open(p.path(num), os.O_RDWR, 0)
	if err != nil {
		os.Remove(p.path(num))
		return 0, nil
	}
	return num, f
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
	nums := p.nums
	p.nums = nil
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	for _, num := range nums {
		os.Remove(p.path(num))
	}
}
