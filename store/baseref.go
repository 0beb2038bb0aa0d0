package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// domainBaseRef separates base references from blobs, trees and
// generations (see id.go).
const domainBaseRef = "acyclicfs baseref v1\x00"

const baseRefFormat = 1

// maxBaseRefPath bounds a reference's path; the kernel resolves at most
// PATH_MAX bytes anyway.
const maxBaseRefPath = 1 << 16

// BaseRef names a file, symlink or directory of an in-place workspace's
// base directory by its stat fingerprint instead of its content, so that
// creating an in-place workspace reads nothing. Its ID stands in a tree
// entry where a blob ID (files, symlinks) or tree ID (directories) would;
// the store resolves it on read (GetTree, ReadBlob, OpenBlob, ...).
type BaseRef struct {
	Base  ID     // the base registration (CreateBase)
	Path  string // slash-separated, relative to the base directory; "" is the directory itself
	Kind  Kind
	Size  int64  // st_size; 0 for directories
	Mtime int64  // ns since the epoch
	Ctime int64  // ns since the epoch
	Ino   uint64 // inode number
	Mode  uint32 // permission bits (07777)

	// Git, when set, makes this a git object reference instead: the
	// content is blob Git (40 lowercase hex digits, SHA-1) of the
	// repository whose git directory Base registers (GitBase), of
	// Size bytes. Path, Mtime, Ctime, Ino and Mode are then zero: a git
	// object is immutable by its name, so there is no fingerprint to
	// check, and Kind is a file, executable or symlink.
	Git string
}

// gitRefFormat is the format byte of a git object reference's encoding.
const gitRefFormat = 2

// BaseRefID returns the address of an encoded base reference.
func BaseRefID(encoded []byte) ID { return hashWithDomain(domainBaseRef, encoded) }

// ID returns the reference's address. The ID of an invalid reference
// (one Encode rejects) names nothing that can be stored.
func (r BaseRef) ID() ID { return BaseRefID(r.appendEncoding(nil)) }

// Encode returns the canonical encoding: a version byte, the 32-byte base,
// the kind byte, uvarint(len path), path, uvarint(size), varint(mtime),
// varint(ctime), uvarint(ino), uvarint(mode). It fails on an invalid
// reference, so every stored encoding is canonical.
func (r BaseRef) Encode() ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	return r.appendEncoding(make([]byte, 0, 64+len(r.Path))), nil
}

func (r BaseRef) appendEncoding(buf []byte) []byte {
	if r.Git != "" {
		// A git object reference: format byte, base, kind, the 20 bytes of
		// the object name, uvarint(size).
		buf = append(buf, gitRefFormat)
		buf = append(buf, r.Base[:]...)
		buf = append(buf, byte(r.Kind))
		var oid [20]byte
		_, _ = hex.Decode(oid[:], []byte(r.Git)) // validate checked it; an invalid ref's ID names nothing stored
		buf = append(buf, oid[:]...)
		return binary.AppendUvarint(buf, uint64(r.Size))
	}
	buf = append(buf, baseRefFormat)
	buf = append(buf, r.Base[:]...)
	buf = append(buf, byte(r.Kind))
	buf = binary.AppendUvarint(buf, uint64(len(r.Path)))
	buf = append(buf, r.Path...)
	buf = binary.AppendUvarint(buf, uint64(r.Size))
	buf = binary.AppendVarint(buf, r.Mtime)
	buf = binary.AppendVarint(buf, r.Ctime)
	buf = binary.AppendUvarint(buf, r.Ino)
	buf = binary.AppendUvarint(buf, uint64(r.Mode))
	return buf
}

func (r BaseRef) validate() error {
	if r.Git != "" {
		return r.validateGit()
	}
	switch {
	case r.Base.IsZero():
		return fmt.Errorf("%w: base ref without base", ErrCorrupt)
	case !r.Kind.Valid():
		return fmt.Errorf("%w: base ref kind %d", ErrCorrupt, r.Kind)
	case !validRefPath(r.Path):
		return fmt.Errorf("%w: base ref path %q", ErrCorrupt, r.Path)
	case r.Size < 0 || r.Size > 1<<62:
		return fmt.Errorf("%w: base ref size %d", ErrCorrupt, r.Size)
	case r.Kind == KindDir && r.Size != 0:
		return fmt.Errorf("%w: base ref directory with size %d", ErrCorrupt, r.Size)
	case r.Mode&^0o7777 != 0:
		return fmt.Errorf("%w: base ref mode %o", ErrCorrupt, r.Mode)
	case r.Kind == KindFile && r.Mode&0o111 != 0, r.Kind == KindExec && r.Mode&0o111 == 0:
		return fmt.Errorf("%w: base ref kind %s with mode %o", ErrCorrupt, r.Kind, r.Mode)
	}
	return nil
}

