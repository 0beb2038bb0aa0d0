package fusefs

import (
	"errors"
	"os"
	"syscall"
)

// Scratch is what a mount keeps in its state directory: upper files (the
// contents written through the mount) and retired upper files that the
// durable snapshot may still name (upper-trash).

// CaptureProgress reports whether a capture is storing contents now, and
// the files and bytes the latest capture hashed and stored so far.
func (m *Mount) CaptureProgress() (running bool, files, bytes int64) {
	return m.ov.capturing.Load() > 0, m.ov.captureFiles.Load(), m.ov.captureBytes.Load()
}

// PendingBytes bounds what a capture may have to write to the store: the
// bytes of the mount's upper files that no stored capture holds as they
// are now (a file an earlier capture stored and that has not changed
// since is not counted again; one whose capture failed is).
func (m *Mount) PendingBytes() int64 { return m.ov.pendingBytes() }

// pendingBytes is PendingBytes.
func (o *overlay) pendingBytes() int64 {
	type upperFile struct {
		memo     upperStat
		captured bool
	}
	files := map[uint64]upperFile{} // by upper file: hard links once
	o.mu.Lock()
	var walk func(d *inode)
	walk = func(d *inode) {
		for _, c := range d.children {
			switch {
			case c.isDir():
				if c.children != nil {
					walk(c)
				}
			case c.upper:
				// A racily clean file is hashed in place, not copied,
				// when its content is the one stored (storeFile).
				files[c.num] = upperFile{c.capStat, !c.capID.IsZero()}
			}
		}
	}
	if o.root != nil {
		walk(o.root)
	}
	o.mu.Unlock()
	var n int64
	for num, f := range files {
		var st syscall.Stat_t
		if syscall.Stat(o.upperPath(num), &st) != nil {
			continue
		}
		if f.captured && statOf(&st) == f.memo {
			continue
		}
		n += st.Size
	}
	return n
}

// PendingBytesOf is PendingBytes of the (unmounted) overlay in stateDir:
// what recovering it may have to write.
func PendingBytesOf(stateDir string) int64 {
	return dirBytes((&overlay{stateDir: stateDir}).upperDir(), false)
}

// FreeScratch gives back the space of retired upper files: it makes the
// overlay durable without them (a snapshot write), after which they are
// deleted. It returns the bytes freed.
func (m *Mount) FreeScratch() (int64, error) {
	before := dirBytes(m.ov.trashDir(), true)
	m.ov.mu.Lock()
	if len(m.ov.trash) > 0 {
		m.ov.unsnapped = true
	}
	m.ov.mu.Unlock()
	err := m.writeSnapshot()
	return max(before-dirBytes(m.ov.trashDir(), true), 0), err
}

// dirBytes sums the sizes of the regular files directly in dir (what
// cannot be read counts 0): the space they take when allocated, else
// their length.
func dirBytes(dir string, allocated bool) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && allocated {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
	}
	return n
}

// isNoSpace reports a write that failed for want of space (or quota).
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
