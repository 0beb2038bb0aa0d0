// Package fusectl aborts FUSE connections through the fusectl file
// system (/sys/fs/fuse/connections), mounting it first where the machine
// has not: a fresh container or VM often boots without it, and then a
// wedged connection could not be aborted at all.
package fusectl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Dir is where the kernel's fusectl file system is mounted.
const Dir = "/sys/fs/fuse/connections"

// ErrBadConn is returned for a connection name that is not a number.
var ErrBadConn = errors.New("fusectl: bad connection")

// Abort aborts FUSE connection conn (the device minor of its mount): every
// request waiting on it fails, and a server thread stuck in the kernel is
// released. It mounts fusectl at Dir if it is not mounted there yet (that
// needs root; otherwise the write's own error is returned).
func Abort(conn string) error {
	if conn == "" || strings.Trim(conn, "0123456789") != "" {
		return fmt.Errorf("%w: %q", ErrBadConn, conn)
	}
	path := filepath.Join(Dir, conn, "abort")
	err := os.WriteFile(path, []byte("1"), 0o200)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if merr := ensureMounted(); merr != nil {
		return fmt.Errorf("abort FUSE connection %s: %w (and mounting fusectl: %v)", conn, err, merr)
	}
	return os.WriteFile(path, []byte("1"), 0o200)
}

// ensureMounted mounts fusectl at Dir unless something is mounted there.
func ensureMounted() error {
	mounted, err := isMounted()
	if err != nil || mounted {
		return err
	}
	if err := syscall.Mount("fusectl", Dir, "fusectl", 0, ""); err != nil && !errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("mount fusectl on %s: %w", Dir, err)
	}
	return nil
}

// isMounted reports whether /proc/self/mountinfo lists a mount at Dir.
func isMounted() (bool, error) {
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		return false, fmt.Errorf("read mountinfo: %w", err)
	}
	_, _, found := Find(Dir)
	return found, nil
}

// Find looks mp up in /proc/self/mountinfo: the device minor (the FUSE
// connection number of a FUSE mount) and file system type of the mount on
// top at mp. It asks nothing of the mount itself, so it works on a wedged
// one.
func Find(mp string) (minor, fstype string, found bool) {
	dev, fstype, found := FindDev(mp)
	_, minor, _ = strings.Cut(dev, ":")
	return minor, fstype, found
}

// FindDev is Find with the whole device number, "major:minor" as
// mountinfo shows it (and as st_dev of the mount's files decodes).
func FindDev(mp string) (dev, fstype string, found bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", false
	}
	// The last line for mp is the mount on top, the one a path reaches.
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || unescapeMount(f[4]) != mp {
			continue
		}
		_, post, _ := strings.Cut(line, " - ")
		dev, found = f[2], true
		fstype, _, _ = strings.Cut(post, " ")
	}
	return dev, fstype, found
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// AbortAt aborts the FUSE connection mounted at mp, if mp is a FUSE mount.
func AbortAt(mp string) error {
	minor, fstype, found := Find(mp)
	if !found || !strings.HasPrefix(fstype, "fuse") || minor == "" {
		return nil
	}
	return Abort(minor)
}
