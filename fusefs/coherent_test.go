package fusefs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// coherentConfigs are the ways a clean file's reader and a later writer
// are served: everything through the daemon with the page cache (no
// passthrough), the daemon's default (cached clean readers, passthrough
// or direct writers), and the same over io_uring.
var coherentConfigs = []struct {
	name  string
	opts  mountOpts
	uring bool
}{
	{name: "cached", opts: mountOpts{}},
	{name: "passthrough", opts: mountOpts{passthrough: true}},
	{name: "passthrough-uring", opts: mountOpts{passthrough: true, uring: true}, uring: true},
}

// TestCoherentReadAfterWrite: a process opened a clean file and read it
// (its pages cached); another open writes to the file and appends. The
// first descriptor's pread sees the new bytes, and reading on from the old
// end of file (as tail -f does) returns the appended line, as on a native
// file system.
func TestCoherentReadAfterWrite(t *testing.T) {
	for _, c := range coherentConfigs {
		t.Run(c.name, func(t *testing.T) {
			if c.uring {
				needUring(t)
			}
			objs := newFakeObjects(t)
			o := c.opts
			_, mnt := mountT(t, objs, objs.build(t, spec{"log": "line1\n", "other": "x"}), &o)
			p := filepath.Join(mnt, "log")
			r, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			// tail -f: read to the end of file.
			if b, err := io.ReadAll(r); err != nil || string(b) != "line1\n" {
				t.Fatalf("first read: %q, %v", b, err)
			}
			w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if _, err := w.WriteString("line2\n"); err != nil {
				t.Fatal(err)
			}
			// The next read of the tail loop returns the appended line.
			buf := make([]byte, 64)
			n, err := r.Read(buf)
			if err != nil || string(buf[:n]) != "line2\n" {
				t.Fatalf("read past the old end of file: %q, %v; want the appended line", buf[:n], err)
			}
			// An overwrite inside the old size (by a third descriptor: pwrite
			// on an O_APPEND one appends) shows through the old descriptor.
			w2, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w2.Close()
			if _, err := w2.WriteAt([]byte("LINE1"), 0); err != nil {
				t.Fatal(err)
			}
			n, err = r.ReadAt(buf, 0)
			if err != io.EOF || string(buf[:n]) != "LINE1\nline2\n" {
				t.Fatalf("pread after overwrite: %q, %v", buf[:n], err)
			}
			// A second append seen by a loop that hit EOF before it.
			if n, err := r.Read(buf); n != 0 || err != io.EOF {
				t.Fatalf("read at end: %q, %v", buf[:n], err)
			}
			if _, err := w.WriteString("line3\n"); err != nil {
				t.Fatal(err)
			}
			n, err = r.Read(buf)
			if err != nil || string(buf[:n]) != "line3\n" {
				t.Fatalf("second tail read: %q, %v", buf[:n], err)
			}
		})
	}
}

// TestCoherentReadAfterTruncatingWrite: the writer replaces the content
// (O_TRUNC, as a shell's > does) while a reader holds the clean file open.
func TestCoherentReadAfterTruncatingWrite(t *testing.T) {
	for _, c := range coherentConfigs {
		t.Run(c.name, func(t *testing.T) {
			if c.uring {
				needUring(t)
			}
			objs := newFakeObjects(t)
			o := c.opts
			_, mnt := mountT(t, objs, objs.build(t, spec{"f": "old content"}), &o)
			p := filepath.Join(mnt, "f")
			r, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if b, err := io.ReadAll(r); err != nil || string(b) != "old content" {
				t.Fatalf("first read: %q, %v", b, err)
			}
			mustWrite(t, p, "new")
			buf := make([]byte, 64)
			n, err := r.ReadAt(buf, 0)
			if err != io.EOF || string(buf[:n]) != "new" {
				t.Fatalf("pread after the file was replaced: %q, %v", buf[:n], err)
			}
		})
	}
}

// TestCoherentReadOtherProcess: the writer is another process (a shell
// appending with >>), the reader an open descriptor of this one.
func TestCoherentReadOtherProcess(t *testing.T) {
	objs := newFakeObjects(t)
	_, mnt := mountT(t, objs, objs.build(t, spec{"log": "a\n"}), &mountOpts{passthrough: true})
	p := filepath.Join(mnt, "log")
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, err := io.ReadAll(r); err != nil || string(b) != "a\n" {
		t.Fatalf("first read: %q, %v", b, err)
	}
	if out, err := exec.Command("sh", "-c", `printf 'b\n' >> "$1"`, "sh", p).CombinedOutput(); err != nil {
		t.Fatalf("append: %v %s", err, out)
	}
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "b\n" {
		t.Fatalf("read after another process appended: %q, %v", b, err)
	}
}

const mmapReaderEnv = "FUSEFS_MMAP_READER"

// mmapReaderChild maps a file read-only and shared, prints what the
// mapping holds, then, for every line on stdin, prints it again. It runs
// in its own process (see mmapChild).
func mmapReaderChild(p string) {
	fd, err := syscall.Open(p, syscall.O_RDONLY, 0)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	mem, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(strconv.Quote(string(mem)))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println(strconv.Quote(string(mem)))
	}
	os.Exit(0)
}

