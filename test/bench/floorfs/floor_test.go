package main

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/fusefs"
)

// TestFloorServes mounts the floor over each transport the kernel offers,
// starting from a small tree, and checks that what a tool does through it
// reads back: the loaded tree, create, write, read, rename, link, unlink,
// mkdir, rmdir of a non-empty and an empty directory, readdir.
func TestFloorServes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (/dev/fuse, DirectMount)")
	}
	for _, tr := range []string{"dev-fuse", "io_uring"} {
		t.Run(tr, func(t *testing.T) {
			if tr == "io_uring" && fusefs.UringAvailable() != nil {
				t.Skip("FUSE over io_uring not available")
			}
			src := t.TempDir()
			must(t, os.MkdirAll(filepath.Join(src, "d/e"), 0o755))
			must(t, os.WriteFile(filepath.Join(src, "d/f"), []byte("lower"), 0o640))
			must(t, os.Symlink("f", filepath.Join(src, "d/l")))
			mp := t.TempDir()
			m := mountT(t, mp, src, tr)
			if m.Transport() != tr {
				t.Fatalf("transport %s, want %s", m.Transport(), tr)
			}
			p := func(s string) string { return filepath.Join(mp, s) }
			if b, err := os.ReadFile(p("d/l")); err != nil || string(b) != "lower" {
				t.Fatalf("loaded file through symlink: %q %v", b, err)
			}
			// After a while (the file released), the content is back in
			// memory and still reads the same.
			defer func() {
				if b, err := os.ReadFile(p("d/f")); err != nil || string(b) != "upper!" {
					t.Errorf("read at the end: %q %v", b, err)
				}
			}()
			if st, err := os.Stat(p("d/f")); err != nil || st.Mode().Perm() != 0o640 {
				t.Fatalf("loaded mode: %v %v", st, err)
			}
			// A cached read, then a passthrough write, then a read: the
			// page cache must not serve the old content.
			if b, err := os.ReadFile(p("d/f")); err != nil || string(b) != "lower" {
				t.Fatalf("read: %q %v", b, err)
			}
			// (The reader's RELEASE is asynchronous: the writer may find it
			// still open and write through the daemon, which is correct.)
			must(t, os.WriteFile(p("d/f"), []byte("upper!"), 0o640))
			if b, err := os.ReadFile(p("d/f")); err != nil || string(b) != "upper!" {
				t.Fatalf("read after write: %q %v", b, err)
			}
			// A new file is written by passthrough, and read back the
			// same way after it is closed: no READ or WRITE reaches the
			// daemon.
			w0, r0 := daemonWrites.Load(), daemonReads.Load()
			must(t, os.WriteFile(p("d/pt"), []byte("passthrough"), 0o644))
			if b, err := os.ReadFile(p("d/pt")); err != nil || string(b) != "passthrough" {
				t.Fatalf("read after passthrough write: %q %v", b, err)
			}
			if w, r := daemonWrites.Load()-w0, daemonReads.Load()-r0; w != 0 || r != 0 {
				t.Errorf("%d writes and %d reads reached the daemon, want none (passthrough)", w, r)
			}
			must(t, os.Remove(p("d/pt")))
			// touch: create, set times, close; the SETATTR reply's
			// attributes are cached as long as any other, so the stat
			// after it costs no request.
			tf, err := os.Create(p("d/touched"))
			must(t, err)
			mt := time.Unix(1700000000, 0)
			must(t, os.Chtimes(p("d/touched"), mt, mt))
			must(t, tf.Close())
			g0 := daemonGetattrs.Load()
			if st, err := os.Stat(p("d/touched")); err != nil || !st.ModTime().Equal(mt) {
				t.Fatalf("stat after touch: %v %v", st, err)
			}
			if n := daemonGetattrs.Load() - g0; n != 0 {
				t.Errorf("stat after touch sent %d GETATTR, want none", n)
			}
			must(t, os.Remove(p("d/touched")))
			must(t, os.WriteFile(p("d/new"), []byte("hello world"), 0o644))
			f, err := os.OpenFile(p("d/new"), os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt([]byte("W"), 6)
			must(t, err)
			must(t, f.Close())
			must(t, os.Rename(p("d/new"), p("d/moved")))
			if b, err := os.ReadFile(p("d/moved")); err != nil || string(b) != "hello World" {
				t.Fatalf("read after write and rename: %q %v", b, err)
			}
			if _, err := os.Stat(p("d/new")); !os.IsNotExist(err) {
				t.Fatalf("old name after rename: %v", err)
			}
			must(t, os.Link(p("d/moved"), p("d/hard")))
			var st syscall.Stat_t
			must(t, syscall.Stat(p("d/hard"), &st))
			if st.Nlink != 2 {
				t.Fatalf("nlink after link = %d, want 2", st.Nlink)
			}
			must(t, os.Truncate(p("d/hard"), 5))
			if b, err := os.ReadFile(p("d/moved")); err != nil || string(b) != "hello" {
				t.Fatalf("truncate through the other link: %q %v", b, err)
			}
			must(t, os.Remove(p("d/hard")))
			must(t, syscall.Stat(p("d/moved"), &st))
			if st.Nlink != 1 {
				t.Fatalf("nlink after unlink = %d, want 1", st.Nlink)
			}
			if err := syscall.Rmdir(p("d")); err != syscall.ENOTEMPTY {
				t.Fatalf("rmdir of a non-empty directory: %v, want ENOTEMPTY", err)
			}
			must(t, os.Remove(p("d/e")))
			ents, err := os.ReadDir(p("d"))
			must(t, err)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if want := []string{"f", "l", "moved"}; !slices.Equal(names, want) {
				t.Fatalf("readdir = %v, want %v", names, want)
			}
		})
	}
}

