package blobs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A big dense file is copied into its temp object file with direct I/O
// (O_DIRECT writes), read, hashed and written one segment at a time by
// three goroutines, so that reading, hashing and writing overlap. The
// copy is then where it must be for the object to be durable (on disk),
// and it takes no page cache: a buffered copy of 1 GiB fills 1 GiB of
// new page cache and writes it back at the batch's fsync, which made a
// lease end after a 1 GiB write take 2.8–6.9 s on a loaded 2-core VM
// whose memory the host backs lazily, against 0.6–1.7 s with direct I/O
// (docs/benchmarks.md, issue #25). What is hashed is what is written:
// each segment is read into a private buffer, hashed, and written from
// that buffer, so a source changing meanwhile cannot give the object a
// wrong ID. BLAKE3 (lukechampine.com/blake3) hashes a large Write on all
// CPUs itself: a segment is split into subtrees of 16 chunks hashed in
// parallel.

const (
	// directMin is the smallest file copied with direct I/O; smaller
	// ones go through the page cache (one fsync per batch or a syncfs
	// writes them all back together).
	directMin = 8 << 20
	// directSeg is how much is read, hashed and written at a time.
	directSeg = 4 << 20
	// directAlign is the alignment of direct writes' offsets, lengths and
	// buffers (the file system's block size at most; ext4's is 4 KiB).
	directAlign = 4096
	// directBufs segments are in flight: one being read, one hashed, the
	// others being written.
	directBufs = 4
)

// errNoDirect says the file system refused direct I/O (tmpfs before
// Linux 6.6, block sizes above directAlign): copy through the page cache.
var errNoDirect = errors.New("direct I/O not supported")

var directBufPool = sync.Pool{New: func() any { b := alignedBuf(directSeg); return &b }}

// alignedBuf returns n bytes starting at a directAlign boundary.
func alignedBuf(n int) []byte {
	b := make([]byte, n+directAlign)
	skip := (directAlign - int(uintptr(unsafe.Pointer(&b[0]))%directAlign)) % directAlign
	return b[skip : skip+n : skip+n]
}

// setDirect turns O_DIRECT on or off for f.
func setDirect(f *os.File, on bool) error {
	fd := f.Fd()
	fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if on {
		fl |= unix.O_DIRECT
	} else {
		fl &^= unix.O_DIRECT
	}
	_, err = unix.FcntlInt(fd, unix.F_SETFL, fl)
	return err
}

// copyHashingDirect copies the first size bytes of src (fewer if it
// shrinks meanwhile) into dst, empty and at offset 0, with direct I/O,
// and returns the dense ID of exactly what it wrote and its length. It
// returns errNoDirect, with dst left empty, where direct I/O is not
// supported.
func copyHashingDirect(dst, src *os.File, size int64) (ID, int64, error) {
	if err := setDirect(dst, true); err != nil {
		return ID{}, 0, errNoDirect
	}
	id, n, err := copySegments(dst, src, size)
	if errors.Is(err, unix.EINVAL) && n == 0 {
		// Opened with O_DIRECT but refused the first write (alignment
		// the file system does not accept): nothing was written.
		err = errNoDirect
	}
	if errors.Is(err, errNoDirect) {
		if terr := dst.Truncate(0); terr != nil {
			return ID{}, 0, fmt.Errorf("direct copy: %w", terr)
		}
	}
	if derr := setDirect(dst, false); err == nil && derr != nil {
		err = fmt.Errorf("direct copy: %w", derr)
	}
	return id, n, err
}

// segment is a piece of the copy: buf holds the bytes at off (n of them).
type segment struct {
	buf *[]byte
	off int64
	n   int
}

// copySegments is copyHashingDirect's pipeline of three goroutines: one
// reads, this one hashes, one writes (the read of the next segment
// overlaps the hash of this one: 0.28-0.31 s per GiB against 0.34-0.38 s
// read and hashed in turn). n is how many bytes were written (when err
// is nil, also what was hashed).
func copySegments(dst, src *os.File, size int64) (ID, int64, error) {
	free := make(chan *[]byte, directBufs)
	for range directBufs {
		free <- directBufPool.Get().(*[]byte)
	}
	toHash := make(chan segment, directBufs)
	toWrite := make(chan segment, directBufs)
	read := make(chan readResult, 1)
	written := make(chan writeResult, 1)
	var failed atomic.Bool // the writer failed: stop reading
	go readSegments(src, size, toHash, free, &failed, read)
	go writeSegments(dst, toWrite, free, &failed, written)

	h := NewHasher()
	for s := range toHash {
		h.Write((*s.buf)[:s.n])
		toWrite <- s
	}
	close(toWrite)
	rres, wres := <-read, <-written
	for range directBufs {
		directBufPool.Put(<-free)
	}
	switch {
	case wres.err != nil:
		return ID{}, wres.n, wres.err
	case rres.err != nil:
		return ID{}, wres.n, rres.err
	}
	// The last write was padded to directAlign.
	if err := dst.Truncate(rres.n); err != nil {
		return ID{}, wres.n, fmt.Errorf("direct copy: %w", err)
	}
	return h.Sum(), rres.n, nil
}

type readResult struct {
	n   int64 // bytes read (the content, if err is nil)
	err error
}

// readSegments reads src's first size bytes (fewer if it shrinks
// meanwhile) segment by segment into buffers from free and sends them on
// out, which it closes at the end.
func readSegments(src *os.File, size int64, out chan<- segment, free chan *[]byte, failed *atomic.Bool, done chan<- readResult) {
	defer close(out)
	var res readResult
	for res.n < size && !failed.Load() {
		buf := <-free
		want := int(min(directSeg, size-res.n))
		n, err := src.ReadAt((*buf)[:want], res.n)
		if n > 0 {
			out <- segment{buf, res.n, n}
			res.n += int64(n)
		} else {
			free <- buf
		}
		if err == io.EOF {
			break // shrank: what was read is the content
		}
		if err != nil {
			res.err = fmt.Errorf("direct copy: read: %w", err)
			break
		}
	}
	done <- res
}

type writeResult struct {
	n   int64 // bytes written before the first error
	err error
}

// writeSegments writes each segment of work at its offset, padded to
// directAlign (a shorter tail is cut off by the caller's truncate), and
// hands its buffer back on free. After an error it sets failed and only
// hands buffers back.
func writeSegments(dst *os.File, work <-chan segment, free chan<- *[]byte, failed *atomic.Bool, done chan<- writeResult) {
	var res writeResult
	for s := range work {
		if res.err == nil {
			b := *s.buf
			w := (s.n + directAlign - 1) &^ (directAlign - 1)
			clear(b[s.n:w])
			if _, err := dst.WriteAt(b[:w], s.off); err != nil {
				res.err = fmt.Errorf("direct copy: write: %w", err)
				failed.Store(true)
			} else {
				res.n += int64(s.n)
			}
		}
		free <- s.buf
	}
	done <- res
}
