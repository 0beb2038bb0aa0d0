package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/internal/dirfd"
)

// storeMarkers are the files only a store holds: its metadata (a local
// store) or its node configuration (a store on etcd).
var storeMarkers = []string{"meta.db", cluster.ConfigName}

// storeSkeleton are the names a store directory holds before its
// metadata exists (a first open that stopped half-way, a store whose
// meta.db was lost) besides the markers: the directories it makes and the
// daemon's files.
var storeSkeleton = map[string]bool{
	"objects": true, "tmp": true, "state": true, MountScratchDir: true,
	"daemon.lock": true, "daemon.log": true, "daemon.pid": true, "daemon.sock": true,
}

// IsStore reports whether dir is a store: it holds meta.db or
// cluster.json.
func IsStore(dir string) bool {
	for _, n := range storeMarkers {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			return true
		}
	}
	return false
}

// EnclosingStore is the nearest directory at or above the absolute path p
// that is a store, if any.
func EnclosingStore(p string) (string, bool) {
	for d := filepath.Clean(p); ; d = filepath.Dir(d) {
		if IsStore(d) {
			return d, true
		}
		if d == filepath.Dir(d) {
			return "", false
		}
	}
}

// CheckStoreDir refuses (ErrNotAStore) to make a store in dir when dir
// already holds files of someone else's: a directory that is absent,
// empty, a store, or holds nothing but what a store makes is fine. Opening
// a store makes its directory private (0700) and writes meta.db into it,
// so the user's directory picked by mistake (an unset $STORE, a typo)
// must be refused before that.
func CheckStoreDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		if errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("store %s: %w: not a directory", dir, ErrInvalidInput)
		}
		return fmt.Errorf("store %s: %w", dir, err)
	}
	if IsStore(dir) {
		return nil
	}
	var foreign []string
	for _, e := range ents {
		if !storeSkeleton[e.Name()] {
			foreign = append(foreign, e.Name())
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	more := ""
	if len(foreign) > 3 {
		more = fmt.Sprintf(", … (%d entries)", len(foreign))
		foreign = foreign[:3]
	}
	return fmt.Errorf("store %s: %w: the directory holds %s%s and no meta.db; refusing to make a store among its files (give a new or empty directory)",
		dir, ErrNotAStore, strings.Join(foreign, ", "), more)
}

// CheckSafeTarget refuses (ErrUnsafeTarget) a directory that a command
// replaces or serves over (what says which: "export target", "in-place
// directory", "mountpoint") when it is /, the store at storeDir or inside
// it or holding it, or another store or inside one. Both are
// absolute; symlinks in them are resolved where they exist.
func CheckSafeTarget(what, target, storeDir string) error {
	t, s := RealPath(target), RealPath(storeDir)
	switch {
	case t == "/":
		return fmt.Errorf("%w: %s %s is the root directory", ErrUnsafeTarget, what, target)
	case t == s:
		return fmt.Errorf("%w: %s %s is the store", ErrUnsafeTarget, what, target)
	case dirfd.Within(t, s):
		return fmt.Errorf("%w: %s %s is inside the store %s", ErrUnsafeTarget, what, target, storeDir)
	case dirfd.Within(s, t):
		return fmt.Errorf("%w: %s %s holds the store %s", ErrUnsafeTarget, what, target, storeDir)
	}
	if other, ok := EnclosingStore(t); ok {
		return fmt.Errorf("%w: %s %s is inside the store %s", ErrUnsafeTarget, what, target, other)
	}
	return nil
}

// RealPath is p with its symlinks resolved, or its longest existing
// prefix resolved and the rest as written.
func RealPath(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for d := p; ; d = filepath.Dir(d) {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(r, rest)
		}
		if d == filepath.Dir(d) {
			return p
		}
		rest = filepath.Join(filepath.Base(d), rest)
	}
}
