package fusefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FUSE over io_uring (Linux 6.14+, fuse module parameter enable_uring):
// the kernel hands each request to a ring entry of the queue of the CPU
// the tool issued it on, and the reply and the fetch of the next request
// are one submission. go-fuse has no such transport; its ProtocolServer
// parses a request held in memory and writes the reply into memory, so
// the rings here feed it. go-fuse's Server still owns /dev/fuse: it
// answers INIT, FORGET and INTERRUPT (which the kernel keeps on the
// device) and sends the notifications.
//
// One thread per CPU queue, pinned to that CPU, owns a ring with
// uringEntries entries registered for the queue and answers requests
// inline: the tool on that CPU blocks, its request wakes this thread on
// the same CPU, the reply wakes the tool. A request that may block for
// long — a lock wait (SETLKW), the first request of a session not yet
// admitted (its lease may wait for a reconciliation) — is answered on its
// own goroutine and handed back to the thread, which alone submits to its
// ring, through an eventfd read the ring keeps armed.
//
// Measured on this project's 2-CPU PVM guest (docs/benchmarks.md): a
// stat through a trivial go-fuse file system, two requests, took 28 µs
// over io_uring against 54 µs over /dev/fuse (client and queue on one
// CPU).

// uringParamPath is the fuse module's switch for io_uring.
const uringParamPath = "/sys/module/fuse/parameters/enable_uring"

// ErrUringUnavailable means the kernel does not serve FUSE over io_uring
// (module parameter off or missing, io_uring disabled).
var ErrUringUnavailable = errors.New("fusefs: FUSE over io_uring is not available")

// UringAvailable reports whether this kernel serves FUSE over io_uring.
func UringAvailable() error {
	b, err := os.ReadFile(uringParamPath)
	if err != nil {
		return fmt.Errorf("%w: %s: %v (needs Linux 6.14 or later)", ErrUringUnavailable, uringParamPath, err)
	}
	if v := strings.TrimSpace(string(b)); v != "Y" && v != "1" {
		return fmt.Errorf("%w: %s is %s (as root: echo 1 > %s)", ErrUringUnavailable, uringParamPath, v, uringParamPath)
	}
	return nil
}

// TurnOnUring turns the fuse module's enable_uring on where it exists and
// the caller may write it (root), then reports UringAvailable. The switch
// only lets FUSE servers that ask for io_uring have it.
// A process that turns it on should call RestoreUring before it exits:
// the parameter is the whole machine's.
func TurnOnUring() error {
	if UringAvailable() == nil {
		return nil
	}
	if os.WriteFile(uringParamPath, []byte("1"), 0o644) == nil {
		uringTurnedOn.Store(true)
	}
	return UringAvailable()
}

// uringTurnedOn records that TurnOnUring changed the parameter.
var uringTurnedOn atomic.Bool

// RestoreUring turns enable_uring off again if TurnOnUring of this process
// turned it on (a machine where it was on stays so).
func RestoreUring() error {
	if !uringTurnedOn.Swap(false) {
		return nil
	}
	if err := os.WriteFile(uringParamPath, []byte("0"), 0o644); err != nil {
		return fmt.Errorf("restore %s: %w", uringParamPath, err)
	}
	return nil
}

const (
	uringEntries   = 4       // ring entries registered per CPU queue
	uringHdrSize   = 288     // struct fuse_uring_req_header
	uringOpInOff   = 128     // its op_in
	uringEntOff    = 256     // its ring_ent_in_out
	uringEventData = 1 << 62 // user_data of the eventfd read
	uringCmdReg    = 1       // FUSE_IO_URING_CMD_REGISTER
	uringCmdCommit = 2       // FUSE_IO_URING_CMD_COMMIT_AND_FETCH
	opSetlkw       = 33      // FUSE_SETLKW
	sqe128         = 1 << 10 // IORING_SETUP_SQE128
	singleIssuer   = 1 << 12 // IORING_SETUP_SINGLE_ISSUER
	deferTaskrun   = 1 << 13 // IORING_SETUP_DEFER_TASKRUN
	opURingCmd     = 46      // IORING_OP_URING_CMD
	opRead         = 22      // IORING_OP_READ
	enterGetEvents = 1       // IORING_ENTER_GETEVENTS
	offSQEs        = 0x10000000
)

