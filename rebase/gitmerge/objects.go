package gitmerge

import (
	"bytes"
	"compress/zlib"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/acyclicfs/acyclicfs/store"
)

// objectsMerge is the merge of objects/: loose object directories
// ("ab/") and pack/ are unions of the three sides; objects/info and
// anything else follow the ours-unless-only-theirs-changed rule.
type objectsMerge struct {
	ours    *store.Entry
	entries map[string]*store.Entry // merged children of objects/
	trees   map[string]*store.Tree  // loaded merged union dirs, by name
	dirty   map[string]bool         // union dirs whose tree must be written
}

func isUnionDir(name string) bool { return name == "pack" || isHex(name, 2) }

func (j *job) mergeObjects() (*objectsMerge, error) {
	var b, o, t *store.Entry
	if e, ok := j.bt.Lookup("objects"); ok && e.Kind == store.KindDir {
		b = &e
	}
	oe, _ := j.ot.Lookup("objects")
	te, _ := j.tt.Lookup("objects")
	o, t = &oe, &te
	om := &objectsMerge{ours: o, entries: map[string]*store.Entry{}, trees: map[string]*store.Tree{}, dirty: map[string]bool{}}
	bt, ot, tt, err := j.readDirs("objects", b, o, t)
	if err != nil {
		return nil, err
	}
	eachName(bt, ot, tt, func(name string, be, oe, te *store.Entry) {
		if err != nil {
			return
		}
		rel := "objects/" + name
		if isUnionDir(name) {
			err = om.union(j, rel, name, be, oe, te)
			return
		}
		om.entries[name], err = j.merge3(rel, be, oe, te, oursPolicy)
	})
	if err != nil {
		return nil, err
	}
	return om, nil
}

// union merges one loose-object directory or pack/: every name of any
// side survives; a name both sides hold with different bytes keeps ours
// and is a conflict unless it is the same object compressed differently.
func (om *objectsMerge) union(j *job, rel, name string, b, o, t *store.Entry) error {
	dir := func(e *store.Entry) *store.Entry {
		if e == nil || e.Kind != store.KindDir {
			return nil
		}
		return e
	}
	b, o, t = dir(b), dir(o), dir(t)
	switch {
	case o != nil && (t == nil || t.ID == o.ID) && (b == nil || b.ID == o.ID):
		om.entries[name] = clone(o)
		return nil
	case t != nil && o == nil && (b == nil || b.ID == t.ID):
		om.entries[name] = clone(t)
		return nil
	case o == nil && t == nil:
		om.entries[name] = clone(b)
		return nil
	}
	bt, ot, tt, err := j.readDirs(rel, b, o, t)
	if err != nil {
		return err
	}
	out := &store.Tree{}
	eachName(bt, ot, tt, func(fname string, be, oe, te *store.Entry) {
		if err != nil {
			return
		}
		frel := rel + "/" + fname
		var e *store.Entry
		if name == "pack" && !contentNamed(fname) {
			e, err = j.merge3(frel, be, oe, te, oursPolicy)
		} else {
			e = oe
			switch {
			case e == nil && te != nil:
				e = te
			case e == nil:
				e = be
			case te != nil && te.ID != oe.ID:
				var eq bool
				if eq, err = j.sameObject(frel, oe, te, name != "pack"); err == nil && !eq {
					j.conflict(ConflictObject, frel, be, oe, te)
				}
			}
			e = clone(e)
		}
		if e != nil {
			e.Name = fname
			out.Entries = append(out.Entries, *e)
		}
	})
	if err != nil {
		return err
	}
	om.trees[name] = out
	om.dirty[name] = true
	e := clone(o)
	if e == nil {
		e = clone(t)
	}
	if t != nil {
		e.Mtime = max(e.Mtime, t.Mtime)
	}
	om.entries[name] = e
	return nil
}

// contentNamed reports whether a file in objects/pack is named by its
// content's hash (pack-<hash>.*, multi-pack-index-<hash>.*), so that the
// same name means the same file.
func contentNamed(name string) bool {
	return strings.HasPrefix(name, "pack-") || strings.HasPrefix(name, "multi-pack-index-")
}

// sameObject reports whether two files of the same object name hold the
// same object: the same bytes, or (loose objects) the same inflated
// content — zlib levels differ between git versions and libraries.
func (j *job) sameObject(rel string, o, t *store.Entry, loose bool) (bool, error) {
	if o.Kind != t.Kind || !o.Kind.IsRegular() {
		return false, nil
	}
	if !loose {
		return false, nil
	}
	inflate := func(e *store.Entry) ([]byte, error) {
		rc, err := j.m.Store.OpenBlob(e.ID)
		if err != nil {
			return nil, fmt.Errorf("gitmerge: read %s: %w", j.full(rel), err)
		}
		defer rc.Close()
		zr, err := zlib.NewReader(rc)
		if err != nil {
			return nil, nil // not an object: different
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			return nil, nil
		}
		return b, nil
	}
	ob, err := inflate(o)
	if err != nil || ob == nil {
		return false, err
	}
	tb, err := inflate(t)
	if err != nil || tb == nil {
		return false, err
	}
	return bytes.Equal(ob, tb), nil
}

// tree returns the merged tree of union dir name, loading it if the merge
// took a side's tree whole.
func (om *objectsMerge) tree(j *job, name string) (*store.Tree, error) {
	if t, ok := om.trees[name]; ok {
		return t, nil
	}
	e := om.entries[name]
	if e == nil || e.Kind != store.KindDir {
		return &store.Tree{}, nil
	}
	t, err := j.m.Store.GetTree(e.ID)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: read %s: %w", j.full("objects/"+name), err)
	}
	om.trees[name] = t
	return t, nil
}

