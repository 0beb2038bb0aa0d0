// Package uring serves a go-fuse file system over FUSE's io_uring
// transport (Linux 6.14+, fuse module parameter enable_uring) instead of
// read and write on /dev/fuse. Package fusefs mounts through it: NewServer
// mounts and answers INIT (and finds the connection's /dev/fuse
// descriptor), Start registers the rings and serves them, Transport.Stop
// ends them after the unmount.
//
// The kernel hands each request to a ring entry of the queue of the CPU
// the tool issued it on, and the reply and the fetch of the next request
// are one submission. go-fuse has no such transport; its ProtocolServer
// parses a request held in memory and writes the reply into memory, so
// the rings here feed it. go-fuse's Server still owns /dev/fuse: it
// answers INIT, FORGET and INTERRUPT (which the kernel keeps on the
// device) and sends the notifications.
//
// # Concurrency
//
// One thread per CPU queue, pinned to that CPU, owns a ring with
// ringEntries entries registered for the queue and answers requests
// inline: the tool on that CPU blocks, its request wakes this thread on
// the same CPU, the reply wakes the tool. A request that may block for
// long — a lock wait (SETLKW), the first request of a session not yet
// admitted (its lease may wait for a reconciliation) — is answered on its
// own goroutine and handed back to the thread, which alone submits to its
// ring, through an eventfd read the ring keeps armed.
//
// # Cost
//
// Measured on this project's 2-CPU PVM guest (docs/benchmarks.md): a
// stat through a trivial go-fuse file system, two requests, took 28 µs
// over io_uring against 54 µs over /dev/fuse (client and queue on one
// CPU).
package uring
