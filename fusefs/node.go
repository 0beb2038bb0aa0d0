package fusefs

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/store"
)

// node is the go-fuse face of an overlay inode. go-fuse deduplicates
// nodes by inode number, so hard links share one node.
type node struct {
	fs.Inode
	m  *Mount
	in *inode // never changes
}

// admit consults the Admitter for the caller of the request in ctx.
func (m *Mount) admit(ctx context.Context) syscall.Errno {
	a := m.cfg.Admitter
	if a == nil {
		return 0
	}
	c, ok := fuse.FromContext(ctx)
	if ok && failpoint.Armed(selfRequestPoint) && ownThread(c.Pid) {
		// The daemon dies serving a request of one of its own threads,
		// which then waits for the answer forever (issue #38).
		failpoint.Hit(selfRequestPoint)
	}
	if !ok || c.Pid == 0 || m.isWarmer(c.Pid) {
		return 0
	}
	if err := a.Admit(c.Pid); err != nil {
		return toErrno(err)
	}
	return 0
}

// selfRequestPoint is the failpoint at a request of the server's own
// process on its mount: a crash test's kill -9 at the moment a daemon
// thread waits on its own mount.
const selfRequestPoint = "fuse.self-request"

// ownThread reports whether thread tid belongs to this process.
func ownThread(tid uint32) bool {
	_, err := os.Stat("/proc/self/task/" + strconv.FormatUint(uint64(tid), 10))
	return tid != 0 && err == nil
}

func callerOwner(ctx context.Context, ov *overlay) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return ov.uid, ov.gid
}

// attrSnapshot is what fillAttr needs, copied under the lock so the stat
// of an upper file happens outside it.
type attrSnapshot struct {
	num, ino              uint64
	lowerID               store.ID // the pinned view's object here (zero if new)
	mode, uid, gid, nlink uint32
	rdev                  uint32
	size                  int64
	atime, mtime, ctime   int64
	upper                 bool
	clean                 bool
	// upperFile is the inode's open upper file, if any: fill stats it
	// instead of looking its path up (tar's futimens, fchown and fchmod
	// each get a reply filled while the file is open).
	upperFile *os.File
}

// snapAttr copies in's attributes. Caller holds mu.
func snapAttr(in *inode) attrSnapshot {
	a := attrSnapshot{num: in.num, ino: in.ino, lowerID: in.lowerIDOrZero(), mode: in.mode, uid: in.uid, gid: in.gid, nlink: in.nlink(),
		rdev: in.rdev, atime: in.atime, mtime: in.mtime, ctime: in.ctime, upper: in.upper, upperFile: in.upperFile}
	switch {
	case in.isDir():
		a.size = 4096
		a.clean = in.seq == 0
	case in.isSymlink():
		if in.target != nil {
			a.size = int64(len(in.target))
		} else {
			a.size = in.lower.Size
		}
		a.clean = in.seq == 0
	case in.isSpecial():
		a.clean = in.seq == 0 // size 0: the entry's Size is the device number
	default:
		a.size = in.lower.Size
		a.clean = in.clean()
	}
	return a
}

// fill writes a into out, taking size and times of an upper file from the
// file itself: passthrough writes never reach the daemon.
func (m *Mount) fill(a *attrSnapshot, out *fuse.Attr) {
	out.Ino = m.reportedIno(a.ino, a.num, a.lowerID)
	out.Mode = a.mode
	out.Nlink = a.nlink
	out.Rdev = a.rdev
	out.Owner = fuse.Owner{Uid: a.uid, Gid: a.gid}
	out.Size = uint64(a.size)
	ctime := a.ctime
	if a.clean && !a.upper {
		// An unchanged file of an in-place directory shows its real
		// ctime, as git's index recorded it.
		if b := m.baseStat(a.lowerID); b.ino != 0 {
			ctime = b.ctime
		}
	}
	setTimes(out, a.atime, a.mtime, ctime)
	if a.upper {
		var st syscall.Stat_t
		if statUpper(a, m.ov, &st) == nil {
			out.Size = uint64(st.Size)
			out.Blocks = uint64(st.Blocks)
			setTimes(out, st.Atim.Nano(), st.Mtim.Nano(), max(st.Ctim.Nano(), a.ctime))
		}
	} else {
		out.Blocks = (out.Size + 511) / 512
	}
	out.Blksize = 4096
}

// statUpper stats a's upper file: through its open file when there is
// one (closed since, it fails and the path is looked up as without).
func statUpper(a *attrSnapshot, ov *overlay, st *syscall.Stat_t) error {
	if f := a.upperFile; f != nil {
		if fi, err := f.Stat(); err == nil {
			if s, ok := fi.Sys().(*syscall.Stat_t); ok {
				*st = *s
				return nil
			}
		}
	}
	return syscall.Stat(ov.upperPath(a.num), st)
}

func setTimes(out *fuse.Attr, at, mt, ct int64) {
	out.Atime, out.Atimensec = uint64(at/1e9), uint32(at%1e9)
	out.Mtime, out.Mtimensec = uint64(mt/1e9), uint32(mt%1e9)
	out.Ctime, out.Ctimensec = uint64(ct/1e9), uint32(ct%1e9)
}

func (m *Mount) timeout(a *attrSnapshot) time.Duration {
	if a.clean {
		return m.clean
	}
	return m.dirty
}

// child fills an EntryOut for a and returns the go-fuse inode for in,
// which is (or becomes) n/name; name is empty for an unnamed O_TMPFILE.
func (n *node) child(ctx context.Context, name string, in *inode, a *attrSnapshot, out *fuse.EntryOut) *fs.Inode {
	m := n.m
	m.fill(a, &out.Attr)
	t := m.timeout(a)
	out.SetEntryTimeout(t)
	out.SetAttrTimeout(t)
	if name != "" {
		// Known to go-fuse already: skip allocating a node it would discard.
		if ch := n.GetChild(name); ch != nil && m.sameNode(ch.StableAttr(), in.num) {
			return ch
		}
	}
	return n.NewInode(ctx, &node{m: m, in: in}, m.stableAttr(a))
}
