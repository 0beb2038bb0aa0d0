package uring

import (
	"fmt"
	"os"
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

const (
	ringEntries    = 4       // ring entries registered per CPU queue
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

// Transport serves one mount's requests from its rings.
type Transport struct {
	ps     *fuse.ProtocolServer
	fuseFD int
	// admitsNow, when set, tells whether a pid's requests are admitted
	// without waiting (Start).
	admitsNow func(pid uint32) bool
	queues    []*queue
	wg        sync.WaitGroup
	answered  atomic.Int64 // requests answered through the rings
	offThread atomic.Int64 // of those, answered off their queue's thread
}

type queue struct {
	t     *Transport
	qid   int
	ring  *ring
	ents  []entry
	mem   []byte // the entries' buffers (anonymous mapping)
	evfd  int
	evbuf [8]byte

	mu       sync.Mutex // protects done, inflight, closed, evfd and mem once the thread ends
	done     []int      // entries answered off the thread, to commit
	inflight int        // entries being answered off the thread
	closed   bool       // release ran: the last of inflight unmaps mem
	stop     atomic.Bool
}

type entry struct {
	hdr     []byte
	payload []byte
	iov     [2]unix.Iovec
	scratch [16]byte // the reply's fuse_out_header
}

// Start serves the requests of server's connection over io_uring: server
// was made by NewServer with wantFD, fuseFD is the descriptor it returned,
// fsys and opts are server's, and the kernel must have taken
// fuse.CAP_OVER_IO_URING up at INIT (else ErrUnavailable); opts.MaxWrite
// sizes each ring entry's payload buffer. admitsNow, if not nil, tells
// whether a pid's requests are answered without waiting (its lease is
// held): the others are answered off the queue's thread. Until every
// queue has its ring the kernel holds all requests back.
func Start(server *fuse.Server, fsys fuse.RawFileSystem, opts *fuse.MountOptions, fuseFD int, admitsNow func(pid uint32) bool) (*Transport, error) {
	if fuseFD < 0 {
		return nil, fmt.Errorf("%w: the mount's /dev/fuse descriptor could not be told apart", ErrUnavailable)
	}
	if opts.MaxWrite <= 0 {
		return nil, fmt.Errorf("io_uring: MountOptions.MaxWrite must be set: it sizes the rings' payload buffers")
	}
	kernel := server.KernelSettings()
	if kernel.Flags64()&fuse.CAP_OVER_IO_URING == 0 {
		return nil, fmt.Errorf("%w: the kernel did not offer it at INIT", ErrUnavailable)
	}
	return start(fuse.NewProtocolServer(fsys, opts), fuseFD, kernel, opts.MaxWrite, admitsNow)
}

// start registers rings for every CPU queue of the connection on
// fuseFD and serves them. kernel is the INIT request the Server answered.
func start(ps *fuse.ProtocolServer, fuseFD int, kernel *fuse.InitIn, maxPayload int, admitsNow func(uint32) bool) (*Transport, error) {
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
	t := &Transport{ps: ps, fuseFD: fuseFD, admitsNow: admitsNow}
	for q := 0; q < n; q++ {
		ready := make(chan error, 1)
		uq := &queue{t: t, qid: q, evfd: -1}
		t.wg.Add(1)
		go uq.serve(maxPayload, ready)
		if err := <-ready; err != nil {
			t.Stop()
			return nil, fmt.Errorf("io_uring queue %d: %w", q, err)
		}
		t.queues = append(t.queues, uq)
	}
	return t, nil
}

// Stop ends the queue threads; the connection must be gone or going (the
// kernel completes registered entries with an error then).
func (t *Transport) Stop() {
	for _, q := range t.queues {
		q.stop.Store(true)
		q.wake()
	}
	t.wg.Wait()
}

// Answered is the number of requests answered through the rings.
func (t *Transport) Answered() int64 { return t.answered.Load() }

// OffThread is the number of requests answered off their queue's thread
// (lock waits, sessions not yet admitted).
func (t *Transport) OffThread() int64 { return t.offThread.Load() }

// possibleCPUs is the number of queues the kernel makes: one per
// possible CPU.
func possibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, fmt.Errorf("io_uring: %w", err)
	}
	return parseCPUCount(string(b))
}

// parseCPUCount is one more than the highest CPU of a kernel CPU list
// ("0-3", "0,2-5\n").
func parseCPUCount(list string) (int, error) {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if found {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a {
			return 0, fmt.Errorf("io_uring: cannot parse possible CPUs %q", list)
		}
		n = max(n, z+1)
	}
	if n == 0 {
		return 0, fmt.Errorf("io_uring: no possible CPUs in %q", list)
	}
	return n, nil
}

// wake makes the queue's thread look at q.done and q.stop. Called from
// any goroutine, also after the thread ended (then it does nothing: the
// descriptor number may belong to another file by then).
func (q *queue) wake() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.signalLocked()
}

// signalLocked completes the ring's eventfd read; q.mu is held.
func (q *queue) signalLocked() {
	if q.evfd >= 0 {
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(q.evfd, one[:])
	}
}

// serve owns the queue's ring on a thread pinned to the queue's CPU.
func (q *queue) serve(maxPayload int, ready chan<- error) {
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
	var first []cqe
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

func (q *queue) setup(maxPayload int) error {
	r, err := newRing(2*ringEntries + 2)
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
	q.mem, err = unix.Mmap(-1, 0, per*ringEntries, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("io_uring buffers: %w", err)
	}
	q.ents = make([]entry, ringEntries)
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

func (q *queue) release() {
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
func (q *queue) armEvent() {
	q.ring.queueRead(q.evfd, q.evbuf[:], uringEventData)
}

// loop waits for requests and answers them until the connection ends.
// first are completions already taken off the ring.
func (q *queue) loop(first []cqe) {
	live := len(q.ents)
	for live > 0 {
		for {
			var c cqe
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
func (q *queue) answerOff(i int) {
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
func (q *queue) mayBlock(e *entry) bool {
	h := (*fuse.InHeader)(unsafe.Pointer(&e.hdr[0]))
	if h.Opcode == opSetlkw {
		return true
	}
	return q.t.admitsNow != nil && !q.t.admitsNow(h.Caller.Pid)
}

// answer runs the entry's request through the protocol server and leaves
// the reply in the entry.
func (q *queue) answer(i int) {
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
func (q *queue) commit(i int) {
	e := &q.ents[i]
	commitID := *(*uint64)(unsafe.Pointer(&e.hdr[uringEntOff+8]))
	q.ring.queueCmd(q.t.fuseFD, uringCmdCommit, &e.iov, uint64(i), commitID, uint16(q.qid))
}
