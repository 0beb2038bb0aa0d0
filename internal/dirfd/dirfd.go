// Package dirfd gives confined access to one directory tree through an
// open directory file descriptor.
//
// Every path argument is a slash-separated path relative to the directory
// ("" is the directory itself). Paths are resolved with openat2(2) and
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS, so no
// component is ever a followed symlink and nothing resolves outside the
// directory; the final component is operated on with the *at system calls
// and never followed either. Because everything goes through the
// descriptor, a Dir keeps working after the directory is renamed or
// mounted over (acyclicfs mounts its FUSE overlay over an in-place
// workspace's directory and keeps a Dir to the directory underneath).
//
// A Dir is safe for concurrent use. It needs Linux 5.6 (openat2).
package dirfd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrBadPath is returned when a path argument is absolute, empty in a
// component, contains "." or ".." components or a NUL byte, or names the
// directory itself where that is not allowed.
var ErrBadPath = errors.New("bad relative path")

// resolveFlags confine every resolution to the directory, symlink-free.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Dir is an open directory. Close it when done.
type Dir struct {
	fd        int
	path      string
	closeOnce sync.Once
	closeErr  error
}

// Entry is one directory entry with its lstat.
type Entry struct {
	Name string
	Stat unix.Stat_t
}

// Open opens the directory at path (absolute, or relative to the working
// directory; symlinks in path are followed like open(2) does — confinement
// starts at the directory opened).
func Open(path string) (*Dir, error) {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, path: path}, nil
}

// Close closes the descriptor. Calling it again returns the first result.
func (d *Dir) Close() error {
	d.closeOnce.Do(func() {
		if err := unix.Close(d.fd); err != nil {
			d.closeErr = &fs.PathError{Op: "close", Path: d.path, Err: err}
		}
	})
	return d.closeErr
}

// Path returns the path the directory was opened at (for messages; the
// directory may have moved since).
func (d *Dir) Path() string { return d.path }

// Fd returns the directory's descriptor, owned by d.
func (d *Dir) Fd() int { return d.fd }

// checkRel validates a relative path; "" is the directory itself.
func checkRel(rel string) error {
	if rel == "" {
		return nil
	}
	if strings.IndexByte(rel, 0) >= 0 {
		return fmt.Errorf("%w: %q contains NUL", ErrBadPath, rel)
	}
	if rel[0] == '/' {
		return fmt.Errorf("%w: %q is absolute", ErrBadPath, rel)
	}
	for c := range strings.SplitSeq(rel, "/") {
		switch c {
		case "":
			return fmt.Errorf("%w: %q has an empty component", ErrBadPath, rel)
		case ".", "..":
			return fmt.Errorf("%w: %q has a %q component", ErrBadPath, rel, c)
		}
	}
	return nil
}

// full is rel joined to the directory's path, for errors.
func (d *Dir) full(rel string) string {
	if rel == "" {
		return d.path
	}
	return path.Join(d.path, rel)
}

func (d *Dir) pathErr(op, rel string, err error) error {
	return &fs.PathError{Op: op, Path: d.full(rel), Err: err}
}

// retry repeats a call interrupted by a signal, or refused by openat2
// because a concurrent rename made RESOLVE_BENEATH unprovable.
func retry(fn func() (int, error)) (int, error) {
	for i := 0; ; i++ {
		fd, err := fn()
		if (err == unix.EINTR || err == unix.EAGAIN) && i < 64 {
			continue
		}
		return fd, err
	}
}

// openBeneath opens rel (which checkRel accepted) with openat2.
func (d *Dir) openBeneath(rel string, flags int, mode uint32) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolveFlags}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(mode)
	}
	// The kernel takes at most PATH_MAX bytes in one path, but a tree can
	// be deeper than that (a mount builds it one component at a time): a
	// longer rel is walked in pieces, each opened beneath the last, under
	// the same resolve rules.
	at := d.fd
	release := func() {
		if at != d.fd {
			unix.Close(at)
		}
	}
	defer func() { release() }()
	for len(rel) >= walkPiece {
		cut := strings.LastIndexByte(rel[:walkPiece], '/')
		if cut <= 0 {
			return -1, unix.ENAMETOOLONG // no component is that long
		}
		piece := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags}
		fd, err := retry(func() (int, error) { return unix.Openat2(at, rel[:cut], piece) })
		if err != nil {
			return -1, err
		}
		release()
		at, rel = fd, rel[cut+1:]
	}
	return retry(func() (int, error) { return unix.Openat2(at, rel, how) })
}

// Missing reports whether err from a call here means the path holds
// nothing beneath the directory: a component is absent, is not a
// directory, or is a symlink (never followed).
func Missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}

// Within reports whether the clean absolute path p is dir or lies below
// it (lexically).
func Within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// walkPiece bounds the paths openBeneath passes the kernel (PATH_MAX is
// 4096; names are at most 255 bytes, so a piece always has a cut).
const walkPiece = 2048

