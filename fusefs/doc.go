// Package fusefs is the FUSE mount of an acyclicfs workspace: a pinned
// generation (a tree of store.Tree/Entry) as the lower layer plus a dirty
// overlay, which can capture itself as a new tree and switch to a new
// pinned generation while mounted. It is the only package that imports
// go-fuse.
//
// # Overview
//
// The overlay (overlay.go) is an in-memory inode table. Directories of the
// pinned tree are loaded lazily on first lookup or readdir. Namespace
// changes (create, mkdir, symlink, link, unlink, rmdir, rename — a
// directory rename is O(1)) and metadata (mode, owner, times, user
// xattrs) change the table only. File data is copied up on the first
// write or O_TRUNC into an upper file StateDir/upper/<ino> (FICLONE, then
// copy_file_range, then a plain copy); new files are upper files from the
// start. Clean files are read from the immutable blob file; a copy-up
// moves the handles open on it to the upper file (overlay.redirect), so
// every descriptor sees every write made through the mount.
//
// Every change gets a sequence number; each directory records the largest
// one below it (subSeq), so Capture walks only changed directories and
// reuses the IDs of clean subtrees: O(dirty). SwitchView re-bases the
// table on another root, keeping inode numbers of surviving paths and
// anything changed after the last Capture, and invalidates only changed
// kernel entries.
//
// Durability: on fsync or fsyncdir of anything, and at unmount, a
// compacted snapshot of the dirty part of the table is written atomically
// (journal.go), after the upper file (fsync) and the upper directory are
// synced; an fsync with no namespace or metadata change since the last
// snapshot costs only the file's own fsync. Between snapshots every
// request that changes the table writes a frame to a write-ahead log
// before it is answered (wal.go, no fsync), so a daemon killed at any
// moment loses nothing a tool saw completed; sync(2) then makes it durable
// against power loss too (the kernel never sends FUSE_SYNCFS to a
// /dev/fuse server). Mount and RecoverCapture replay the snapshot and the
// log. Data written but never fsynced or synced may or may not survive a
// power loss, as on any file system.
//
// Speed: with Config.Passthrough the kernel reads and writes open upper
// files directly on their backing file (one per inode, shared by its
// opens); getattr reads size and times from the backing file. Clean files
// are read through the daemon once and then from the page cache (kept
// across opens); Config.PassthroughClean serves them by passthrough on the
// blob too, at the price that a writer opening a file other processes hold
// open for reading waits briefly for them and then gets ETXTBSY (the
// kernel allows one backing file per inode, and no cached open beside a
// passthrough one — fs/fuse/iomode.c). Clean entries are
// cached by the kernel for Config.AttrTimeout/EntryTimeout (the view is
// pinned); dirty ones for DirtyTimeout (as long by default: their changes
// all pass through the kernel). Without passthrough, pages are
// kept cached across opens (FOPEN_KEEP_CACHE) and MaxWrite is 1 MiB.
// Measured on Linux 6.18 as root (bench_test.go, 256 MiB, 1 MiB writes):
// passthrough writes ~0.93 GB/s and reads ~2-2.7 GB/s, as native ext4
// (0.86-0.89 / 2-3.5 GB/s); without passthrough 0.39-0.49 and 1.5-1.9 GB/s.
//
// Round trips: OPENDIR and FLUSH are answered with ENOSYS once, after
// which the kernel sends neither (no_opendir, no_flush): every directory
// listing is cached by the kernel (FOPEN_CACHE_DIR, rawdirs.go), so a warm
// walk (find, git status) sends no request for listings, and a close sends
// only RELEASE. Clean reads the daemon serves are spliced from the blob
// file (BenchmarkCleanReadDaemon: ~1.45 GB/s against ~1.27 with pread).
//
// Extended attributes are off by default (Config.EnableXattrs): with them
// on, the kernel sends GETXATTR security.capability before every write,
// passthrough writes included — 4 KiB passthrough writes took 26 µs
// instead of 4.1 µs (native 4.0 µs). Off, go-fuse answers ENOSYS once and
// the kernel stops asking; tools see ENOTSUP for xattrs.
//
// Locks: flock and fcntl locks are served like go-fuse's loopback, with
// OFD locks and flock on a private descriptor per open of a per-inode lock
// file in StateDir/locks (locks.go).
//
// # Concurrency
//
// One mutex (overlay.mu) protects the whole table. It is never held
// across file data I/O (copy-up, hashing) or tree loads during requests;
// SwitchView holds it while it loads the trees it compares, so a switch
// looks atomic to requests, but hashes the racily clean upper files it
// must compare before taking it (hashRacy; a file opened for writing in
// between counts as changed). Kernel notifications are sent by a separate
// goroutine, after the switch, holding no lock (go-fuse deadlocks if a
// handler notifies for its own inode).
//
// # Caveats
//
//   - Trees store no owner, group or permission bits beyond the exec bit,
//     no hard links and no xattrs. Within a mount they all work; a capture
//     writes the exec bit as KindExec, hard links as separate entries with
//     the same content, and drops owners and xattrs (they persist in the
//     overlay snapshot until the state is reset). Hard links are kept
//     beside the tree instead: CaptureLinks returns the link groups
//     (store.Generation.Links) and Config.Links and SwitchViewLinks show a
//     generation's groups as one inode each (links.go).
//   - FIFOs, sockets and device nodes are names with attributes only
//     (Mknod): the kernel serves their opens (pipe, bound socket, driver),
//     and a capture stores kind and device number (store.KindFIFO …).
//     Device nodes open only on a root-only mount (mountOptions: "dev").
//   - File locks (flock, fcntl) are handled by the kernel, locally: they
//     work between processes on this host only.
//   - A view switch that changes a file under open readers leaves them
//     reading the old content; new opens see the new content.
//   - Never touch a mount's files from the process that serves it with
//     mmap: a page fault is not a syscall to the Go scheduler, so a garbage
//     collection's stop-the-world waits for the faulting thread while the
//     fault waits for the daemon: deadlock (the tests run mmap in a child
//     process). Plain read/write from the same process works.
//   - The kernel reports the calling thread's id as the request's pid; an
//     Admitter that keys on processes or sessions must map it
//     (/proc/PID/status Tgid, or getsid).
//   - Kernel permission checks (default_permissions) use the overlay's
//     owner and mode; lower entries belong to the daemon's user. A
//     root-only mount (no allow_other) goes without them: root passes
//     them anyway, and they cost a directory GETATTR before each create,
//     unlink or rename. The kernel then sends ACCESS for access(2) and
//     chdir; Access answers it without admitting the caller.
//   - Unmount falls back to a lazy unmount (MNT_DETACH) when the mount is
//     busy: the mountpoint vanishes and open files are served until closed.
package fusefs
