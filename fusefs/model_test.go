package fusefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/store"
	"pgregory.net/rapid"
)

// TestModelAgainstNative runs random operation sequences on a mount and
// on a native directory with the same starting content and requires the
// same results and errnos, the same final trees, and a capture equal to
// the native directory.
func TestModelAgainstNative(t *testing.T) {
	objs := newFakeObjects(t)
	seed := spec{"a": "lower-a", "x/b": "lower-b", "x/y/": "", "x/y/c": "*lower-c", "l": "->a"}
	root := objs.build(t, seed)
	names := []string{"a", "b", "c", "x", "y", "l"}
	dirs := []string{"", "x", "x/y", "z", "b"}

	rapid.Check(t, func(rt *rapid.T) {
		native := t.TempDir()
		materialize(t, native, seed)
		mnt := t.TempDir()
		pt := rapid.Bool().Draw(rt, "passthrough")
		m, err := MountAt(mnt, Config{Objects: objs, Root: root, StateDir: t.TempDir(), FsName: "fusefs-test",
			Passthrough: pt, PassthroughClean: pt && rapid.Bool().Draw(rt, "passthroughClean")})
		if err != nil {
			rt.Fatal(err)
		}
		defer func() {
			if err := m.Unmount(); err != nil {
				rt.Error(err)
			}
			m.Wait()
		}()
		path := func(label string) string {
			d := rapid.SampledFrom(dirs).Draw(rt, label+"dir")
			return filepath.Join(d, rapid.SampledFrom(names).Draw(rt, label))
		}
		var lastCapture store.ID
		n := rapid.IntRange(1, 40).Draw(rt, "n")
		for i := 0; i < n; i++ {
			var op func(base string) (string, error)
			var desc string
			switch rapid.IntRange(0, 15).Draw(rt, "op") {
			case 15:
				p := path("p")
				typ := rapid.SampledFrom([]uint32{syscall.S_IFIFO, syscall.S_IFSOCK}).Draw(rt, "type")
				desc = fmt.Sprintf("mknod %s %o", p, typ)
				op = func(b string) (string, error) { return "", syscall.Mknod(filepath.Join(b, p), typ|0o640, 0) }
			case 13:
				// Capture, and later pin that capture (what a lease close
				// does, with changes in between): the view must not change.
				desc = "capture"
				op = func(b string) (string, error) {
					if b == native {
						return "", nil
					}
					id, _, err := m.Capture()
					lastCapture = id
					return "", err
				}
			case 14:
				desc = "switch to last capture"
				op = func(b string) (string, error) {
					if b == native || lastCapture.IsZero() {
						return "", nil
					}
					return "", m.SwitchView(lastCapture)
				}
			case 0, 1:
				p, off := path("p"), rapid.IntRange(0, 10).Draw(rt, "off")
				data := rapid.StringMatching(`[a-z]{0,8}`).Draw(rt, "data")
				trunc := rapid.Bool().Draw(rt, "trunc")
				desc = fmt.Sprintf("write %s@%d %q trunc=%v", p, off, data, trunc)
				op = func(b string) (string, error) {
					fl := os.O_WRONLY | os.O_CREATE
					if trunc {
						fl |= os.O_TRUNC
					}
					f, err := os.OpenFile(filepath.Join(b, p), fl|noBlockOnFIFO(b, p), 0o644)
					if err != nil {
						return "", err
					}
					defer f.Close()
					_, err = f.WriteAt([]byte(data), int64(off))
					return "", err
				}
			case 2:
				p, size := path("p"), rapid.IntRange(0, 12).Draw(rt, "size")
				desc = fmt.Sprintf("truncate %s %d", p, size)
				op = func(b string) (string, error) { return "", os.Truncate(filepath.Join(b, p), int64(size)) }
			case 3, 4:
				from, to := path("from"), path("to")
				flags := rapid.SampledFrom([]uint{0, 0, unix.RENAME_NOREPLACE, unix.RENAME_EXCHANGE}).Draw(rt, "flags")
				desc = fmt.Sprintf("rename %s %s %d", from, to, flags)
				op = func(b string) (string, error) {
					return "", unix.Renameat2(unix.AT_FDCWD, filepath.Join(b, from), unix.AT_FDCWD, filepath.Join(b, to), flags)
				}
			case 5:
				p := path("p")
				desc = "unlink " + p
				op = func(b string) (string, error) { return "", syscall.Unlink(filepath.Join(b, p)) }
			case 6:
				p := path("p")
				desc = "mkdir " + p
				op = func(b string) (string, error) { return "", syscall.Mkdir(filepath.Join(b, p), 0o755) }
			case 7:
				p := path("p")
				desc = "rmdir " + p
				op = func(b string) (string, error) { return "", syscall.Rmdir(filepath.Join(b, p)) }
			case 8:
				from, to := path("from"), path("to")
				desc = fmt.Sprintf("link %s %s", from, to)
				op = func(b string) (string, error) { return "", syscall.Link(filepath.Join(b, from), filepath.Join(b, to)) }
			case 9:
				target, p := rapid.SampledFrom(names).Draw(rt, "target"), path("p")
				desc = fmt.Sprintf("symlink %s %s", target, p)
				op = func(b string) (string, error) { return "", syscall.Symlink(target, filepath.Join(b, p)) }
			case 10:
				p, mode := path("p"), rapid.SampledFrom([]uint32{0o644, 0o755, 0o600, 0o700}).Draw(rt, "mode")
				desc = fmt.Sprintf("chmod %s %o", p, mode)
				op = func(b string) (string, error) { return "", syscall.Chmod(filepath.Join(b, p), mode) }
			case 11:
				p := path("p")
				desc = "fsync " + p
				op = func(b string) (string, error) {
					f, err := os.OpenFile(filepath.Join(b, p), os.O_RDONLY|noBlockOnFIFO(b, p), 0)
					if err != nil {
						return "", err
					}
					defer f.Close()
					return "", f.Sync()
				}
			case 12:
				p := path("p")
				desc = "stat+read " + p
				op = func(b string) (string, error) {
					var st syscall.Stat_t
					if err := syscall.Lstat(filepath.Join(b, p), &st); err != nil {
						return "", err
					}
					s := fmt.Sprintf("mode=%o size=%d rdev=%#x", st.Mode, st.Size, st.Rdev)
					if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
						s += fmt.Sprintf(" nlink=%d", st.Nlink)
					}
					if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
						c, err := os.ReadFile(filepath.Join(b, p))
						if err != nil {
							return "", err
						}
						s += " " + string(c)
					}
					return s, nil
				}
			}
			wantRes, wantErr := op(native)
			gotRes, gotErr := op(mnt)
			if errnoOf(wantErr) != errnoOf(gotErr) || wantRes != gotRes {
				rt.Fatalf("%s: native (%q, %v) mount (%q, %v)", desc, wantRes, wantErr, gotRes, gotErr)
			}
		}
		want := flattenDir(t, native)
		if d := diffMaps(flattenDir(t, mnt), want); d != "" {
			rt.Fatalf("final trees differ (native vs mount):\n%s", d)
		}
		// A daemon killed now loses nothing: the state directory as it is
		// (snapshot, log, upper files) recovers the same tree.
		waitReleased(m)
		crashed := copyStateDir(t, m.cfg.StateDir)
		rid, _, err := RecoverCapture(crashed, objs, m.Root())
		if err != nil {
			rt.Fatalf("recover from the live state: %v", err)
		}
		if d := diffMaps(objs.flatten(t, rid), want); d != "" {
			rt.Fatalf("recovered from the live state (no unmount) differs from native:\n%s", d)
		}
		id, _, err := m.Capture()
		if err != nil {
			rt.Fatal(err)
		}
		if d := diffMaps(objs.flatten(t, id), want); d != "" {
			rt.Fatalf("capture differs from native:\n%s", d)
		}
	})
}

// noBlockOnFIFO is O_NONBLOCK when b/p is (or a symlink there leads to) a
// FIFO, so that opening it without a peer fails (ENXIO) or returns at once
// rather than wait.
func noBlockOnFIFO(b, p string) int {
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join(b, p), &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO {
		return syscall.O_NONBLOCK
	}
	return 0
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	if err != nil {
		return syscall.Errno(1 << 20)
	}
	return 0
}

// materialize writes a spec into a real directory.
func materialize(t testing.TB, dir string, s spec) {
	for p, content := range s {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case len(p) > 0 && p[len(p)-1] == '/':
			os.MkdirAll(full, 0o755)
		case len(content) >= 2 && content[:2] == "->":
			os.Symlink(content[2:], full)
		case len(content) >= 1 && content[0] == '*':
			os.WriteFile(full, []byte(content[1:]), 0o755)
		default:
			os.WriteFile(full, []byte(content), 0o644)
		}
	}
}

// copyStateDir copies a mount's state directory as a killed daemon would
// leave it (the mount must be idle).
func copyStateDir(t testing.TB, dir string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
