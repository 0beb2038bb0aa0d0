package rebase

import (
	"sort"

	"github.com/acyclicfs/acyclicfs/store"
)

// Diff lists the paths that differ between root trees a and b (a zero ID is
// the empty tree), sorted by path. Entries are equal when kind and ID are;
// mtime alone is not a change. Subtrees with the same ID are never read, so
// the cost is proportional to the changes.
//
//   - A file, symlink or exec bit that changed is 'M' (file <-> exec is 'M').
//   - A directory added or deleted is listed as every file under it, each
//     'A' or 'D', not as the directory itself — except an empty directory,
//     which is listed itself since nothing else would show it.
//   - A change of type (file, directory, symlink) is 'T' at the path, with
//     Old and New the two entries; when one of them is a directory its
//     contents are also listed as 'D' or 'A' below the path.
func Diff(r TreeReader, a, b store.ID) ([]Change, error) {
	d := &differ{m: merger{r: r}}
	if err := d.dir("", a, b); err != nil {
		return nil, err
	}
	sort.Slice(d.out, func(i, j int) bool { return d.out[i].Path < d.out[j].Path })
	return d.out, nil
}

type differ struct {
	m   merger // for loadTree
	out []Change
}

func (d *differ) dir(path string, a, b store.ID) error {
	if a == b {
		return nil
	}
	at, err := d.m.loadTree(path, a)
	if err != nil {
		return err
	}
	bt, err := d.m.loadTree(path, b)
	if err != nil {
		return err
	}
	ae, be := at.Entries, bt.Entries
	for len(ae) > 0 || len(be) > 0 {
		var ap, bp *store.Entry
		switch {
		case len(be) == 0 || len(ae) > 0 && ae[0].Name < be[0].Name:
			ap, ae = &ae[0], ae[1:]
		case len(ae) == 0 || be[0].Name < ae[0].Name:
			bp, be = &be[0], be[1:]
		default:
			ap, bp, ae, be = &ae[0], &be[0], ae[1:], be[1:]
		}
		if err := d.entry(path, ap, bp); err != nil {
			return err
		}
	}
	return nil
}

func (d *differ) entry(dir string, a, b *store.Entry) error {
	if SameContent(a, b) {
		return nil
	}
	var p string
	if a != nil {
		p = joinPath(dir, a.Name)
	} else {
		p = joinPath(dir, b.Name)
	}
	switch {
	case a == nil:
		return d.whole(p, b, Added)
	case b == nil:
		return d.whole(p, a, Deleted)
	case a.Kind == store.KindDir && b.Kind == store.KindDir:
		if a.Perm() != b.Perm() {
			// The directory's own mode changed: a change of its own.
			d.out = append(d.out, Change{Path: p, Kind: Modified, Old: clone(a), New: clone(b)})
		}
		return d.dir(p, a.ID, b.ID)
	case category(a.Kind) == category(b.Kind):
		d.out = append(d.out, Change{Path: p, Kind: Modified, Old: clone(a), New: clone(b)})
		return nil
	}
	d.out = append(d.out, Change{Path: p, Kind: TypeChg, Old: clone(a), New: clone(b)})
	if a.Kind == store.KindDir {
		if err := d.contents(p, a.ID, Deleted); err != nil {
			return err
		}
	}
	if b.Kind == store.KindDir {
		return d.contents(p, b.ID, Added)
	}
	return nil
}

// whole lists an added or deleted entry: a file itself, a directory as
// everything under it (or itself when empty).
func (d *differ) whole(p string, e *store.Entry, kind ChangeKind) error {
	if e.Kind != store.KindDir {
		d.add(p, e, kind)
		return nil
	}
	n := len(d.out)
	if err := d.contents(p, e.ID, kind); err != nil {
		return err
	}
	if len(d.out) == n {
		d.add(p, e, kind)
	}
	return nil
}

func (d *differ) add(p string, e *store.Entry, kind ChangeKind) {
	c := Change{Path: p, Kind: kind}
	if kind == Added {
		c.New = clone(e)
	} else {
		c.Old = clone(e)
	}
	d.out = append(d.out, c)
}

func (d *differ) contents(p string, id store.ID, kind ChangeKind) error {
	t, err := d.m.loadTree(p, id)
	if err != nil {
		return err
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		if err := d.whole(joinPath(p, e.Name), e, kind); err != nil {
			return err
		}
	}
	return nil
}
