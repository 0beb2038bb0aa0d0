package daemon

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// git's untracked cache (the index's UNTR extension) is keyed by the work
// tree's path: its ident is "Location <work tree>, system <uname -s>", and
// git drops the whole cache when the ident differs from its own, then
// reads every directory of the tree again. A workspace's index carries
// the ident of the mountpoint where git last wrote it, so the first git
// status in a fork, or after a mount at another place, paid a full scan
// (3.5–4× native on the Go tree) although the cache is as good there:
// the directories' stat data are the store's (inode numbers are path
// hashes) and what changed since is answered by the fsmonitor token in
// the same index, as after a remount at the same place.
//
// So a mount that sets up the hook also moves the cache to its mountpoint:
// the index is rewritten with the new ident (nothing else changes but the
// extension's length, an end-of-index-entries extension's hash and the
// trailing checksum), under git's own index.lock, through the mount. The
// rewrite is captured like any write of git's to its index.

// ErrIndexFormat is returned for an index this code does not rewrite: not
// one git wrote (bad header or checksum), a split index, another hash.
var ErrIndexFormat = errors.New("git index not rewritable")

// untrackedIdent is git's ident of a work tree at dir (dir.c
// get_ident_string).
func untrackedIdent(dir string) (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return "Location " + dir + ", system " + unix.ByteSliceToString(u.Sysname[:]), nil
}

// retargetUntrackedCache rewrites root/.git/index so that its untracked
// cache names root. An index without the cache, or already naming root,
// or locked by a running git, is left alone.
func retargetUntrackedCache(root string) error {
	// git names its work tree by the path getcwd reports: symlinks resolved.
	dir, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("untracked cache: %w", err)
	}
	ident, err := untrackedIdent(dir)
	if err != nil {
		return fmt.Errorf("untracked cache: %w", err)
	}
	path := filepath.Join(root, ".git", "index")
	old, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("untracked cache: read %s: %w", path, err)
	}
	next, changed, err := withUntrackedIdent(old, ident)
	if err != nil {
		return fmt.Errorf("untracked cache: %s: %w", path, err)
	}
	if !changed {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("untracked cache: %w", err)
	}
	// git's lock: a git already running in the mount keeps its own index.
	lock := path + ".lock"
	f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
	if errors.Is(err, fs.ErrExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("untracked cache: %w", err)
	}
	if _, err := f.Write(next); err != nil {
		f.Close()
		os.Remove(lock)
		return fmt.Errorf("untracked cache: write %s: %w", lock, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(lock)
		return fmt.Errorf("untracked cache: write %s: %w", lock, err)
	}
	if err := os.Rename(lock, path); err != nil {
		os.Remove(lock)
		return fmt.Errorf("untracked cache: %w", err)
	}
	return nil
}

// indexExt is one extension of a git index: its signature and data.
type indexExt struct {
	sig  string
	data []byte
}

// indexExtensions parses index down to its extensions: the body (without
// the trailing hash), where the entries end, the extensions in order and
// the position of UNTR among them (-1 if absent). With verify the
// trailing SHA-1 is checked too. A split index is refused: its cache may
// live in the shared one.
func indexExtensions(index []byte, verify bool) (body []byte, end int, exts []indexExt, untr int, err error) {
	const hashLen = sha1.Size
	if len(index) < 12+hashLen || string(index[:4]) != "DIRC" {
		return nil, 0, nil, -1, fmt.Errorf("%w: no index header", ErrIndexFormat)
	}
	body = index[:len(index)-hashLen]
	if verify {
		if sum := sha1.Sum(body); !bytes.Equal(sum[:], index[len(body):]) {
			return nil, 0, nil, -1, fmt.Errorf("%w: checksum (or not SHA-1)", ErrIndexFormat)
		}
	}
	version := binary.BigEndian.Uint32(index[4:8])
	count := binary.BigEndian.Uint32(index[8:12])
	if end, err = indexEntriesEnd(body, version, count); err != nil {
		return nil, 0, nil, -1, err
	}
	untr = -1
	for off := end; off < len(body); {
		if len(body)-off < 8 {
			return nil, 0, nil, -1, fmt.Errorf("%w: extension header at %d", ErrIndexFormat, off)
		}
		sig := string(body[off : off+4])
		n := int64(binary.BigEndian.Uint32(body[off+4 : off+8]))
		if n > int64(len(body)-off-8) {
			return nil, 0, nil, -1, fmt.Errorf("%w: extension %q size %d", ErrIndexFormat, sig, n)
		}
		switch sig {
		case "link":
			return nil, 0, nil, -1, fmt.Errorf("%w: split index", ErrIndexFormat)
		case "UNTR":
			if untr >= 0 {
				return nil, 0, nil, -1, fmt.Errorf("%w: two UNTR extensions", ErrIndexFormat)
			}
			untr = len(exts)
		}
		exts = append(exts, indexExt{sig, body[off+8 : off+8+int(n)]})
		off += 8 + int(n)
	}
	return body, end, exts, untr, nil
}

// hasUntrackedCache reports whether index carries an untracked cache that
// withUntrackedIdent could retarget. It reads only the headers (no
// checksum, no copy): it decides a warm-up, not a write.
func hasUntrackedCache(index []byte) bool {
	_, _, _, untr, err := indexExtensions(index, false)
	return err == nil && untr >= 0
}