func (r BaseRef) validateGit() error {
	switch {
	case r.Base.IsZero():
		return fmt.Errorf("%w: git ref without base", ErrCorrupt)
	case r.Kind != KindFile && r.Kind != KindExec && r.Kind != KindSymlink:
		return fmt.Errorf("%w: git ref kind %d", ErrCorrupt, r.Kind)
	case !validGitOID(r.Git):
		return fmt.Errorf("%w: git ref object name %q", ErrCorrupt, r.Git)
	case r.Size < 0 || r.Size > 1<<62:
		return fmt.Errorf("%w: git ref size %d", ErrCorrupt, r.Size)
	case r.Path != "" || r.Mtime != 0 || r.Ctime != 0 || r.Ino != 0 || r.Mode != 0:
		return fmt.Errorf("%w: git ref with a fingerprint", ErrCorrupt)
	}
	return nil
}

// validGitOID accepts a SHA-1 object name in lowercase hex.
func validGitOID(s string) bool {
	if len(s) != 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// decodeGitRef parses a git object reference's encoding (gitRefFormat).
func decodeGitRef(b []byte) (BaseRef, error) {
	var r BaseRef
	if len(b) < 2+IDSize+20+1 {
		return r, fmt.Errorf("%w: git ref: truncated", ErrCorrupt)
	}
	copy(r.Base[:], b[1:1+IDSize])
	r.Kind = Kind(b[1+IDSize])
	r.Git = hex.EncodeToString(b[2+IDSize : 2+IDSize+20])
	size, k := binary.Uvarint(b[2+IDSize+20:])
	if k <= 0 || size > 1<<62 {
		return r, fmt.Errorf("%w: git ref: bad size", ErrCorrupt)
	}
	r.Size = int64(size)
	re, err := r.Encode()
	if err != nil {
		return BaseRef{}, err
	}
	if !bytes.Equal(re, b) {
		return BaseRef{}, fmt.Errorf("%w: git ref: non-canonical encoding", ErrCorrupt)
	}
	return r, nil
}

// validRefPath accepts "" and slash-joined valid tree names.
func validRefPath(p string) bool {
	if p == "" {
		return true
	}
	if len(p) > maxBaseRefPath {
		return false
	}
	for c := range strings.SplitSeq(p, "/") {
		if !ValidName(c) {
			return false
		}
	}
	return true
}

// DecodeBaseRef parses a canonical base reference encoding; anything
// non-canonical is ErrCorrupt.
func DecodeBaseRef(b []byte) (BaseRef, error) {
	var r BaseRef
	orig := b
	if len(b) > 0 && b[0] == gitRefFormat {
		return decodeGitRef(b)
	}
	if len(b) < 2+IDSize || b[0] != baseRefFormat {
		return r, fmt.Errorf("%w: base ref: bad format byte or truncated", ErrCorrupt)
	}
	copy(r.Base[:], b[1:1+IDSize])
	r.Kind = Kind(b[1+IDSize])
	b = b[2+IDSize:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) || n > maxBaseRefPath {
		return r, fmt.Errorf("%w: base ref: bad path length", ErrCorrupt)
	}
	r.Path = string(b[k : k+int(n)])
	b = b[k+int(n):]
	var fields [5]uint64
	for i := range fields {
		var k int
		if i == 1 || i == 2 { // mtime, ctime are signed
			var v int64
			v, k = binary.Varint(b)
			fields[i] = uint64(v)
		} else {
			fields[i], k = binary.Uvarint(b)
		}
		if k <= 0 {
			return r, fmt.Errorf("%w: base ref: bad field %d", ErrCorrupt, i)
		}
		b = b[k:]
	}
	if len(b) != 0 {
		return r, fmt.Errorf("%w: base ref: %d trailing bytes", ErrCorrupt, len(b))
	}
	if fields[0] > 1<<62 || fields[4] > 0o7777 {
		return r, fmt.Errorf("%w: base ref: size or mode out of range", ErrCorrupt)
	}
	r.Size, r.Mtime, r.Ctime, r.Ino, r.Mode = int64(fields[0]), int64(fields[1]), int64(fields[2]), fields[3], uint32(fields[4])
	re, err := r.Encode()
	if err != nil {
		return BaseRef{}, err
	}
	if !bytes.Equal(re, orig) {
		return BaseRef{}, fmt.Errorf("%w: base ref: non-canonical encoding", ErrCorrupt)
	}
	return r, nil
}

// kindOfMode maps a stat mode to a tree kind; false for fifos, sockets,
// devices.
func kindOfMode(mode uint32) (Kind, bool) {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		if mode&0o111 != 0 {
			return KindExec, true
		}
		return KindFile, true
	case unix.S_IFLNK:
		return KindSymlink, true
	case unix.S_IFDIR:
		return KindDir, true
	}
	return 0, false
}

