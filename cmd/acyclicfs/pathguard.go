package main

import (
	"fmt"
	"os"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Path arguments that would destroy data are refused (exit 2) before
// anything is written (docs/security.md "Paths the CLI refuses"): an
// empty one (an unset variable: the working directory otherwise), and a
// directory to replace or serve over that is /, $HOME or one holding it,
// the working directory or one holding it, a store, inside one, or
// holding this store.

// pathArg refuses an empty path argument.
func pathArg(what, p string) error {
	if p == "" {
		return usageError{fmt.Errorf("%s: empty path (an unset variable?); name the directory, '.' for the current one", what)}
	}
	return nil
}

// safeTarget refuses a directory that a command (what: "export target",
// "in-place directory", "mountpoint") must not replace or serve over: the
// workspace rules (CheckSafeTarget); with cwd, the working directory and
// what holds it; with home, $HOME and what holds it.
func (a *app) safeTarget(what, dir string, cwd, home bool) error {
	store, err := a.storeDir()
	if err != nil {
		return err
	}
	if err := workspace.CheckSafeTarget(what, dir, store); err != nil {
		return usageError{err}
	}
	t := realDir(dir)
	if cwd && a.cwd != "" && dirfd.Within(realDir(a.cwd), t) {
		return usageError{fmt.Errorf("%w: %s %s is the current directory or holds it", workspace.ErrUnsafeTarget, what, dir)}
	}
	if h, err := os.UserHomeDir(); home && err == nil && h != "" && dirfd.Within(realDir(h), t) {
		return usageError{fmt.Errorf("%w: %s %s is the home directory or holds it", workspace.ErrUnsafeTarget, what, dir)}
	}
	return nil
}

// realDir is dir with symlinks resolved where it exists.
func realDir(dir string) string {
	return workspace.RealPath(dir)
}

// importSource refuses a directory to import (create --from) that is the
// store, inside it or holds it (the import would read the objects it
// writes), or inside another store.
func (a *app) importSource(dir string) error {
	store, err := a.storeDir()
	if err != nil {
		return err
	}
	d, s := realDir(dir), realDir(store)
	if dirfd.Within(d, s) || dirfd.Within(s, d) {
		return usageError{fmt.Errorf("%w: create --from %s: the store %s is there: an import would read the objects it writes", workspace.ErrUnsafeTarget, dir, store)}
	}
	if other, ok := workspace.EnclosingStore(d); ok {
		return usageError{fmt.Errorf("%w: create --from %s is inside the store %s (its files are its own format, not a tree)", workspace.ErrUnsafeTarget, dir, other)}
	}
	return nil
}