// uringTransport serves one mount's requests from its rings.
type uringTransport struct {
	ps     *fuse.ProtocolServer
	fuseFD int
	// admitsNow, when set, tells whether a pid's requests are admitted
	// without waiting (see nowAdmitter).
	admitsNow func(pid uint32) bool
	queues    []*uringQueue
	wg        sync.WaitGroup
	answered  atomic.Int64 // requests answered through the rings
	offThread atomic.Int64 // of those, answered off their queue's thread
}

type uringQueue struct {
	t     *uringTransport
	qid   int
	ring  *uring
	ents  []uringEnt
	mem   []byte // the entries' buffers (anonymous mapping)
	evfd  int
	evbuf [8]byte

	mu       sync.Mutex
	done     []int // entries answered off the thread, to commit
	inflight int   // entries being answered off the thread
	closed   bool  // release ran: the last of inflight unmaps mem
	stop     atomic.Bool
}

type uringEnt struct {
	hdr     []byte
	payload []byte
	iov     [2]unix.Iovec
	scratch [16]byte // the reply's fuse_out_header
}

// startUring registers rings for every CPU queue of the connection on
// fuseFD and serves them. kernel is the INIT request the Server answered.
func startUring(ps *fuse.ProtocolServer, fuseFD int, kernel *fuse.InitIn, maxPayload int, admitsNow func(uint32) bool) (*uringTransport, error) {
	// The ProtocolServer learns the negotiated protocol from the same INIT.
	init := *kernel
	init.InHeader.Length = uint32(unsafe.Sizeof(init))
	in := unsafe.Slice((*byte)(unsafe.Pointer(&init)), unsafe.Sizeof(init))
	out := make([]byte, 4096)
	if _, st := ps.HandleRequest([][]byte{in}, [][]byte{out}); !st.Ok() {
		return nil, fmt.Errorf("io_uring: init the protocol server: %v", st)
	}
	n, err := possibleCPUs()
	if err != nil {
		return nil, err
	}
	t := &uringTransport{ps: ps, fuseFD: fuseFD, admitsNow: admitsNow}
	for q := 0; q < n; q++ {
		ready := make(chan error, 1)
		uq := &uringQueue{t: t, qid: q, evfd: -1}
		t.wg.Add(1)
		go uq.serve(maxPayload, ready)
		if err := <-ready; err != nil {
			t.stop()
			return nil, fmt.Errorf("io_uring queue %d: %w", q, err)
		}
		t.queues = append(t.queues, uq)
	}
	return t, nil
}

// stop ends the queue threads; the connection must be gone or going (the
// kernel completes registered entries with an error then).
func (t *uringTransport) stop() {
	for _, q := range t.queues {
		q.stop.Store(true)
		q.wake()
	}
	t.wg.Wait()
}

// possibleCPUs is the number of queues the kernel makes: one per
// possible CPU.
func possibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, fmt.Errorf("io_uring: %w", err)
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if found {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a {
			return 0, fmt.Errorf("io_uring: cannot parse possible CPUs %q", b)
		}
		n = max(n, z+1)
	}
	if n == 0 {
		return 0, fmt.Errorf("io_uring: no possible CPUs in %q", b)
	}
	return n, nil
}

// wake makes the queue's thread look at q.done and q.stop. Called from
// any goroutine, also after the thread ended (then it does nothing: the
// descriptor number may belong to another file by then).
func (q *uringQueue) wake() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.signalLocked()
}

// signalLocked completes the ring's eventfd read; q.mu is held.
func (q *uringQueue) signalLocked() {
	if q.evfd >= 0 {
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(q.evfd, one[:])
	}
}

// serve owns the queue's ring on a thread pinned to the queue's CPU.
func (q *uringQueue) serve(maxPayload int, ready chan<- error) {
	defer q.t.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set unix.CPUSet
	set.Set(q.qid)
	_ = unix.SchedSetaffinity(0, &set) // an offline CPU's queue runs anywhere
	if err := q.setup(maxPayload); err != nil {
		q.release()
		ready <- err
		return
	}
	defer q.release()
	for i := range q.ents {
		q.ring.queueCmd(q.t.fuseFD, uringCmdReg, &q.ents[i].iov, uint64(i), 0, uint16(q.qid))
	}
	q.armEvent()
	if err := q.ring.enter(0); err != nil {
		ready <- fmt.Errorf("register: %w", err)
		return
	}
	// A refused registration completes at once; a request may also have
	// arrived already.
	var first []uringCQE
	for {
		c, ok := q.ring.nextCQE()
		if !ok {
			break
		}
		if c.UserData != uringEventData && c.Res < 0 {
			ready <- fmt.Errorf("register: %w", syscall.Errno(-c.Res))
			return
		}
		first = append(first, c)
	}
	ready <- nil
	q.loop(first)
}