// linkList lists the object files git needs: every loose object, and
// each pack with its index (and reverse index). Loose objects that some
// side's index names as a work-tree file are listed in later instead: the
// git commands of a merge read commits and trees, and blobs only where
// both sides changed a file (merge-tree), which then fails and is retried
// with them. Most loose objects of a freshly committed project are such
// blobs, so this spares most links.
func (om *objectsMerge) linkList(j *job) (objs, later []object, err error) {
	blobs := map[string]bool{}
	hashLen := 20
	if f, _ := j.objectFormat(); f == "sha256" {
		hashLen = 32
	}
	// Ours' and theirs' indexes: base's blobs are nearly all in them.
	for _, t := range []*store.Tree{j.ot, j.tt} {
		e, ok := t.Lookup("index")
		if !ok || !e.Kind.IsRegular() {
			continue
		}
		data, err := j.readFile(&e, "index")
		if err != nil {
			return nil, nil, err
		}
		indexBlobs(data, hashLen, blobs)
	}
	var oid [32]byte
	for name := range om.entries {
		if !isUnionDir(name) {
			continue
		}
		t, err := om.tree(j, name)
		if err != nil {
			return nil, nil, err
		}
		if name != "pack" {
			for _, e := range t.Entries {
				if !e.Kind.IsRegular() || !isHex(e.Name, len(e.Name)) {
					continue
				}
				o := object{name: name + "/" + e.Name, id: e.ID}
				n, _ := hex.Decode(oid[:], []byte(name+e.Name))
				if blobs[string(oid[:n])] {
					later = append(later, o)
				} else {
					objs = append(objs, o)
				}
			}
			continue
		}
		for _, e := range t.Entries {
			stem, ok := strings.CutSuffix(e.Name, ".pack")
			if !ok || !strings.HasPrefix(stem, "pack-") || !e.Kind.IsRegular() {
				continue
			}
			idx, ok := t.Lookup(stem + ".idx")
			if !ok || !idx.Kind.IsRegular() {
				continue
			}
			objs = append(objs, object{name: "pack/" + e.Name, id: e.ID}, object{name: "pack/" + idx.Name, id: idx.ID})
			if rev, ok := t.Lookup(stem + ".rev"); ok && rev.Kind.IsRegular() {
				objs = append(objs, object{name: "pack/" + rev.Name, id: rev.ID})
			}
		}
	}
	return objs, later, nil
}

// finish adds the loose objects git wrote to the merged object
// directories, writes the changed trees and returns objects/'s entry.
//
// New objects are stored loose, one blob each, not as a pack: a merge
// writes a handful (a commit, the trees it changed), a loose object is
// content addressed like the blob holding it, so the same merge done on
// two forks stores the same blobs, and the union rule above merges them
// with no pack bookkeeping. git gc packs them later as it would anyway.
func (om *objectsMerge) finish(j *job) (*store.Entry, error) {
	if j.repo != nil {
		added, err := j.repo.newObjects()
		if err != nil {
			return nil, err
		}
		for dir, names := range added {
			t, err := om.tree(j, dir)
			if err != nil {
				return nil, err
			}
			nt := &store.Tree{Entries: append([]store.Entry(nil), t.Entries...)}
			grew := false
			for _, n := range names {
				if _, ok := t.Lookup(n); ok {
					continue
				}
				e, err := j.storeFile(filepath.Join(j.repo.gitDir, "objects", dir, n))
				if err != nil {
					return nil, err
				}
				e.Name = n
				nt.Entries = append(nt.Entries, *e)
				grew = true
			}
			if grew {
				nt.Sort()
				om.trees[dir] = nt
				om.dirty[dir] = true
				if om.entries[dir] == nil {
					om.entries[dir] = &store.Entry{Kind: store.KindDir, Mtime: j.stamp}
				}
			}
		}
	}
	out := &store.Tree{}
	for name, e := range om.entries {
		if e == nil {
			continue
		}
		c := *e
		c.Name = name
		if om.dirty[name] {
			id, err := j.putTree(om.trees[name], "objects/"+name)
			if err != nil {
				return nil, err
			}
			c.ID = id
		}
		out.Entries = append(out.Entries, c)
	}
	sort.Slice(out.Entries, func(a, b int) bool { return out.Entries[a].Name < out.Entries[b].Name })
	return j.dirEntry("objects", out, om.ours, nil)
}

// readFile reads a blob the merge only looks at (an index), from the
// store's file where it has one: cheaper than a verified read, and the
// file is what git would read too.
func (j *job) readFile(e *store.Entry, rel string) ([]byte, error) {
	if bp, ok := j.m.Store.(BlobPather); ok {
		if b, err := os.ReadFile(bp.BlobPath(e.ID)); err == nil {
			return b, nil
		}
	}
	return j.readBlob(e, rel)
}

// storeFile writes the file at p into the store.
func (j *job) storeFile(p string) (*store.Entry, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: read new object: %w", err)
	}
	defer f.Close()
	id, n, err := j.m.Store.WriteBlob(f)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: store new object %s: %w", filepath.Base(p), err)
	}
	return &store.Entry{Kind: store.KindFile, Size: n, Mtime: j.stamp, ID: id}, nil
}
