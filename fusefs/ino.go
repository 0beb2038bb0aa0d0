package fusefs

import (
	"slices"

	"github.com/acyclicfs/acyclicfs/internal/pathino"
)

// Stable inode numbers (docs/design.md "Inode numbers").
//
// git's index records each file's inode number (with its mtime, ctime,
// size, mode, uid and gid) and re-reads every file whose stat differs. So
// the number a mount reports for an unchanged file must not depend on the
// order the kernel looked names up in: it is a hash of the file's path
// from the mount's root, the same in every mount of every workspace that
// holds a file at that path. An inode takes the number of the path it has
// when it is first named in the mount and keeps it (a rename does not
// renumber a live file); the next mount numbers it by its new path.
//
// Numbers are 64-bit, in [2^61, 2^62): apart from the root (1), from the
// overlay's own numbers (ownInoBit, 2^62 and up) and from an in-place
// directory's real ones, which are smaller. A hash that another live
// inode of the mount already reports (a path re-created while its old
// inode lives on, or, with probability ~n²/2^62, two paths) falls back to
// the overlay's own number, so numbers are unique within a mount at all
// times. 32-bit programs built without large-file support get EOVERFLOW
// from stat, as on file systems with large inode numbers (XFS, btrfs).

const (
	stableInoBit = pathino.StableBit
	rootPathHash = pathino.RootHash
)

// childPathHash is the path hash of name in a directory whose path hash is
// parent (package pathino).
func childPathHash(parent uint64, name string) uint64 { return pathino.Child(parent, name) }

// nameInode records that c is now d/name: its path hash follows the name
// (so that children named later hash under the new path), and a c without
// a number yet takes d/name's. Caller holds mu.
func (o *overlay) nameInode(d *inode, name string, c *inode) {
	c.pathHash = childPathHash(d.pathHash, name)
	if c.ino != 0 {
		return
	}
	want := pathino.Number(c.pathHash)
	if owner, taken := o.inos[want]; taken && owner != c.num {
		c.ino = c.num | ownInoBit
		return
	}
	o.inos[want] = c.num
	c.ino = want
}

// numberTree names every inode below d (a restored snapshot), in name
// order so that a collision falls the same way each time. Caller holds mu.
func (o *overlay) numberTree(d *inode) {
	names := make([]string, 0, len(d.children))
	for n := range d.children {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		c := d.children[n]
		o.nameInode(d, n, c)
		if c.isDir() && c.children != nil {
			o.numberTree(c)
		}
	}
}

// inosSweepSlack is how many entries the inode-number table may gain
// over twice its size at the last sweep before it is swept again.
const inosSweepSlack = 1024

// sweepInos forgets the numbers of inodes that are gone: the table keeps
// an entry for every number handed out, and without a sweep it grew by
// one per file ever created in the mount (a mount that untars and removes
// a tree every round kept every round's numbers). It runs when no file
// handle is open, so that every live inode has a name under the root
// (an unlinked file lives on only while open; a kernel that still caches
// a dead inode's node is told a new file's number, as a disk file system
// reuses inode numbers), and only once the table has doubled since the
// last sweep, so that its walk costs O(1) per number handed out. Caller
// holds mu.
func (o *overlay) sweepInos() {
	if o.openHandles != 0 || len(o.inos) < 2*o.inosSwept+inosSweepSlack {
		return
	}
	live := make(map[uint64]uint64, o.inosSwept+inosSweepSlack/2)
	var walk func(d *inode)
	walk = func(d *inode) {
		for _, c := range d.children {
			if owner, ok := o.inos[c.ino]; ok && owner == c.num {
				live[c.ino] = c.num
			}
			if c.isDir() && c.children != nil {
				walk(c)
			}
		}
	}
	walk(o.root)
	o.inos = live
	o.inosSwept = len(live)
}
