package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPassthroughEngages checks that with Config.Passthrough the kernel
// moves file data itself: the daemon sees no READ or WRITE requests for
// upper files, nor (with PassthroughClean) for clean files.
func TestPassthroughEngages(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"clean": string(bytes.Repeat([]byte("c"), 1<<20))})
	m, mnt := mountT(t, objs, root, &mountOpts{passthrough: true})
	data := bytes.Repeat([]byte("x"), 4<<20)
	mustWrite(t, filepath.Join(mnt, "new"), string(data))
	if got := mustRead(t, filepath.Join(mnt, "new")); got != string(data) {
		t.Fatal("content mismatch")
	}
	if r, w := m.daemonReads.Load(), m.daemonWrites.Load(); r != 0 || w != 0 {
		t.Skipf("passthrough did not engage (daemon served %d reads, %d writes): kernel or privileges refuse it", r, w)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mnt, "new"), &st); err != nil || st.Size != int64(len(data)) {
		t.Fatalf("getattr after passthrough write: size %d %v", st.Size, err)
	}
	// Clean files are read through the daemon once, then from the page cache.
	mustRead(t, filepath.Join(mnt, "clean"))
	first := m.daemonReads.Load()
	mustRead(t, filepath.Join(mnt, "clean"))
	if first == 0 || m.daemonReads.Load() != first {
		t.Fatalf("clean reads: %d then %d daemon reads", first, m.daemonReads.Load())
	}
	m2, mnt2 := mountT(t, objs, root, &mountOpts{passthrough: true, ptClean: true})
	if got := mustRead(t, filepath.Join(mnt2, "clean")); len(got) != 1<<20 {
		t.Fatal("clean content mismatch")
	}
	if r := m2.daemonReads.Load(); r != 0 {
		t.Fatalf("PassthroughClean: daemon served %d reads", r)
	}
}

const benchFileSize = 256 << 20

type benchTarget struct {
	name string
	dir  func(b *testing.B) string
}

func benchTargets() []benchTarget {
	mnt := func(pt bool) func(b *testing.B) string {
		return func(b *testing.B) string {
			objs := newFakeObjects(b)
			_, dir := mountT(b, objs, objs.build(b, spec{"seed": "x"}), &mountOpts{passthrough: pt})
			return dir
		}
	}
	return []benchTarget{
		{"native", func(b *testing.B) string { return b.TempDir() }},
		{"mount", mnt(false)},
		{"mount-passthrough", mnt(true)},
		{"mount-tracker", func(b *testing.B) string {
			// As the daemon mounts: a session tracker admits each request
			// (and tells exec generations, for attribution).
			tr, err := sessions.New(sessions.Config{Handler: nopHandler{}, SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(tr.Close)
			objs := newFakeObjects(b)
			_, dir := mountT(b, objs, objs.build(b, spec{"seed": "x"}), &mountOpts{passthrough: true, admitter: tr})
			return dir
		}},
	}
}

type nopHandler struct{}

func (nopHandler) Begin(sessions.Owner) error { return nil }
func (nopHandler) End(sessions.Owner)         {}

func writeFile(b *testing.B, p string, buf []byte, size int) {
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	for n := 0; n < size; n += len(buf) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkSeqWrite(b *testing.B) {
	buf := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			dir := tg.dir(b)
			b.SetBytes(benchFileSize)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				writeFile(b, filepath.Join(dir, "f"), buf, benchFileSize)
			}
		})
	}
}

func BenchmarkSeqRead(b *testing.B) {
	buf := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			dir := tg.dir(b)
			p := filepath.Join(dir, "f")
			writeFile(b, p, buf, benchFileSize)
			rbuf := make([]byte, 1<<20)
			b.SetBytes(benchFileSize)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f, err := os.Open(p)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, rbuf)
				f.Close()
				if err != nil || n != benchFileSize {
					b.Fatal(n, err)
				}
			}
		})
	}
}