// withUntrackedIdent returns index with its UNTR extension's ident set to
// ident, and whether that changed it. An index without UNTR is returned
// unchanged.
func withUntrackedIdent(index []byte, ident string) ([]byte, bool, error) {
	const hashLen = sha1.Size
	body, end, exts, untr, err := indexExtensions(index, true)
	if err != nil {
		return nil, false, err
	}
	if untr < 0 {
		return index, false, nil
	}
	data := exts[untr].data
	identLen, n := decodeGitVarint(data)
	if n == 0 || identLen > uint64(len(data)-n) {
		return nil, false, fmt.Errorf("%w: UNTR ident", ErrIndexFormat)
	}
	oldIdent := data[n : n+int(identLen)]
	// A NUL-separated list of which git compares only the first.
	first, _, _ := bytes.Cut(oldIdent, []byte{0})
	if string(first) == ident {
		return index, false, nil
	}
	newIdent := append([]byte(ident), 0)
	var nd []byte
	nd = appendGitVarint(nd, uint64(len(newIdent)))
	nd = append(nd, newIdent...)
	nd = append(nd, data[n+int(identLen):]...)
	if uint64(len(nd)) > 0xffffffff {
		return nil, false, fmt.Errorf("%w: UNTR too large", ErrIndexFormat)
	}
	exts[untr].data = nd

	out := make([]byte, 0, len(index)+len(nd)-len(data))
	out = append(out, body[:end]...)
	for _, e := range exts {
		if e.sig == "EOIE" {
			// End of index entries: the offset of the first extension
			// (unchanged) and a hash of the other extensions' headers.
			if len(e.data) != 4+hashLen {
				return nil, false, fmt.Errorf("%w: EOIE size", ErrIndexFormat)
			}
			h := sha1.New()
			for _, o := range exts {
				if o.sig == "EOIE" {
					continue
				}
				h.Write([]byte(o.sig))
				h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(o.data))))
			}
			e.data = h.Sum(append([]byte(nil), e.data[:4]...))
		}
		out = append(out, e.sig...)
		out = binary.BigEndian.AppendUint32(out, uint32(len(e.data)))
		out = append(out, e.data...)
	}
	sum := sha1.Sum(out)
	return append(out, sum[:]...), true, nil
}

// indexEntriesEnd returns the offset where index's count entries end (the
// first extension), for index versions 2 to 4.
func indexEntriesEnd(body []byte, version, count uint32) (int, error) {
	const fixed = 62 // stat data, mode, ids, size, object name, flags
	off := 12
	for i := uint32(0); i < count; i++ {
		if len(body)-off < fixed {
			return 0, fmt.Errorf("%w: entry %d truncated", ErrIndexFormat, i)
		}
		flags := binary.BigEndian.Uint16(body[off+60 : off+62])
		start := off
		off += fixed
		if flags&0x4000 != 0 { // extended flags
			if version < 3 {
				return 0, fmt.Errorf("%w: extended flags in version %d", ErrIndexFormat, version)
			}
			off += 2
		}
		switch version {
		case 2, 3:
			nul := bytes.IndexByte(body[min(off, len(body)):], 0)
			if nul < 0 {
				return 0, fmt.Errorf("%w: entry %d path", ErrIndexFormat, i)
			}
			// Padded with 1 to 8 NULs to a multiple of 8 bytes.
			off = start + (off-start+nul+8)&^7
		case 4:
			if off > len(body) {
				return 0, fmt.Errorf("%w: entry %d truncated", ErrIndexFormat, i)
			}
			_, n := decodeGitVarint(body[off:])
			if n == 0 {
				return 0, fmt.Errorf("%w: entry %d path prefix", ErrIndexFormat, i)
			}
			off += n
			nul := bytes.IndexByte(body[min(off, len(body)):], 0)
			if nul < 0 {
				return 0, fmt.Errorf("%w: entry %d path", ErrIndexFormat, i)
			}
			off += nul + 1
		default:
			return 0, fmt.Errorf("%w: version %d", ErrIndexFormat, version)
		}
		if off > len(body) {
			return 0, fmt.Errorf("%w: entry %d truncated", ErrIndexFormat, i)
		}
	}
	return off, nil
}

// decodeGitVarint decodes git's offset varint (varint.c), returning the
// value and the bytes it took, or n == 0 when b holds none (truncated or
// overflowing).
func decodeGitVarint(b []byte) (v uint64, n int) {
	if len(b) == 0 {
		return 0, 0
	}
	c := b[0]
	v = uint64(c & 127)
	n = 1
	for c&128 != 0 {
		v++
		if v == 0 || v>>57 != 0 {
			return 0, 0
		}
		if n >= len(b) {
			return 0, 0
		}
		c = b[n]
		n++
		v = v<<7 + uint64(c&127)
	}
	return v, n
}

// appendGitVarint appends v in git's offset varint encoding.
func appendGitVarint(b []byte, v uint64) []byte {
	var buf [16]byte
	pos := len(buf) - 1
	buf[pos] = byte(v & 127)
	for v >>= 7; v != 0; v >>= 7 {
		v--
		pos--
		buf[pos] = 128 | byte(v&127)
	}
	return append(b, buf[pos:]...)
}