// mountT mounts the floor at mp (from src, over transport tr) and
// unmounts it when the test ends.
func mountT(t *testing.T, mp, src, tr string) *fusefs.RawMount {
	t.Helper()
	m, err := mount(mp, src, tr, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mp, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
		m.Wait()
	})
	return m
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFloorNoOpen: with -no-open the kernel asks OPEN once, gets ENOSYS,
// and then serves every open from the page cache with no OPEN or GETATTR
// (a read from cached pages invalidates nothing); writes to an existing
// file (O_TRUNC as a SETATTR, the kernel's atomic_o_trunc being off) and
// new files still read back.
func TestFloorNoOpen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (/dev/fuse, DirectMount)")
	}
	*noOpen = true
	t.Cleanup(func() { *noOpen = false })
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "f"), []byte("lower"), 0o644))
	mp := t.TempDir()
	mountT(t, mp, src, "dev-fuse")
	p := func(s string) string { return filepath.Join(mp, s) }
	read := func(name, want string) {
		t.Helper()
		if b, err := os.ReadFile(p(name)); err != nil || string(b) != want {
			t.Fatalf("read %s: %q %v, want %q", name, b, err, want)
		}
	}
	read("f", "lower") // the OPEN that sets no_open, then a READ
	read("f", "lower") // a GETATTR: the READ dropped the cached atime
	o0, g0, r0 := daemonOpens.Load(), daemonGetattrs.Load(), daemonReads.Load()
	read("f", "lower")
	if o, g, r := daemonOpens.Load()-o0, daemonGetattrs.Load()-g0, daemonReads.Load()-r0; o != 0 || g != 0 || r != 0 {
		t.Errorf("a cached read sent %d OPEN, %d GETATTR, %d READ; want none", o, g, r)
	}
	must(t, os.WriteFile(p("f"), []byte("new"), 0o644))
	read("f", "new")
	must(t, os.WriteFile(p("g"), []byte("created"), 0o644))
	read("g", "created")
	if o := daemonOpens.Load() - o0; o != 0 {
		t.Errorf("%d OPEN after no_open, want none", o)
	}
}

// TestFloorStoresSmallFiles: as acyclicfs, the first open of a small file
// puts its content into the page cache, so no READ reaches the floor and
// the next open + fstat sends no GETATTR.
func TestFloorStoresSmallFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (/dev/fuse, DirectMount)")
	}
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "f"), []byte("small"), 0o644))
	mp := t.TempDir()
	mountT(t, mp, src, "dev-fuse")
	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(mp, "f"), &st))
	g0, r0 := daemonGetattrs.Load(), daemonReads.Load()
	for range 3 {
		if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "small" {
			t.Fatalf("read: %q %v", b, err)
		}
	}
	if g, r := daemonGetattrs.Load()-g0, daemonReads.Load()-r0; g != 0 || r != 0 {
		t.Errorf("three reads sent %d GETATTR and %d READ, want none", g, r)
	}
}

// TestFloorPersist: under -persist a created file's content lives in a
// real file in the directory given, one per file, and goes with the
// file's last name.
func TestFloorPersist(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (/dev/fuse, DirectMount)")
	}
	persistDir = t.TempDir()
	t.Cleanup(func() { persistDir = "" })
	mp := t.TempDir()
	mountT(t, mp, "", "dev-fuse")
	for _, name := range []string{"a", "b"} {
		must(t, os.WriteFile(filepath.Join(mp, name), []byte("content of "+name), 0o644))
	}
	files := func() []string {
		ents, err := os.ReadDir(persistDir)
		must(t, err)
		var out []string
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(persistDir, e.Name()))
			must(t, err)
			out = append(out, string(b))
		}
		slices.Sort(out)
		return out
	}
	if got := files(); !slices.Equal(got, []string{"content of a", "content of b"}) {
		t.Fatalf("persisted files %q", got)
	}
	must(t, os.Remove(filepath.Join(mp, "a")))
	if got := files(); !slices.Equal(got, []string{"content of b"}) {
		t.Fatalf("after unlink: persisted files %q", got)
	}
}
