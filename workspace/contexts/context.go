package contexts

import "fmt"

// Usable refuses contexts that fork and land may not touch.
func (c Context) Usable() error {
	switch c.State {
	case Frozen:
		return fmt.Errorf("%w: %s", ErrFrozen, c.Name)
	case Discarded:
		return fmt.Errorf("%w: %s", ErrDiscarded, c.Name)
	}
	return nil
}

// HasRoot reports whether ws is one of c's roots.
func (c Context) HasRoot(ws string) bool {
	for _, r := range c.Roots {
		if r.Workspace == ws {
			return true
		}
	}
	return false
}

// RootsWithoutMountpoint lists c's roots that have no recorded mountpoint
// (a context mount refuses them).
func (c Context) RootsWithoutMountpoint() []string {
	var out []string
	for _, r := range c.Roots {
		if r.Mountpoint == "" {
			out = append(out, r.Workspace)
		}
	}
	return out
}