// parent opens the directory holding rel's final component and returns
// a descriptor for it, the final name and a release function. rel must be
// non-empty. The parent itself is reached without following symlinks.
func (d *Dir) parent(op, rel string) (int, string, func(), error) {
	if err := checkRel(rel); err != nil {
		return -1, "", nil, d.pathErr(op, rel, err)
	}
	if rel == "" {
		return -1, "", nil, d.pathErr(op, rel, fmt.Errorf("%w: the directory itself", ErrBadPath))
	}
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return d.fd, rel, func() {}, nil
	}
	pfd, err := d.openBeneath(rel[:i], unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", nil, d.pathErr(op, rel, err)
	}
	return pfd, rel[i+1:], func() { unix.Close(pfd) }, nil
}

// at is parent for operations that may also apply to the directory
// itself: for "" it returns the directory and ".".
func (d *Dir) at(op, rel string) (int, string, func(), error) {
	if rel == "" {
		return d.fd, ".", func() {}, nil
	}
	return d.parent(op, rel)
}

// Lstat returns the status of rel without following a final symlink.
func (d *Dir) Lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	pfd, name, release, err := d.at("lstat", rel)
	if err != nil {
		return st, err
	}
	defer release()
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, d.pathErr("lstat", rel, err)
	}
	return st, nil
}

// OpenFile opens rel with flags (O_NOFOLLOW and O_CLOEXEC are added, so a
// final symlink fails with ELOOP). perm is used only with O_CREAT or
// O_TMPFILE.
func (d *Dir) OpenFile(rel string, flags int, perm uint32) (*os.File, error) {
	if err := checkRel(rel); err != nil {
		return nil, d.pathErr("open", rel, err)
	}
	fd, err := d.openBeneath(rel, flags|unix.O_NOFOLLOW, perm)
	if err != nil {
		return nil, d.pathErr("open", rel, err)
	}
	return os.NewFile(uintptr(fd), d.full(rel)), nil
}

// ReadDir lists directory rel sorted by name, with each entry's lstat.
// Entries removed between listing and lstat are left out.
func (d *Dir) ReadDir(rel string) ([]Entry, error) { return d.ReadDirWith(rel, nil) }

// ReadDirWith is ReadDir that first calls opened, if set, with the
// directory's descriptor (valid only during the call), before it reads a
// name: what opened sets up sees every change the listing may miss.
func (d *Dir) ReadDirWith(rel string, opened func(fd int) error) ([]Entry, error) {
	f, err := d.OpenFile(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if opened != nil {
		rc, err := f.SyscallConn()
		if err != nil {
			return nil, d.pathErr("readdir", rel, err)
		}
		var openedErr error
		if err := rc.Control(func(fd uintptr) { openedErr = opened(int(fd)) }); err != nil {
			return nil, d.pathErr("readdir", rel, err)
		}
		if openedErr != nil {
			return nil, openedErr
		}
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, d.pathErr("readdir", rel, err)
	}
	sort.Strings(names)
	// f.Fd would switch f to blocking mode; a directory does not care, but
	// SyscallConn avoids the side effect altogether.
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, d.pathErr("readdir", rel, err)
	}
	out := make([]Entry, 0, len(names))
	var statErr error
	ctlErr := rc.Control(func(fd uintptr) {
		for _, name := range names {
			var st unix.Stat_t
			err := unix.Fstatat(int(fd), name, &st, unix.AT_SYMLINK_NOFOLLOW)
			if err == unix.ENOENT {
				continue
			}
			if err != nil {
				statErr = d.pathErr("lstat", path.Join(rel, name), err)
				return
			}
			out = append(out, Entry{Name: name, Stat: st})
		}
	})
	if ctlErr != nil {
		return nil, d.pathErr("readdir", rel, ctlErr)
	}
	if statErr != nil {
		return nil, statErr
	}
	return out, nil
}

// WithDir calls fn with an O_PATH descriptor of directory rel (valid only
// during the call), reached like every path here, the final component not
// followed.
func (d *Dir) WithDir(rel string, fn func(fd int) error) error {
	if err := checkRel(rel); err != nil {
		return d.pathErr("open", rel, err)
	}
	fd, err := d.openBeneath(rel, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return d.pathErr("open", rel, err)
	}
	defer unix.Close(fd)
	return fn(fd)
}

