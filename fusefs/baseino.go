package fusefs

import (
	"sync"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/acyclicfs/acyclicfs/store"
)

// BaseInoer is implemented by Objects that know the real inode number and
// ctime of a base reference (an in-place directory's file,
// docs/inplace.md).
type BaseInoer interface {
	// BaseIno returns the inode number and ctime (ns) of the file base
	// reference id fingerprints; ok is false for anything else.
	BaseIno(id store.ID) (ino uint64, ctime int64, ok bool)
}

// baseStat is a cached BaseIno answer; ino 0 means "not a reference".
type baseStat struct {
	ino   uint64
	ctime int64
}

// ownInoBit marks the overlay's own inode numbers when Config.BaseInodes
// is set, keeping them apart from the directory's real ones (which no
// filesystem acyclicfs runs on hands out that high).
const ownInoBit = 1 << 62

// baseInos caches BaseIno answers per lower ID (0: not a reference).
type baseInos struct{ m sync.Map }

// reportedIno is the st_ino of overlay inode num, whose own number (ino.go:
// the hash of its first path) is ino and whose pinned-view object is
// lowerID. With Config.BaseInodes a file or directory still named by a base
// reference reports the in-place directory's own inode number instead — so
// a git index written outside the mount matches inside it. The root is 1;
// an inode not named yet (an unlinked O_TMPFILE) reports num with
// ownInoBit.
func (m *Mount) reportedIno(ino, num uint64, lowerID store.ID) uint64 {
	if num == 1 {
		return 1
	}
	if m.cfg.BaseInodes {
		if b := m.baseStat(lowerID); b.ino != 0 {
			return b.ino
		}
	}
	if ino == 0 {
		return num | ownInoBit
	}
	return ino
}

// baseStat looks lowerID up as a base reference (cached per ID; IDs are
// immutable).
func (m *Mount) baseStat(lowerID store.ID) baseStat {
	if !m.cfg.BaseInodes || lowerID.IsZero() {
		return baseStat{}
	}
	if v, ok := m.baseInos.m.Load(lowerID); ok {
		return v.(baseStat)
	}
	var b baseStat
	if bi, ok := m.cfg.Objects.(BaseInoer); ok {
		if ino, ctime, ok := bi.BaseIno(lowerID); ok && ino != 0 && ino != 1 && ino < stableInoBit {
			b = baseStat{ino: ino, ctime: ctime}
		}
	}
	m.baseInos.m.Store(lowerID, b)
	return b
}

// stableAttr is go-fuse's identity for overlay inode a: the reported
// number, which may repeat (an in-place directory's hard links are
// separate overlay inodes; a renamed inode keeps its number while a new
// one may take the path's), and the overlay's own number in Gen, which
// go-fuse includes in the identity.
func (m *Mount) stableAttr(a *attrSnapshot) fs.StableAttr {
	return fs.StableAttr{Mode: a.mode & uint32(0o170000), Ino: m.reportedIno(a.ino, a.num, a.lowerID), Gen: a.num}
}

// sameNode reports whether go-fuse node identity st belongs to overlay
// inode num.
func (m *Mount) sameNode(st fs.StableAttr, num uint64) bool { return st.Gen == num }

// lowerIDOrZero is the pinned view's object for in, zero for a new inode.
func (in *inode) lowerIDOrZero() store.ID {
	if !in.hasLower {
		return store.ID{}
	}
	return in.lower.ID
}
