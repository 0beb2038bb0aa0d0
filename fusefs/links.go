package fusefs

import (
	"strings"

	"github.com/acyclicfs/acyclicfs/store"
)

// Hard links across captures. A tree has no link identity; a generation
// lists its link groups (store.Generation.Links), the paths of each file
// with several names. The overlay shows a group of its pinned generation
// as one inode (applyLinks: the directories holding the paths are loaded
// when the generation is pinned, so the inode has all its names before
// any lookup), and a capture lists the inodes with several names
// (linkGroups). Inodes that got a second name are tracked in
// overlay.multi, so a capture finds them without walking the table.

// noteMulti records that c may have several names. Caller holds mu.
func (o *overlay) noteMulti(c *inode) {
	if o.multi == nil {
		o.multi = map[*inode]struct{}{}
	}
	o.multi[c] = struct{}{}
}

// markLinksBelow records the directories of every name of each inode with
// several names that has one below d (a directory just renamed), so that a
// replay finds those names under d's new path naming the inode. Caller
// holds mu.
func (o *overlay) markLinksBelow(d *inode) {
	for c := range o.multi {
		for _, l := range c.links {
			if isAncestor(d, l.dir) {
				o.propagate(c, o.seq)
				break
			}
		}
	}
}

// dirNames returns d's path below the root as names (none for the
// root); false when d is no longer in the tree. Caller holds mu.
func (o *overlay) dirNames(d *inode) ([]string, bool) {
	p, ok := o.dirPath(d)
	if !ok || p == "" {
		return nil, ok
	}
	return strings.Split(p, "/"), true
}

// linkGroups returns the link groups of the table: the paths of every
// file (any kind but a directory) with more than one name, canonical
// (store.NormalizeLinks). Caller holds mu.
func (o *overlay) linkGroups() [][]string {
	var groups [][]string
	for c := range o.multi {
		if len(c.links) < 2 {
			delete(o.multi, c)
			continue
		}
		groups = append(groups, o.pathsOf(c))
	}
	return store.NormalizeLinks(groups)
}

// resolve returns the directory and inode at path p, loading directories
// on the way (under the lock: only while a generation is pinned). nil
// when p is absent.
func (o *overlay) resolve(p string) (*inode, string, *inode, error) {
	d := o.root
	names := strings.Split(p, "/")
	for i, name := range names {
		if !d.isDir() {
			return nil, "", nil, nil
		}
		if d.children == nil {
			t, err := o.getTree(d.lower.ID)
			if err != nil {
				return nil, "", nil, err
			}
			o.install(d, t)
		}
		c := d.children[name]
		if c == nil {
			return nil, "", nil, nil
		}
		if i == len(names)-1 {
			return d, name, c, nil
		}
		d = c
	}
	return nil, "", nil, nil
}

// fromLower reports whether c is a non-directory the pinned tree gave the
// name it has and that nothing changed: such inodes of one link group are
// merged.
func (c *inode) fromLower() bool {
	return !c.isDir() && c.hasLower && c.linkSeq == 0 && c.seq == 0 && !c.upper && c.target == nil && c.opens == 0 && len(c.links) == 1
}

// applyLinks makes each group of the pinned generation one inode: the
// files at a group's paths that still show the pinned tree's entry are
// merged into one inode (a changed one, if there is one, keeps its
// state). Names given since the last capture are left alone. A note is
// queued for each name that now shows another inode. Caller holds mu.
func (o *overlay) applyLinks(groups [][]string, notes *[]note) error {
	o.lowerLinks = groups
	for _, g := range groups {
		type name struct {
			d    *inode
			name string
			c    *inode
		}
		var names []name
		var target *inode
		for _, p := range g {
			d, n, c, err := o.resolve(p)
			if err != nil {
				return err
			}
			if c == nil || c.isDir() || !c.hasLower || c.linkSeq != 0 {
				continue
			}
			names = append(names, name{d, n, c})
			if target == nil || target.fromLower() && !c.fromLower() && c.linkSeq == 0 {
				target = c
			}
		}
		if target == nil {
			continue
		}
		merged := false
		for _, n := range names {
			c := n.c
			if c == target || !c.fromLower() || c.lower.ID != target.lower.ID || c.kind() != target.kind() || c.rdev != target.rdev {
				continue
			}
			if !merged && notes != nil {
				// The kernel may hold the target's attributes (its link
				// count) under one of its old names.
				merged = true
				if dp, ok := o.dirNames(target.links[0].dir); ok {
					addNote(notes, dp, target.links[0].name, true)
				}
			}
			detachName(n.d, n.name, c)
			n.d.children[n.name] = target
			target.links = append(target.links, link{dir: n.d, name: n.name})
			o.noteMulti(target)
			if notes != nil {
				if dp, ok := o.dirNames(n.d); ok {
					addNote(notes, dp, n.name, false)
				}
			}
		}
	}
	return nil
}
