package gitmerge

import (
	"fmt"
	"sort"

	"github.com/acyclicfs/acyclicfs/store"
)

// mdir is a directory being edited in memory: entries change by path and
// write stores only the directories that changed.
type mdir struct {
	self  store.Entry // this directory's entry (ID of the original tree)
	ents  map[string]store.Entry
	kids  map[string]*mdir
	dirty bool
}

func (j *job) openDir(e *store.Entry) (*mdir, error) {
	d := &mdir{ents: map[string]store.Entry{}, kids: map[string]*mdir{}}
	if e == nil || e.Kind != store.KindDir {
		d.self = store.Entry{Kind: store.KindDir, Mtime: j.stamp}
		d.dirty = true
		return d, nil
	}
	d.self = *e
	t, err := j.m.Store.GetTree(e.ID)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: read tree %s: %w", e.ID.Short(), err)
	}
	for _, c := range t.Entries {
		d.ents[c.Name] = c
	}
	return d, nil
}

// walk calls fn for every non-directory below d, with its slash path.
func (j *job) walk(d *mdir, prefix string, fn func(rel string, e store.Entry) error) error {
	names := make([]string, 0, len(d.ents))
	for n := range d.ents {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := d.ents[n]
		if e.Kind != store.KindDir {
			if err := fn(prefix+n, e); err != nil {
				return err
			}
			continue
		}
		kid, err := d.kid(j, n)
		if err != nil {
			return err
		}
		if err := j.walk(kid, prefix+n+"/", fn); err != nil {
			return err
		}
	}
	return nil
}

func (d *mdir) kid(j *job, name string) (*mdir, error) {
	if k, ok := d.kids[name]; ok {
		return k, nil
	}
	e, ok := d.ents[name]
	if !ok || e.Kind != store.KindDir {
		return nil, nil
	}
	k, err := j.openDir(&e)
	if err != nil {
		return nil, err
	}
	d.kids[name] = k
	return k, nil
}

// get returns the entry at rel, nil if absent.
func (d *mdir) get(j *job, rel string) (*store.Entry, error) {
	first, rest, more := cut(rel)
	e, ok := d.ents[first]
	if !ok {
		return nil, nil
	}
	if !more {
		return &e, nil
	}
	k, err := d.kid(j, first)
	if err != nil || k == nil {
		return nil, err
	}
	return k.get(j, rest)
}

// set puts e at rel (nil removes it), making directories on the way. It
// reports false, changing nothing, where a file stands where a directory
// is needed or a directory where the file would go.
func (d *mdir) set(j *job, rel string, e *store.Entry) (bool, error) {
	first, rest, more := cut(rel)
	cur, exists := d.ents[first]
	if !more {
		if exists && cur.Kind == store.KindDir {
			return false, nil
		}
		switch {
		case e == nil && exists:
			delete(d.ents, first)
		case e != nil:
			c := *e
			c.Name = first
			d.ents[first] = c
		default:
			return true, nil
		}
		d.dirty = true
		return true, nil
	}
	if exists && cur.Kind != store.KindDir {
		return false, nil
	}
	var k *mdir
	if exists {
		var err error
		if k, err = d.kid(j, first); err != nil {
			return false, err
		}
	} else {
		if e == nil {
			return true, nil
		}
		k = &mdir{self: store.Entry{Name: first, Kind: store.KindDir, Mtime: j.stamp}, ents: map[string]store.Entry{}, kids: map[string]*mdir{}, dirty: true}
		d.kids[first] = k
		d.ents[first] = k.self
		d.dirty = true
	}
	ok, err := k.set(j, rest, e)
	if ok && k.dirty {
		d.dirty = true
	}
	return ok, err
}

// write stores the changed directories below d and returns d's entry.
func (j *job) writeDir(d *mdir, rel string) (store.Entry, error) {
	if !d.dirty {
		return d.self, nil
	}
	t := &store.Tree{}
	for name, e := range d.ents {
		if k, ok := d.kids[name]; ok && e.Kind == store.KindDir {
			ke, err := j.writeDir(k, rel+"/"+name)
			if err != nil {
				return store.Entry{}, err
			}
			e.ID = ke.ID
			e.Mtime = max(e.Mtime, ke.Mtime)
		}
		e.Name = name
		t.Entries = append(t.Entries, e)
	}
	t.Sort()
	id, err := j.putTree(t, rel)
	if err != nil {
		return store.Entry{}, err
	}
	out := d.self
	out.Kind, out.ID, out.Size = store.KindDir, id, 0
	out.Mtime = max(out.Mtime, j.stamp)
	return out, nil
}