// BenchmarkCleanReadDaemon reads a 64 MiB clean file through the daemon:
// the kernel's cached pages are dropped before every pass.
func BenchmarkCleanReadDaemon(b *testing.B) {
	const size = 64 << 20
	objs := newFakeObjects(b)
	m, mnt := mountT(b, objs, objs.build(b, spec{"f": string(bytes.Repeat([]byte("0123456789abcdef"), size/16))}), nil)
	p := filepath.Join(mnt, "f")
	rbuf := make([]byte, 1<<20)
	mustRead(b, p)
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if errno := m.rootNode.GetChild("f").NotifyContent(0, 0); errno != 0 {
			b.Fatal(errno)
		}
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, rbuf)
		f.Close()
		if err != nil || n != size {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkStatTree stats every entry of a 1000-file lower tree (warm).
func BenchmarkStatTree(b *testing.B) {
	s := spec{}
	for i := 0; i < 1000; i++ {
		s[fmt.Sprintf("d%02d/f%03d", i%20, i)] = "content"
	}
	targets := []benchTarget{
		{"native", func(b *testing.B) string { d := b.TempDir(); materialize(b, d, s); return d }},
		{"mount", func(b *testing.B) string {
			objs := newFakeObjects(b)
			_, dir := mountT(b, objs, objs.build(b, s), nil)
			return dir
		}},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			dir := tg.dir(b)
			var paths []string
			for p := range s {
				paths = append(paths, filepath.Join(dir, p))
			}
			var st syscall.Stat_t
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, p := range paths {
					if err := syscall.Lstat(p, &st); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkGetattrRoundTrip is the floor of every FUSE request: statx
// with AT_STATX_FORCE_SYNC makes the kernel send GETATTR each time (a
// native directory answers from the inode). Request counts times this
// cost bound what a workload can gain from the daemon's own speed.
func BenchmarkGetattrRoundTrip(b *testing.B) {
	for _, tg := range benchTargets() {
		if tg.name == "mount" {
			continue // passthrough does not matter for GETATTR
		}
		b.Run(tg.name, func(b *testing.B) {
			p := filepath.Join(tg.dir(b), "f")
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
			var stx unix.Statx_t
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &stx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCreateUnlink(b *testing.B) {
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			dir := tg.dir(b)
			p := filepath.Join(dir, "tmpfile")
			for i := 0; i < b.N; i++ {
				fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				syscall.Close(fd)
				if err := syscall.Unlink(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateParallel creates (and closes) new files from several
// goroutines at once, each in a directory of its own.
func BenchmarkCreateParallel(b *testing.B) {
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			dir := tg.dir(b)
			var next atomic.Int64
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				d := filepath.Join(dir, fmt.Sprintf("g%d", next.Add(1)))
				if err := os.Mkdir(d, 0o755); err != nil {
					b.Error(err)
					return
				}
				for i := 0; pb.Next(); i++ {
					fd, err := syscall.Open(filepath.Join(d, strconv.Itoa(i)), syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0o644)
					if err != nil {
						b.Error(err)
						return
					}
					syscall.Close(fd)
				}
			})
		})
	}
}

// BenchmarkSmallWrite writes 4 KiB at a time, with xattrs on and off: with
// xattrs on the kernel asks GETXATTR security.capability before every write.
func BenchmarkSmallWrite(b *testing.B) {
	buf := bytes.Repeat([]byte("x"), 4096)
	for _, c := range []struct {
		name       string
		pt, xattrs bool
	}{{"xattrs", false, true}, {"noxattrs", false, false}, {"passthrough-xattrs", true, true}, {"passthrough-noxattrs", true, false}} {
		b.Run(c.name, func(b *testing.B) {
			objs := newFakeObjects(b)
			_, dir := mountT(b, objs, objs.build(b, spec{"seed": "x"}), &mountOpts{passthrough: c.pt, xattrs: c.xattrs})
			f, err := os.Create(filepath.Join(dir, "f"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := f.WriteAt(buf, int64(i%4096)*4096); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("native", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "f"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		b.SetBytes(int64(len(buf)))
		for i := 0; i < b.N; i++ {
			if _, err := f.WriteAt(buf, int64(i%4096)*4096); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWriteFsync appends 4 KiB and fsyncs, as databases and git do.
func BenchmarkWriteFsync(b *testing.B) {
	buf := bytes.Repeat([]byte("x"), 4096)
	for _, tg := range benchTargets() {
		b.Run(tg.name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(tg.dir(b), "db"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPassthroughWriterWhileCleanReaderOpen: a clean file held open by a
// reader (the blob is the kernel's backing file) is copied up by a writer;
// new opens must see the writer's data, not the blob.
func TestPassthroughWriterWhileCleanReaderOpen(t *testing.T) {
	objs := newFakeObjects(t)
	_, mnt := mountT(t, objs, objs.build(t, spec{"f": "old content", "g": "x"}), &mountOpts{passthrough: true})
	// With PassthroughClean the writer is refused while the reader is open.
	_, mnt2 := mountT(t, objs, objs.build(t, spec{"f": "old content"}), &mountOpts{passthrough: true, ptClean: true})
	r2, err := os.Open(filepath.Join(mnt2, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.OpenFile(filepath.Join(mnt2, "f"), os.O_RDWR, 0); !errors.Is(err, syscall.ETXTBSY) {
		t.Fatalf("writer with PassthroughClean: %v, want ETXTBSY", err)
	}
	r2.Close()

	p := filepath.Join(mnt, "f")
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 3)
	if _, err := r.ReadAt(buf, 0); err != nil || string(buf) != "old" {
		t.Fatalf("reader: %q %v", buf, err)
	}
	w, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("NEW"), 0); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, p); got != "NEW content" {
		t.Fatalf("new open while reader open: %q", got)
	}
	w.Close()
	r.Close()
	if got := mustRead(t, p); got != "NEW content" {
		t.Fatalf("after closing all: %q", got)
	}
}

// TestPassthroughAfterPlainHandles orders RELEASEs the way a loaded
// machine can: a plain (uncached) handle opened while a cached reader was
// open is released after a passthrough open of the same inode. go-fuse
// drops its per-inode backing-ID count at every RELEASE, so the daemon
// must not hand out passthrough while plain handles are open; before it
// did, the next open here failed with EIO (the kernel refused a second
// backing file for the inode).
func TestPassthroughAfterPlainHandles(t *testing.T) {
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, spec{"f": "old content"}), &mountOpts{passthrough: true})
	p := filepath.Join(mnt, "f")
	r, err := os.Open(p) // cached reader of the blob
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(p, os.O_RDWR, 0) // copies up; uncached while r is open
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("NEW"), 0); err != nil {
		t.Fatal(err)
	}
	r.Close()
	waitOpenHandles(m, 1)
	x, err := os.Open(p) // w is still open
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	w.Close()
	waitOpenHandles(m, 1)
	for i := range 3 {
		if got := mustRead(t, p); got != "NEW content" {
			t.Fatalf("open %d after the plain handles closed: %q", i, got)
		}
	}
	buf := make([]byte, 11)
	if _, err := x.ReadAt(buf, 0); err != nil || string(buf) != "NEW content" {
		t.Fatalf("handle opened while w was open: %q %v", buf, err)
	}
}

// BenchmarkCreateLogged creates files in one directory of a mount and
// reports the overlay log's bytes per create (wal.go); "unlogged" is the
// same mount with the log's flush turned off, for its time.
func BenchmarkCreateLogged(b *testing.B) {
	for _, logged := range []bool{true, false} {
		name := "logged"
		if !logged {
			name = "unlogged"
		}
		b.Run(name, func(b *testing.B) {
			objs := newFakeObjects(b)
			m, mnt := mountT(b, objs, objs.build(b, spec{"d/seed": "x"}), &mountOpts{passthrough: true})
			if !logged {
				m.dirs.flush = func(uint64) {}
			}
			dir := filepath.Join(mnt, "d")
			mustWrite(b, filepath.Join(dir, "first"), "") // the log's base snapshot
			m.ov.mu.Lock()
			start := m.ov.wal.size
			m.ov.mu.Unlock()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)))
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			b.StopTimer()
			m.ov.mu.Lock()
			end := m.ov.wal.size
			m.ov.mu.Unlock()
			b.ReportMetric(float64(end-start)/float64(b.N), "logB/op")
		})
	}
}