// Readlink returns the target of symlink rel.
func (d *Dir) Readlink(rel string) (string, error) {
	pfd, name, release, err := d.parent("readlink", rel)
	if err != nil {
		return "", err
	}
	defer release()
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(pfd, name, buf)
		if err != nil {
			return "", d.pathErr("readlink", rel, err)
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// Mkdir creates directory rel.
func (d *Dir) Mkdir(rel string, perm uint32) error {
	pfd, name, release, err := d.parent("mkdir", rel)
	if err != nil {
		return err
	}
	defer release()
	if err := unix.Mkdirat(pfd, name, perm); err != nil {
		return d.pathErr("mkdir", rel, err)
	}
	return nil
}

// Remove removes the file, symlink or empty directory rel.
func (d *Dir) Remove(rel string) error {
	pfd, name, release, err := d.parent("remove", rel)
	if err != nil {
		return err
	}
	defer release()
	err = unix.Unlinkat(pfd, name, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return d.pathErr("remove", rel, err)
	}
	return nil
}

// RemoveAll removes rel and everything under it. A missing rel is not an
// error. Symlinks are removed, never followed.
func (d *Dir) RemoveAll(rel string) error {
	pfd, name, release, err := d.parent("removeall", rel)
	if err != nil {
		return err
	}
	defer release()
	if err := removeAllAt(pfd, name); err != nil {
		return d.pathErr("removeall", rel, err)
	}
	return nil
}

// removeAllAt removes name in directory pfd. name is a single component,
// so each step stays inside the tree without openat2.
func removeAllAt(pfd int, name string) error {
	err := unix.Unlinkat(pfd, name, 0)
	switch err {
	case nil, unix.ENOENT:
		return nil
	case unix.EISDIR:
	default:
		return err
	}
	for {
		fd, err := retry(func() (int, error) {
			return unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		})
		if err == unix.ENOENT {
			return nil
		}
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		names, rerr := f.Readdirnames(-1)
		for _, n := range names {
			if err := removeAllAt(fd, n); err != nil {
				f.Close()
				return err
			}
		}
		f.Close()
		if rerr != nil {
			return rerr
		}
		err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
		switch err {
		case nil, unix.ENOENT:
			return nil
		case unix.ENOTEMPTY, unix.EEXIST:
			continue // something was added meanwhile; go again
		}
		return err
	}
}

// Rename renames oldRel to newRel (rename(2) semantics: an existing file
// or empty directory at newRel is replaced).
func (d *Dir) Rename(oldRel, newRel string) error {
	opfd, oname, orelease, err := d.parent("rename", oldRel)
	if err != nil {
		return err
	}
	defer orelease()
	npfd, nname, nrelease, err := d.parent("rename", newRel)
	if err != nil {
		return err
	}
	defer nrelease()
	if err := unix.Renameat(opfd, oname, npfd, nname); err != nil {
		return &os.LinkError{Op: "rename", Old: d.full(oldRel), New: d.full(newRel), Err: err}
	}
	return nil
}

// Symlink creates symlink rel pointing at target (stored verbatim).
func (d *Dir) Symlink(target, rel string) error {
	pfd, name, release, err := d.parent("symlink", rel)
	if err != nil {
		return err
	}
	defer release()
	if err := unix.Symlinkat(target, pfd, name); err != nil {
		return d.pathErr("symlink", rel, err)
	}
	return nil
}

// Mknod creates the FIFO, socket node or device node rel (mode holds the
// file type and permission bits, narrowed by the umask as mknod(2) does).
func (d *Dir) Mknod(rel string, mode uint32, rdev uint64) error {
	pfd, name, release, err := d.parent("mknod", rel)
	if err != nil {
		return err
	}
	defer release()
	if err := unix.Mknodat(pfd, name, mode, int(rdev)); err != nil {
		return d.pathErr("mknod", rel, err)
	}
	return nil
}

// Chmod sets rel's permission bits. A symlink is never followed (its mode
// cannot be changed: EOPNOTSUPP).
func (d *Dir) Chmod(rel string, mode uint32) error {
	pfd, name, release, err := d.at("chmod", rel)
	if err != nil {
		return err
	}
	defer release()
	err = unix.Fchmodat(pfd, name, mode, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.EOPNOTSUPP {
		// Either rel is a symlink or the kernel lacks fchmodat2.
		err = chmodNoFollow(pfd, name, mode)
	}
	if err != nil {
		return d.pathErr("chmod", rel, err)
	}
	return nil
}

// chmodNoFollow is the fchmodat2-less fallback: pin the inode with an
// O_PATH descriptor, refuse symlinks, chmod through /proc.
func chmodNoFollow(pfd int, name string, mode uint32) error {
	fd, err := retry(func() (int, error) {
		return unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unix.EOPNOTSUPP
	}
	return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode)
}

// SetMtime sets rel's modification time (nanoseconds since the epoch),
// leaving its access time; a symlink's own time is set, not its target's.
func (d *Dir) SetMtime(rel string, ns int64) error {
	pfd, name, release, err := d.at("utimes", rel)
	if err != nil {
		return err
	}
	defer release()
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(ns)}
	if err := unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return d.pathErr("utimes", rel, err)
	}
	return nil
}

// SyncDir fsyncs directory rel, making entry changes in it durable.
func (d *Dir) SyncDir(rel string) error {
	if err := checkRel(rel); err != nil {
		return d.pathErr("fsync", rel, err)
	}
	fd, err := d.openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return d.pathErr("fsync", rel, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return d.pathErr("fsync", rel, err)
	}
	return nil
}