// SpecialKindOfMode maps a stat mode of a FIFO, socket or device to its
// tree kind; false for anything else.
func SpecialKindOfMode(mode uint32) (Kind, bool) {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return KindFIFO, true
	case unix.S_IFSOCK:
		return KindSocket, true
	case unix.S_IFCHR:
		return KindCharDev, true
	case unix.S_IFBLK:
		return KindBlockDev, true
	}
	return 0, false
}

// SpecialMode is the stat file type of special kind k (0 for others).
func SpecialMode(k Kind) uint32 {
	switch k {
	case KindFIFO:
		return unix.S_IFIFO
	case KindSocket:
		return unix.S_IFSOCK
	case KindCharDev:
		return unix.S_IFCHR
	case KindBlockDev:
		return unix.S_IFBLK
	}
	return 0
}

// SpecialPerm is the default permission bits of a special file of kind k
// (DefaultPerm; all a tree from before modes were kept shows): a FIFO 0644 and a
// socket 0755, as mkfifo(1) and bind(2) make them under umask 022; a
// device 0600, so a device never opens to other users by default.
func SpecialPerm(k Kind) uint32 {
	switch k {
	case KindSocket:
		return 0o755
	case KindCharDev, KindBlockDev:
		return 0o600
	}
	return 0o644
}

// baseRefFromStat builds the reference for path in base from its lstat;
// false if the file type has no tree kind.
func baseRefFromStat(base ID, path string, st *unix.Stat_t) (BaseRef, bool) {
	kind, ok := kindOfMode(st.Mode)
	if !ok {
		return BaseRef{}, false
	}
	r := BaseRef{
		Base:  base,
		Path:  path,
		Kind:  kind,
		Mtime: st.Mtim.Nano(),
		Ctime: st.Ctim.Nano(),
		Ino:   st.Ino,
		Mode:  st.Mode & 0o7777,
	}
	if kind != KindDir {
		r.Size = st.Size
	}
	return r, true
}

// matches reports whether st still has r's fingerprint: for files and
// symlinks kind, size, mtime, ctime, inode and mode; for directories inode
// and mtime — adding, removing or renaming an entry moves the mtime, while
// the ctime also moves when the directory itself is renamed or chmodded,
// which leaves its listing as it was.
func (r BaseRef) matches(st *unix.Stat_t) bool {
	cur, ok := baseRefFromStat(r.Base, r.Path, st)
	if !ok {
		return false
	}
	return r.SameAs(cur)
}

// SameAs reports whether cur, a fresh reference to the same path, still
// has r's fingerprint (see matches).
func (r BaseRef) SameAs(cur BaseRef) bool {
	if r.Kind == KindDir {
		return cur.Kind == KindDir && cur.Ino == r.Ino && cur.Mtime == r.Mtime
	}
	return cur.Kind == r.Kind && cur.Size == r.Size && cur.Mtime == r.Mtime &&
		cur.Ctime == r.Ctime && cur.Ino == r.Ino && cur.Mode == r.Mode
}

// joinRefPath appends a name to a reference path.
func joinRefPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