func (q *uringQueue) setup(maxPayload int) error {
	r, err := newURing(2*uringEntries + 2)
	if err != nil {
		return err
	}
	q.ring = r
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	q.evfd = fd
	page := os.Getpagesize()
	payload := (maxPayload + page - 1) / page * page
	per := page + payload
	q.mem, err = unix.Mmap(-1, 0, per*uringEntries, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("io_uring buffers: %w", err)
	}
	q.ents = make([]uringEnt, uringEntries)
	for i := range q.ents {
		e := &q.ents[i]
		base := q.mem[i*per:]
		e.hdr = base[:uringHdrSize:uringHdrSize]
		e.payload = base[page : page+payload : page+payload]
		e.iov[0].Base = &e.hdr[0]
		e.iov[0].SetLen(len(e.hdr))
		e.iov[1].Base = &e.payload[0]
		e.iov[1].SetLen(len(e.payload))
	}
	return nil
}

func (q *uringQueue) release() {
	if q.ring != nil {
		q.ring.close()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.evfd >= 0 {
		unix.Close(q.evfd)
		q.evfd = -1
	}
	q.closed = true
	// An entry answered off the thread (a lock wait outliving the
	// connection) still writes into mem: its goroutine unmaps it then.
	if q.mem != nil && q.inflight == 0 {
		_ = unix.Munmap(q.mem)
		q.mem = nil
	}
}

// armEvent queues a read of the eventfd: its completion wakes the thread.
func (q *uringQueue) armEvent() {
	q.ring.queueRead(q.evfd, q.evbuf[:], uringEventData)
}

// loop waits for requests and answers them until the connection ends.
// first are completions already taken off the ring.
func (q *uringQueue) loop(first []uringCQE) {
	live := len(q.ents)
	for live > 0 {
		for {
			var c uringCQE
			if len(first) > 0 {
				c, first = first[0], first[1:]
			} else if c2, ok := q.ring.nextCQE(); ok {
				c = c2
			} else {
				break
			}
			if c.UserData == uringEventData {
				if q.stop.Load() {
					return
				}
				q.mu.Lock()
				done := q.done
				q.done = nil
				q.mu.Unlock()
				for _, i := range done {
					q.commit(i)
				}
				q.armEvent()
				continue
			}
			if c.Res < 0 {
				live-- // the connection ended (or the entry was refused)
				continue
			}
			i := int(c.UserData)
			if q.mayBlock(&q.ents[i]) {
				q.mu.Lock()
				q.inflight++
				q.mu.Unlock()
				q.t.offThread.Add(1)
				go q.answerOff(i)
				continue
			}
			q.answer(i)
			q.commit(i)
		}
		if live == 0 {
			return
		}
		if err := q.ring.enter(1); err != nil {
			return
		}
	}
}

// answerOff answers entry i off the queue's thread and hands it back.
func (q *uringQueue) answerOff(i int) {
	q.answer(i)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inflight--
	if q.closed {
		if q.inflight == 0 && q.mem != nil {
			_ = unix.Munmap(q.mem)
			q.mem = nil
		}
		return
	}
	q.done = append(q.done, i)
	q.signalLocked()
}

// mayBlock reports whether answering the entry's request may wait for
// long: it then runs off the queue's thread.
func (q *uringQueue) mayBlock(e *uringEnt) bool {
	h := (*fuse.InHeader)(unsafe.Pointer(&e.hdr[0]))
	if h.Opcode == opSetlkw {
		return true
	}
	return q.t.admitsNow != nil && !q.t.admitsNow(h.Caller.Pid)
}

// answer runs the entry's request through the protocol server and leaves
// the reply in the entry.
func (q *uringQueue) answer(i int) {
	e := &q.ents[i]
	inLen := int(*(*uint32)(unsafe.Pointer(&e.hdr[0])))
	psz := int(*(*uint32)(unsafe.Pointer(&e.hdr[uringEntOff+16])))
	opsz := inLen - int(unsafe.Sizeof(fuse.InHeader{})) - psz
	n, st := 0, fuse.EIO // not a request this code understands
	if opsz >= 0 && opsz <= 128 && psz <= len(e.payload) {
		q.t.answered.Add(1)
		in := [][]byte{e.hdr[:unsafe.Sizeof(fuse.InHeader{})], e.hdr[uringOpInOff : uringOpInOff+opsz], e.payload[:psz]}
		n, st = q.t.ps.HandleRequest(in, [][]byte{e.scratch[:], e.payload})
	}
	if !st.Ok() || n < 16 {
		unique := (*fuse.InHeader)(unsafe.Pointer(&e.hdr[0])).Unique
		oh := (*fuse.OutHeader)(unsafe.Pointer(&e.scratch[0]))
		*oh = fuse.OutHeader{Length: 16, Status: -int32(syscall.EIO), Unique: unique}
		n = 16
	}
	copy(e.hdr[:16], e.scratch[:])
	*(*uint32)(unsafe.Pointer(&e.hdr[uringEntOff+16])) = uint32(n - 16)
}

// commit queues the entry's reply together with the fetch of its next
// request.
func (q *uringQueue) commit(i int) {
	e := &q.ents[i]
	commitID := *(*uint64)(unsafe.Pointer(&e.hdr[uringEntOff+8]))
	q.ring.queueCmd(q.t.fuseFD, uringCmdCommit, &e.iov, uint64(i), commitID, uint16(q.qid))
}

// uring is a minimal io_uring: 128-byte SQEs, one submitting thread.
type uring struct {
	fd                     int
	sqHead, sqTail, sqMask *uint32
	sqArray                unsafe.Pointer
	sqes                   []byte
	cqHead, cqTail, cqMask *uint32
	cqes                   unsafe.Pointer
	rings                  []byte
}

type uringParams struct {
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

type uringCQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

func newURing(entries uint32) (*uring, error) {
	var p uringParams
	p.Flags = sqe128 | singleIssuer | deferTaskrun
	fd, _, e := syscall.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	r := &uring{fd: int(fd)}
	size := max(int(p.Sq.Array+p.SqEntries*4), int(p.Cq.Cqes+p.CqEntries*uint32(unsafe.Sizeof(uringCQE{}))))
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

func (r *uring) close() {
	_ = unix.Munmap(r.sqes)
	_ = unix.Munmap(r.rings)
	unix.Close(r.fd)
}

// next returns the next free SQE, zeroed, and publishes it on return of
// the caller's fill through push.
func (r *uring) next() (sqe []byte, idx uint32) {
	tail := atomic.LoadUint32(r.sqTail)
	idx = tail & *r.sqMask
	sqe = r.sqes[idx*128 : idx*128+128]
	clear(sqe)
	return sqe, idx
}

func (r *uring) push(idx uint32) {
	*(*uint32)(unsafe.Add(r.sqArray, 4*idx)) = idx
	atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqTail)+1)
}

// queueCmd queues a FUSE uring command for an entry's buffers.
func (r *uring) queueCmd(fuseFD int, cmdOp uint32, iov *[2]unix.Iovec, userData, commitID uint64, qid uint16) {
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
func (r *uring) queueRead(fd int, buf []byte, userData uint64) {
	sqe, idx := r.next()
	sqe[0] = opRead
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fd)
	*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(uintptr(unsafe.Pointer(&buf[0])))
	*(*uint32)(unsafe.Pointer(&sqe[24])) = uint32(len(buf))
	*(*uint64)(unsafe.Pointer(&sqe[32])) = userData
	r.push(idx)
}

// enter submits every queued SQE and waits for at least min completions.
func (r *uring) enter(min uint32) error {
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
func (r *uring) nextCQE() (uringCQE, bool) {
	head := atomic.LoadUint32(r.cqHead)
	if head == atomic.LoadUint32(r.cqTail) {
		return uringCQE{}, false
	}
	c := *(*uringCQE)(unsafe.Add(r.cqes, uintptr(head&*r.cqMask)*unsafe.Sizeof(uringCQE{})))
	atomic.StoreUint32(r.cqHead, head+1)
	return c, true
}

// fuseFDs lists the process's open /dev/fuse descriptors.
func fuseFDs() map[int]bool {
	m := map[int]bool{}
	ds, _ := os.ReadDir("/proc/self/fd")
	for _, d := range ds {
		n, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", d.Name())); err == nil && l == "/dev/fuse" {
			m[n] = true
		}
	}
	return m
}