// TestCoherentMmapReader: a process maps a clean file read-only and
// shared; another descriptor writes into the mapped range. The mapping
// shows the new bytes, as on a native file system.
func TestCoherentMmapReader(t *testing.T) {
	for _, c := range coherentConfigs {
		t.Run(c.name, func(t *testing.T) {
			if c.uring {
				needUring(t)
			}
			objs := newFakeObjects(t)
			o := c.opts
			_, mnt := mountT(t, objs, objs.build(t, spec{"f": "0123456789"}), &o)
			p := filepath.Join(mnt, "f")
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), mmapReaderEnv+"="+p)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				stdin.Close()
				if err := cmd.Wait(); err != nil {
					t.Errorf("mmap reader: %v", err)
				}
			}()
			out := bufio.NewScanner(stdout)
			next := func() string {
				if !out.Scan() {
					t.Fatalf("mmap reader ended: %v", out.Err())
				}
				return out.Text()
			}
			if got := next(); got != `"0123456789"` {
				t.Fatalf("mapping before the write: %s", got)
			}
			w, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if _, err := w.WriteAt([]byte("AB"), 2); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(stdin, "again\n"); err != nil {
				t.Fatal(err)
			}
			if got := next(); got != `"01AB456789"` {
				t.Fatalf("mapping after another descriptor wrote: %s, want \"01AB456789\"", got)
			}
		})
	}
}

// TestCoherentReadAcrossSwitch: a clean file is read (its pages kept in
// the kernel's cache across opens, FOPEN_KEEP_CACHE), then the view
// switches to one where the file has other content of the same size. A
// descriptor open across the switch keeps reading the content it opened,
// as a native descriptor of a file replaced by rename does, even after
// the switch dropped the cached pages; an open after the switch reads the
// new content, both while the old descriptor is open and after it closed
// (the pages the old descriptor read back must not be served to it).
func TestCoherentReadAcrossSwitch(t *testing.T) {
	for _, c := range coherentConfigs {
		t.Run(c.name, func(t *testing.T) {
			if c.uring {
				needUring(t)
			}
			objs := newFakeObjects(t)
			o := c.opts
			m, mnt := mountT(t, objs, objs.build(t, spec{"f": "old content\n", "other": "x"}), &o)
			p := filepath.Join(mnt, "f")
			if got := mustRead(t, p); got != "old content\n" {
				t.Fatalf("first read: %q", got)
			}
			r, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			buf := make([]byte, 64)
			if n, err := r.ReadAt(buf, 0); err != io.EOF || string(buf[:n]) != "old content\n" {
				t.Fatalf("read before the switch: %q, %v", buf[:n], err)
			}
			if err := m.SwitchView(objs.build(t, spec{"f": "NEW CONTENT\n", "other": "x"})); err != nil {
				t.Fatal(err)
			}
			// The old descriptor, after the switch dropped the pages.
			if n, err := r.ReadAt(buf, 0); err != io.EOF || string(buf[:n]) != "old content\n" {
				t.Fatalf("old descriptor after the switch: %q, %v", buf[:n], err)
			}
			if got := mustRead(t, p); got != "NEW CONTENT\n" {
				t.Fatalf("new open while the old descriptor is open: %q", got)
			}
			// The old descriptor reads again (after the new open dropped
			// the pages once more), then closes.
			if n, err := r.ReadAt(buf, 0); err != io.EOF || string(buf[:n]) != "old content\n" {
				t.Fatalf("old descriptor, second read: %q, %v", buf[:n], err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			waitReleased(m)
			for i := range 2 {
				if got := mustRead(t, p); got != "NEW CONTENT\n" {
					t.Fatalf("open %d after the old descriptor closed: %q", i+1, got)
				}
			}
		})
	}
}

// TestStorePagesSparesReadAndGetattr: the first open of a small clean
// file pushes its content into the kernel's page cache, so neither that
// read nor any later one reaches the daemon, and the next open + fstat
// sends no GETATTR (a READ's completion would have dropped the cached
// atime). A view switch that changes the file stores the new content at
// the next open; a big file is read through READ as before.
func TestStorePagesSparesReadAndGetattr(t *testing.T) {
	for _, c := range coherentConfigs[1:] { // the daemon's default: passthrough on, clean readers cached
		t.Run(c.name, func(t *testing.T) {
			if c.uring {
				needUring(t)
			}
			objs := newFakeObjects(t)
			o := c.opts
			big := strings.Repeat("b", storePagesMax+1)
			m, mnt := mountT(t, objs, objs.build(t, spec{"f": "small file\n", "big": big}), &o)
			p := filepath.Join(mnt, "f")
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil { // the entry, so that no LOOKUP counts below
				t.Fatal(err)
			}
			r0, g0 := m.daemonReads.Load(), m.daemonGetattrs.Load()
			for i := range 3 {
				if got := mustRead(t, p); got != "small file\n" {
					t.Fatalf("read %d: %q", i+1, got)
				}
				waitReleased(m)
			}
			if r, g, s := m.daemonReads.Load()-r0, m.daemonGetattrs.Load()-g0, m.storedPages.Load(); r != 0 || g != 0 || s != 1 {
				t.Errorf("three reads: %d READ, %d GETATTR, %d stores; want 0, 0, 1", r, g, s)
			}
			if err := m.SwitchView(objs.build(t, spec{"f": "SMALL FILE\n", "big": big})); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if got := mustRead(t, p); got != "SMALL FILE\n" {
					t.Fatalf("read %d after the switch: %q", i+1, got)
				}
				waitReleased(m)
			}
			if s := m.storedPages.Load(); s != 2 {
				t.Errorf("%d stores after the switch, want 2", s)
			}
			r0 = m.daemonReads.Load()
			if got := mustRead(t, filepath.Join(mnt, "big")); got != big {
				t.Fatalf("big file read %d bytes", len(got))
			}
			if r := m.daemonReads.Load() - r0; r == 0 {
				t.Errorf("a file over %d bytes was stored, want it read through READ", storePagesMax)
			}
		})
	}
}
