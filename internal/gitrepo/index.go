package gitrepo

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
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

// EncodeIndex returns a version 2 index file of entries (sorted by path
// here, as git requires). A non-empty fsmonitorToken adds the fsmonitor
// extension (version 2) with that token and every entry valid: git then
// asks the fsmonitor hook what changed since the token instead of
// lstat()ing every file.
func EncodeIndex(entries []IndexEntry, fsmonitorToken string) ([]byte, error) {
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

func put32(b *bytes.Buffer, v uint32) {
	var x [4]byte
	binary.BigEndian.PutUint32(x[:], v)
	b.Write(x[:])
}
