package store

import (
	"fmt"
	"slices"
	"strings"
)

// Hard-link groups (Generation.Links). A group is the sorted paths of one
// file (any kind but a directory) with several names; a generation's groups are sorted by their first
// path and disjoint. The tree itself has no link identity: each path holds
// an ordinary file entry, so a reader that ignores the groups sees
// separate files with equal content.

// ValidLinks checks that groups are in canonical form: each group at least
// two valid, sorted, unique paths; groups sorted by first path; no path in
// two groups.
func ValidLinks(groups [][]string) error {
	seen := map[string]bool{}
	for i, g := range groups {
		if len(g) < 2 {
			return fmt.Errorf("%w: link group %d has fewer than two paths", ErrCorrupt, i)
		}
		if i > 0 && groups[i-1][0] >= g[0] {
			return fmt.Errorf("%w: link groups not sorted at %q", ErrCorrupt, g[0])
		}
		for j, p := range g {
			if !ValidPath(p) {
				return fmt.Errorf("%w: link group %d: bad path %q", ErrCorrupt, i, p)
			}
			if j > 0 && g[j-1] >= p {
				return fmt.Errorf("%w: link group %d not sorted and unique at %q", ErrCorrupt, i, p)
			}
			if seen[p] {
				return fmt.Errorf("%w: path %q in two link groups", ErrCorrupt, p)
			}
			seen[p] = true
		}
	}
	return nil
}

// ValidPath reports whether p is a relative slash-separated path of valid
// names (no empty, "." or ".." component).
func ValidPath(p string) bool {
	if p == "" {
		return false
	}
	for name := range strings.SplitSeq(p, "/") {
		if !ValidName(name) {
			return false
		}
	}
	return true
}

// NormalizeLinks returns groups in canonical form: each group's paths
// sorted and deduplicated, groups of fewer than two paths dropped, a path
// already in an earlier group (in the order given) dropped from later
// ones, and the groups sorted by first path. Invalid paths are dropped.
// nil when nothing is left.
func NormalizeLinks(groups [][]string) [][]string {
	var out [][]string
	seen := map[string]bool{}
	for _, g := range groups {
		var ng []string
		for _, p := range g {
			if ValidPath(p) && !seen[p] {
				ng = append(ng, p)
			}
		}
		slices.Sort(ng)
		ng = slices.Compact(ng)
		if len(ng) < 2 {
			continue
		}
		for _, p := range ng {
			seen[p] = true
		}
		out = append(out, ng)
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// FitLinks keeps of groups what holds in a tree: entryOf returns the entry
// at a path (false where there is none; an error stops the fit). Each
// group is restricted to paths that are not directories and split by what
// they hold (kind, ID and size: content, symlink target or device
// number), parts of fewer than two paths dropped; the result is canonical
// (NormalizeLinks).
func FitLinks(groups [][]string, entryOf func(path string) (Entry, bool, error)) ([][]string, error) {
	var out [][]string
	type key struct {
		k    Kind
		id   ID
		size int64
	}
	for _, g := range groups {
		parts := map[key][]string{}
		var order []key
		for _, p := range g {
			e, ok, err := entryOf(p)
			if err != nil {
				return nil, fmt.Errorf("link group of %q: %w", p, err)
			}
			if !ok || e.Kind == KindDir {
				continue
			}
			k := key{e.Kind, e.ID, e.Size}
			if _, ok := parts[k]; !ok {
				order = append(order, k)
			}
			parts[k] = append(parts[k], p)
		}
		for _, k := range order {
			out = append(out, parts[k])
		}
	}
	return NormalizeLinks(out), nil
}

// EqualLinks reports whether two canonical group lists are equal.
func EqualLinks(a, b [][]string) bool {
	return slices.EqualFunc(a, b, slices.Equal[[]string])
}

// MergeLinks merges the link groups of a three-way merge: a group both
// sides have survives; a group one side made (not in base) survives unless
// it overlaps a group ours keeps (ours wins); a base group one side
// dropped or changed is gone (that side split the file, or made another
// group of it). The result is canonical but not yet fitted to the merged
// tree (FitLinks).
func MergeLinks(base, ours, theirs [][]string) [][]string {
	key := func(g []string) string { return strings.Join(g, "\x00") }
	inBase := map[string]bool{}
	for _, g := range base {
		inBase[key(g)] = true
	}
	inTheirs := map[string]bool{}
	for _, g := range theirs {
		inTheirs[key(g)] = true
	}
	var keep [][]string
	for _, g := range ours {
		if inTheirs[key(g)] || !inBase[key(g)] {
			keep = append(keep, g)
		}
	}
	for _, g := range theirs {
		if !inBase[key(g)] {
			keep = append(keep, g) // NormalizeLinks drops what ours' groups hold
		}
	}
	return NormalizeLinks(keep)
}
