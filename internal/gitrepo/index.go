package gitrepo

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
)

// IndexEntry is one file of an index: what git records of it (the stat
// data it compares with lstat, the object name, the path).
type IndexEntry struct {
	Path         string
	Mode         uint32 // ModeFile, ModeExec, ModeSymlink or ModeGitlink
	OID          string // hex object name
	Size         uint32 // size, truncated to 32 bits as git does
	Ino          uint32
	UID, GID     uint32
	Mtime, Ctime int64 // nanoseconds since the epoch
}

// ErrBadIndexEntry is returned by EncodeIndex for an entry git could not
// read back.
var ErrBadIndexEntry = errors.New("bad index entry")

// IndexExtensions are the optional parts of an index EncodeIndex writes.
type IndexExtensions struct {
	// FSMonitorToken, when not empty, adds the fsmonitor extension
	// (version 2) with that token and every entry valid: git then asks
	// the fsmonitor hook what changed since the token instead of
	// lstat()ing every file.
	FSMonitorToken string
	// Trees, when it names the root (""), adds the cache-tree extension
	// (TREE): the tree object of every directory holding entries, by
	// slash-separated path. git then knows that the index matches these
	// trees and reads none of them to compare the index with HEAD (git
	// status, diff --cached) or to write a commit's tree. They must be
	// exactly the trees the entries make (a commit's tree and its whole
	// listing); a map that misses a directory of the entries, or names
	// one that holds none, adds no extension.
	Trees map[string]string
}

// EncodeIndex returns a version 2 index file of entries (sorted by path
// here, as git requires) with the extensions ext asks for.
func EncodeIndex(entries []IndexEntry, ext IndexExtensions) ([]byte, error) {
	fsmonitorToken := ext.FSMonitorToken
	es := append([]IndexEntry(nil), entries...)
	sort.Slice(es, func(i, j int) bool { return es[i].Path < es[j].Path })
	var b bytes.Buffer
	b.WriteString("DIRC")
	put32(&b, 2)
	put32(&b, uint32(len(es)))
	for i, e := range es {
		if e.Path == "" || bytes.IndexByte([]byte(e.Path), 0) >= 0 || (i > 0 && es[i-1].Path == e.Path) {
			return nil, fmt.Errorf("%w: path %q", ErrBadIndexEntry, e.Path)
		}
		oid, err := hex.DecodeString(e.OID)
		if err != nil || len(oid) != sha1.Size {
			return nil, fmt.Errorf("%w: %s: object name %q", ErrBadIndexEntry, e.Path, e.OID)
		}
		switch e.Mode {
		case ModeFile, ModeExec, ModeSymlink, ModeGitlink:
		default:
			return nil, fmt.Errorf("%w: %s: mode %o", ErrBadIndexEntry, e.Path, e.Mode)
		}
		start := b.Len()
		put32(&b, uint32(e.Ctime/1e9))
		put32(&b, uint32(e.Ctime%1e9))
		put32(&b, uint32(e.Mtime/1e9))
		put32(&b, uint32(e.Mtime%1e9))
		put32(&b, 0) // dev: git does not compare it (USE_STDEV is off)
		put32(&b, e.Ino)
		put32(&b, e.Mode)
		put32(&b, e.UID)
		put32(&b, e.GID)
		put32(&b, e.Size)
		b.Write(oid)
		flags := min(len(e.Path), 0xfff)
		binary.Write(&b, binary.BigEndian, uint16(flags))
		b.WriteString(e.Path)
		// 1 to 8 NULs, to a multiple of 8 bytes.
		n := b.Len() - start
		b.Write(make([]byte, 8-n%8))
	}
	if tree, err := cacheTree(es, ext.Trees); err != nil {
		return nil, err
	} else if tree != nil {
		b.WriteString("TREE")
		put32(&b, uint32(len(tree)))
		b.Write(tree)
	}
	if fsmonitorToken != "" {
		var ext bytes.Buffer
		put32(&ext, 2)
		ext.WriteString(fsmonitorToken)
		ext.WriteByte(0)
		// The EWAH bitmap of entries that are not fsmonitor-valid: none.
		// This is git's own encoding of an empty bitmap: bit size 0, one
		// run-length word of zero, the run-length word at position 0.
		put32(&ext, 4+4+8+4)
		put32(&ext, 0)
		put32(&ext, 1)
		ext.Write(make([]byte, 8))
		put32(&ext, 0)
		b.WriteString("FSMN")
		put32(&b, uint32(ext.Len()))
		b.Write(ext.Bytes())
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes(), nil
}

// cacheTree encodes the TREE extension of sorted entries from trees (nil
// when trees cannot describe them: see IndexExtensions.Trees). Each
// directory, depth first from the root, is its name, NUL, the number of
// entries below it, a space, the number of subdirectories, a newline and
// the tree's object name; subdirectories in git's order (shorter names
// first, then bytewise), so that the bytes are those git writes.
func cacheTree(es []IndexEntry, trees map[string]string) ([]byte, error) {
	if _, ok := trees[""]; !ok {
		return nil, nil
	}
	count := make(map[string]int, len(trees))
	for _, e := range es {
		count[""]++
		for i := 0; i < len(e.Path); i++ {
			if e.Path[i] == '/' {
				count[e.Path[:i]]++
			}
		}
	}
	if len(count) != len(trees) {
		return nil, nil
	}
	subs := make(map[string][]string, len(trees))
	oids := make(map[string][]byte, len(trees))
	for dir, oid := range trees {
		if count[dir] == 0 {
			return nil, nil
		}
		raw, err := hex.DecodeString(oid)
		if err != nil || len(raw) != sha1.Size {
			return nil, fmt.Errorf("%w: tree %q: object name %q", ErrBadIndexEntry, dir, oid)
		}
		oids[dir] = raw
		if dir != "" {
			parent := ""
			if i := strings.LastIndexByte(dir, '/'); i >= 0 {
				parent = dir[:i]
			}
			subs[parent] = append(subs[parent], dir)
		}
	}
	var b bytes.Buffer
	var write func(dir, name string)
	write = func(dir, name string) {
		down := subs[dir]
		sort.Slice(down, func(i, j int) bool {
			a, c := path.Base(down[i]), path.Base(down[j])
			if len(a) != len(c) {
				return len(a) < len(c)
			}
			return a < c
		})
		fmt.Fprintf(&b, "%s\x00%d %d\n", name, count[dir], len(down))
		b.Write(oids[dir])
		for _, d := range down {
			write(d, path.Base(d))
		}
	}
	write("", "")
	return b.Bytes(), nil
}

func put32(b *bytes.Buffer, v uint32) {
	var x [4]byte
	binary.BigEndian.PutUint32(x[:], v)
	b.Write(x[:])
}
