package uring

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is a minimal io_uring: 128-byte SQEs, one submitting thread.
type ring struct {
	fd                     int
	sqHead, sqTail, sqMask *uint32
	sqArray                unsafe.Pointer
	sqes                   []byte
	cqHead, cqTail, cqMask *uint32
	cqes                   unsafe.Pointer
	rings                  []byte
}

type ringParams struct {
	SqEntries, CqEntries, Flags, SqThreadCPU, SqThreadIdle, Features, WqFd uint32
	Resv                                                                   [3]uint32
	Sq                                                                     struct {
		Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
		UserAddr                                                        uint64
	}
	Cq struct {
		Head, Tail, RingMask, RingEntries, Overflow, Cqes, Flags, Resv1 uint32
		UserAddr                                                        uint64
	}
}

type cqe struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

func newRing(entries uint32) (*ring, error) {
	var p ringParams
	p.Flags = sqe128 | singleIssuer | deferTaskrun
	fd, _, e := syscall.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	r := &ring{fd: int(fd)}
	size := max(int(p.Sq.Array+p.SqEntries*4), int(p.Cq.Cqes+p.CqEntries*uint32(unsafe.Sizeof(cqe{}))))
	var err error
	if r.rings, err = unix.Mmap(r.fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		unix.Close(r.fd)
		return nil, fmt.Errorf("io_uring rings: %w", err)
	}
	if r.sqes, err = unix.Mmap(r.fd, offSQEs, int(p.SqEntries)*128, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		_ = unix.Munmap(r.rings)
		unix.Close(r.fd)
		return nil, fmt.Errorf("io_uring sqes: %w", err)
	}
	base := unsafe.Pointer(&r.rings[0])
	r.sqHead = (*uint32)(unsafe.Add(base, p.Sq.Head))
	r.sqTail = (*uint32)(unsafe.Add(base, p.Sq.Tail))
	r.sqMask = (*uint32)(unsafe.Add(base, p.Sq.RingMask))
	r.sqArray = unsafe.Add(base, p.Sq.Array)
	r.cqHead = (*uint32)(unsafe.Add(base, p.Cq.Head))
	r.cqTail = (*uint32)(unsafe.Add(base, p.Cq.Tail))
	r.cqMask = (*uint32)(unsafe.Add(base, p.Cq.RingMask))
	r.cqes = unsafe.Add(base, p.Cq.Cqes)
	return r, nil
}

func (r *ring) close() {
	_ = unix.Munmap(r.sqes)
	_ = unix.Munmap(r.rings)
	unix.Close(r.fd)
}

// next returns the next free SQE, zeroed, and publishes it on return of
// the caller's fill through push.
func (r *ring) next() (sqe []byte, idx uint32) {
	tail := atomic.LoadUint32(r.sqTail)
	idx = tail & *r.sqMask
	sqe = r.sqes[idx*128 : idx*128+128]
	clear(sqe)
	return sqe, idx
}

func (r *ring) push(idx uint32) {
	*(*uint32)(unsafe.Add(r.sqArray, 4*idx)) = idx
	atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqTail)+1)
}

// queueCmd queues a FUSE uring command for an entry's buffers.
func (r *ring) queueCmd(fuseFD int, cmdOp uint32, iov *[2]unix.Iovec, userData, commitID uint64, qid uint16) {
	sqe, idx := r.next()
	sqe[0] = opURingCmd
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fuseFD)
	*(*uint32)(unsafe.Pointer(&sqe[8])) = cmdOp
	*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(uintptr(unsafe.Pointer(iov)))
	*(*uint32)(unsafe.Pointer(&sqe[24])) = 2
	*(*uint64)(unsafe.Pointer(&sqe[32])) = userData
	// struct fuse_uring_cmd_req in the command area (offset 48): flags,
	// commit_id, qid.
	*(*uint64)(unsafe.Pointer(&sqe[56])) = commitID
	*(*uint16)(unsafe.Pointer(&sqe[64])) = qid
	r.push(idx)
}

// queueRead queues a read of fd into buf.
func (r *ring) queueRead(fd int, buf []byte, userData uint64) {
	sqe, idx := r.next()
	sqe[0] = opRead
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fd)
	*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(uintptr(unsafe.Pointer(&buf[0])))
	*(*uint32)(unsafe.Pointer(&sqe[24])) = uint32(len(buf))
	*(*uint64)(unsafe.Pointer(&sqe[32])) = userData
	r.push(idx)
}

// enter submits every queued SQE and waits for at least min completions.
func (r *ring) enter(min uint32) error {
	for {
		n := atomic.LoadUint32(r.sqTail) - atomic.LoadUint32(r.sqHead)
		_, _, e := syscall.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(min), enterGetEvents, 0, 0)
		if e == syscall.EINTR {
			continue // what was submitted moved the head
		}
		if e != 0 {
			return fmt.Errorf("io_uring_enter: %w", e)
		}
		return nil
	}
}

// nextCQE pops a completion.
func (r *ring) nextCQE() (cqe, bool) {
	head := atomic.LoadUint32(r.cqHead)
	if head == atomic.LoadUint32(r.cqTail) {
		return cqe{}, false
	}
	c := *(*cqe)(unsafe.Add(r.cqes, uintptr(head&*r.cqMask)*unsafe.Sizeof(cqe{})))
	atomic.StoreUint32(r.cqHead, head+1)
	return c, true
}
