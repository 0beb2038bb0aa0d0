package workspace

import (
	"github.com/acyclicfs/acyclicfs/store"
)

// Hard-link groups travel with generations (store.Generation.Links). Every
// operation that makes a generation from a tree carries its source's
// groups, fitted to the new tree (fitLinks): a group keeps only the paths
// that still hold one file's content (kind, ID and size).

// LinksOf returns the link groups of generation gen (nil for zero).
func (m *Manager) LinksOf(gen store.ID) ([][]string, error) { return m.linksOf(gen) }

// linksOf returns the link groups of generation gen (nil for zero).
func (m *Manager) linksOf(gen store.ID) ([][]string, error) {
	if gen.IsZero() {
		return nil, nil
	}
	g, err := m.st.GetGeneration(gen)
	if err != nil {
		return nil, err
	}
	return g.Links, nil
}

// fitLinks restricts groups to what holds in root (store.FitLinks).
func (m *Manager) fitLinks(root store.ID, groups [][]string) ([][]string, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	return store.FitLinks(groups, func(p string) (store.Entry, bool, error) {
		e, err := m.entryAt(root, p)
		if err != nil || e == nil {
			return store.Entry{}, false, err
		}
		return *e, true, nil
	})
}

// mergedLinks returns the link groups of a merge of ours and theirs (each
// over base) whose result is root (store.MergeLinks, then fitted).
func (m *Manager) mergedLinks(base, ours, theirs, root store.ID) ([][]string, error) {
	var sides [3][][]string
	for i, g := range []store.ID{base, ours, theirs} {
		l, err := m.linksOf(g)
		if err != nil {
			return nil, err
		}
		sides[i] = l
	}
	return m.fitLinks(root, store.MergeLinks(sides[0], sides[1], sides[2]))
}
