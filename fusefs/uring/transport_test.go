package uring

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func TestParseCPUCount(t *testing.T) {
	for _, c := range []struct {
		list string
		want int
	}{
		{"0\n", 1},
		{"0-1\n", 2},
		{"0-3,8-11", 12},
		{"0,2,5", 6},
	} {
		if got, err := parseCPUCount(c.list); err != nil || got != c.want {
			t.Errorf("parseCPUCount(%q) = %d, %v; want %d", c.list, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "\n", "x", "3-1", "0-", "-1", "0,,1"} {
		if n, err := parseCPUCount(bad); err == nil {
			t.Errorf("parseCPUCount(%q) = %d, want an error", bad, n)
		}
	}
}

// needRings turns FUSE over io_uring on (as root, as CI runs; restored at
// cleanup) or skips the test.
func needRings(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if err := TurnOn(); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() {
		if err := Restore(); err != nil {
			t.Error(err)
		}
	})
}

// tree is a file system of one file, f, holding "hello\n".
type tree struct{ fs.Inode }

func (r *tree) OnAdd(ctx context.Context) {
	f := r.NewPersistentInode(ctx, &fs.MemRegularFile{Data: []byte("hello\n"), Attr: fuse.Attr{Mode: 0o644}}, fs.StableAttr{Ino: 2})
	r.AddChild("f", f, false)
}

// mountRings mounts tree at a fresh directory, served over io_uring with
// admitsNow, and unmounts it at cleanup.
func mountRings(t *testing.T, admitsNow func(uint32) bool) (*Transport, string) {
	t.Helper()
	mp := t.TempDir()
	fsys := fs.NewNodeFS(&tree{}, &fs.Options{})
	opts := &fuse.MountOptions{FsName: "uring-test", Name: "uringtest", DirectMount: true, MaxWrite: 1 << 20,
		ExtraCapabilities: fuse.CAP_OVER_IO_URING}
	server, fd, err := NewServer(fsys, mp, opts, true)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	go server.Serve()
	tr, err := Start(server, fsys, opts, fd, admitsNow)
	if err != nil {
		_ = server.Unmount()
		server.Wait()
		t.Fatalf("start the rings: %v", err)
	}
	if err := server.WaitMount(); err != nil {
		tr.Stop()
		t.Fatalf("wait for the mount: %v", err)
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		server.Wait()
		tr.Stop()
		b, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(b), " "+mp+" ") {
			t.Errorf("%s still mounted", mp)
		}
	})
	return tr, mp
}

// use looks the file up, reads it and lists the root through the mount.
func use(t *testing.T, mp string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mp, "f"))
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("read f: %q, %v", b, err)
	}
	names, err := os.ReadDir(mp)
	if err != nil || len(names) != 1 || names[0].Name() != "f" {
		t.Fatalf("list the root: %v, %v", names, err)
	}
	if _, err := os.Stat(filepath.Join(mp, "missing")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of a missing name: %v, want ENOENT", err)
	}
}

// Requests reach the file system through the rings and are answered on
// their queue's thread.
func TestServeOverRings(t *testing.T) {
	needRings(t)
	tr, mp := mountRings(t, nil)
	before := tr.Answered()
	use(t, mp)
	if n := tr.Answered() - before; n < 3 {
		t.Fatalf("%d requests answered through the rings, want the lookups, open, read and listing", n)
	}
	if n := tr.OffThread(); n != 0 {
		t.Fatalf("%d requests answered off their queue's thread with every pid admitted", n)
	}
}

// Requests of a pid not admitted at once are answered on goroutines of
// their own and handed back to the queue's thread, which commits them.
func TestServeOffThread(t *testing.T) {
	needRings(t)
	tr, mp := mountRings(t, func(uint32) bool { return false })
	before := tr.OffThread()
	use(t, mp)
	if n := tr.OffThread() - before; n < 3 {
		t.Fatalf("%d requests answered off their queue's thread, want every request of the test's", n)
	}
}

// Start refuses a connection it cannot serve, with ErrUnavailable.
func TestStartWithoutDescriptor(t *testing.T) {
	_, err := Start(nil, nil, &fuse.MountOptions{MaxWrite: 1 << 20}, -1, nil)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Start without the /dev/fuse descriptor = %v, want ErrUnavailable", err)
	}
}

// parseCPUCount reads kernel text: whatever it holds, an answer is a
// positive count and nothing panics.
func FuzzParseCPUCount(f *testing.F) {
	for _, s := range []string{"0\n", "0-1\n", "0-3,8-11", "3-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		if n, err := parseCPUCount(list); err == nil && n <= 0 {
			t.Fatalf("parseCPUCount(%q) = %d without an error", list, n)
		}
	})
}
