package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
)

// Kind is the type of a tree entry.
type Kind uint8

// Entry kinds. Values are part of the on-disk format.
const (
	KindFile    Kind = 1 // regular file, no execute bit (default mode 0644)
	KindExec    Kind = 2 // regular file with an execute bit (default mode 0755)
	KindSymlink Kind = 3 // symbolic link; ID is the blob holding the target
	KindDir     Kind = 4 // directory; ID is the tree
	// Special files: no content, the zero ID. A device's Size is its
	// device number (st_rdev, glibc's makedev encoding, at most 32 bits);
	// a FIFO's and a socket's Size is 0.
	KindFIFO     Kind = 5 // named pipe
	KindSocket   Kind = 6 // unix domain socket node
	KindCharDev  Kind = 7 // character device
	KindBlockDev Kind = 8 // block device
)

// MaxRdev is the largest device number a tree entry holds: what the
// kernel's FUSE protocol and new_encode_dev carry (32 bits).
const MaxRdev = 1<<32 - 1

// String returns a short name for the kind.
func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindExec:
		return "exec"
	case KindSymlink:
		return "symlink"
	case KindDir:
		return "dir"
	case KindFIFO:
		return "fifo"
	case KindSocket:
		return "socket"
	case KindCharDev:
		return "chardev"
	case KindBlockDev:
		return "blockdev"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// IsRegular reports whether k is a regular file (plain or executable).
func (k Kind) IsRegular() bool { return k == KindFile || k == KindExec }

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= KindFile && k <= KindBlockDev }

// IsSpecial reports whether k is a FIFO, socket or device: an entry with
// no content (zero ID) whose identity is its kind and Size (the device
// number).
func (k Kind) IsSpecial() bool { return k >= KindFIFO && k <= KindBlockDev }

// IsDevice reports whether k is a character or block device.
func (k Kind) IsDevice() bool { return k == KindCharDev || k == KindBlockDev }

// HasBlob reports whether an entry of kind k names a blob (or a base
// reference standing for one): regular files and symlinks.
func (k Kind) HasBlob() bool { return k >= KindFile && k <= KindSymlink }

// Rdev is the device number of a device entry, 0 for anything else.
func (e *Entry) Rdev() uint64 {
	if e.Kind.IsDevice() {
		return uint64(e.Size)
	}
	return 0
}

// SpecialEntry returns the entry for a special file of kind k (a FIFO,
// socket or device) with device number rdev (ignored but for devices).
func SpecialEntry(name string, k Kind, rdev uint64, mtime int64) Entry {
	e := Entry{Name: name, Kind: k, Mtime: mtime}
	if k.IsDevice() {
		e.Size = int64(rdev)
	}
	return e
}

// Entry is one name in a tree. For a directory Size is 0 and ID is the
// subtree; for a file or symlink ID is the blob and Size its length; for a
// special file (IsSpecial) ID is zero and Size the device number (Rdev).
// Mtime is in nanoseconds since the Unix epoch.
//
// Its permission bits (07777: setuid, setgid, sticky and rwx) are Perm;
// an entry built without SetPerm has its kind's default (DefaultPerm), the
// mode every entry showed before trees kept modes. A regular file's kind
// follows its mode: KindExec exactly when an execute bit is set.
type Entry struct {
	Name string
	Kind Kind
	// perm is 0 for the kind's default, else permSet|bits. Normalised by
	// SetPerm and DecodeTree so that == compares modes. Beside Kind it
	// takes no room (the padding before Size).
	perm  uint16
	Size  int64
	Mtime int64
	ID    ID
}

const permSet = 1 << 15

// PermMask is the permission bits a tree entry keeps.
const PermMask = 0o7777

// DefaultPerm is the mode an entry of kind k has unless it records
// another: what every entry of a tree from before modes were kept shows.
// A file 0644, an executable and a directory 0755, a symlink 0777 (a
// symlink has no mode of its own: SetPerm leaves it 0777), a special file
// SpecialPerm (a device keeps it: SetPerm leaves it 0600).
func DefaultPerm(k Kind) uint32 {
	switch k {
	case KindExec, KindDir:
		return 0o755
	case KindSymlink:
		return 0o777
	case KindFIFO, KindSocket, KindCharDev, KindBlockDev:
		return SpecialPerm(k)
	}
	return 0o644
}

// Perm returns e's permission bits (07777).
func (e *Entry) Perm() uint32 {
	if e.perm == 0 {
		return DefaultPerm(e.Kind)
	}
	return uint32(e.perm) & PermMask
}

// HasPerm reports whether e records permission bits other than its kind's
// default.
func (e *Entry) HasPerm() bool { return e.perm != 0 }

// SetPerm sets e's permission bits to p&07777; set the kind first. A
// regular file's kind becomes KindExec or KindFile as p has an execute
// bit or not. A symlink keeps 0777 and a device 0600 (SpecialPerm: a
// stored device never opens to other users).
func (e *Entry) SetPerm(p uint32) {
	p &= PermMask
	switch {
	case e.Kind == KindSymlink, e.Kind.IsDevice():
		e.perm = 0
		return
	case e.Kind.IsRegular():
		e.Kind = KindFile
		if p&0o111 != 0 {
			e.Kind = KindExec
		}
	}
	if p == DefaultPerm(e.Kind) {
		e.perm = 0
	} else {
		e.perm = permSet | uint16(p)
	}
}

// WithPerm returns e with permission bits p (SetPerm).
func (e Entry) WithPerm(p uint32) Entry {
	e.SetPerm(p)
	return e
}

// SameMeta reports whether a and b have the same kind, mode and ID (and,
// for special files, the same device number): what a merge and a diff
// compare. Names, mtimes and file sizes are not compared.
func SameMeta(a, b *Entry) bool {
	return a.Kind == b.Kind && a.ID == b.ID && a.perm == b.perm && (!a.Kind.IsSpecial() || a.Size == b.Size)
}

// Tree is a directory: entries sorted by name in byte order, names unique.
type Tree struct {
	Entries []Entry
}

// Lookup returns the entry called name.
func (t *Tree) Lookup(name string) (Entry, bool) {
	i := sort.Search(len(t.Entries), func(i int) bool { return t.Entries[i].Name >= name })
	if i < len(t.Entries) && t.Entries[i].Name == name {
		return t.Entries[i], true
	}
	return Entry{}, false
}

// Sort orders entries by name; callers building trees call it before Encode.
func (t *Tree) Sort() {
	sort.Slice(t.Entries, func(i, j int) bool { return t.Entries[i].Name < t.Entries[j].Name })
}

// ValidName reports whether name may appear in a tree: not empty, not "."
// or "..", no '/' and no NUL. Any other bytes (newlines, invalid UTF-8) are
// allowed, as POSIX allows them.
func ValidName(name string) bool {
	if name == "" || name == "." || name == ".." {
		return false
	}
	return !strings.ContainsAny(name, "/\x00")
}

// Tree format versions. A tree is written as treeFormat when every entry
// has its kind's default mode — exactly the encoding of every tree from
// before modes were kept, so those keep their IDs — and as treeFormatPerm
// (the same layout with each entry's mode after its kind) otherwise. Which
// one a tree uses is part of its canonical form.
const (
	treeFormat     = 1
	treeFormatPerm = 2
)

// Encode returns the canonical encoding: a version byte, then per entry
// uvarint(len name), name, kind byte, [uvarint(mode) in version 2],
// uvarint(size), varint(mtime), 32-byte id. Version 1 when every entry has
// its kind's default mode, else version 2 (see treeFormat).
// Special entries use the same layout (kinds 5-8, size = device number,
// id all zero), so trees without them encode exactly as before.
// It fails if entries are unsorted, duplicated or invalid, so every encoded
// tree is canonical and its ID unique.
func (t *Tree) Encode() ([]byte, error) {
	format := byte(treeFormat)
	for i := range t.Entries {
		if t.Entries[i].perm != 0 {
			format = treeFormatPerm
			break
		}
	}
	buf := make([]byte, 0, 1+len(t.Entries)*64)
	buf = append(buf, format)
	for i, e := range t.Entries {
		if !ValidName(e.Name) {
			return nil, fmt.Errorf("%w: invalid entry name %q", ErrCorrupt, e.Name)
		}
		if i > 0 && t.Entries[i-1].Name >= e.Name {
			return nil, fmt.Errorf("%w: entries not sorted or duplicated at %q", ErrCorrupt, e.Name)
		}
		if !e.Kind.Valid() {
			return nil, fmt.Errorf("%w: invalid kind %d for %q", ErrCorrupt, e.Kind, e.Name)
		}
		if e.Size < 0 {
			return nil, fmt.Errorf("%w: negative size for %q", ErrCorrupt, e.Name)
		}
		if err := checkSpecial(e); err != nil {
			return nil, err
		}
		if err := checkPerm(&e); err != nil {
			return nil, err
		}
		buf = binary.AppendUvarint(buf, uint64(len(e.Name)))
		buf = append(buf, e.Name...)
		buf = append(buf, byte(e.Kind))
		if format == treeFormatPerm {
			buf = binary.AppendUvarint(buf, uint64(e.Perm()))
		}
		buf = binary.AppendUvarint(buf, uint64(e.Size))
		buf = binary.AppendVarint(buf, e.Mtime)
		buf = append(buf, e.ID[:]...)
	}
	return buf, nil
}

// checkPerm enforces the canonical form of an entry's mode: a regular
// file's kind agrees with its execute bits, a symlink and a device have
// their default, and a recorded mode is not the kind's default (SetPerm's
// normal form).
func checkPerm(e *Entry) error {
	if e.perm == 0 {
		return nil
	}
	p := uint32(e.perm) & PermMask
	switch {
	case e.perm&^(permSet|PermMask) != 0 || e.perm&permSet == 0:
		return fmt.Errorf("%w: bad mode %#x for %q", ErrCorrupt, e.perm, e.Name)
	case e.Kind == KindSymlink, e.Kind.IsDevice():
		return fmt.Errorf("%w: %s %q with mode %04o", ErrCorrupt, e.Kind, e.Name, p)
	case e.Kind.IsRegular() && (p&0o111 != 0) != (e.Kind == KindExec):
		return fmt.Errorf("%w: %s %q with mode %04o", ErrCorrupt, e.Kind, e.Name, p)
	case p == DefaultPerm(e.Kind):
		return fmt.Errorf("%w: %q records its default mode", ErrCorrupt, e.Name)
	}
	return nil
}

// checkSpecial enforces the canonical form of special entries: zero ID,
// size 0 for FIFOs and sockets, a 32-bit device number for devices.
func checkSpecial(e Entry) error {
	switch {
	case !e.Kind.IsSpecial():
		return nil
	case !e.ID.IsZero():
		return fmt.Errorf("%w: %s %q with content id", ErrCorrupt, e.Kind, e.Name)
	case !e.Kind.IsDevice() && e.Size != 0:
		return fmt.Errorf("%w: %s %q with size %d", ErrCorrupt, e.Kind, e.Name, e.Size)
	case e.Size > MaxRdev:
		return fmt.Errorf("%w: device %q number %#x out of range", ErrCorrupt, e.Name, e.Size)
	}
	return nil
}

// TreeID returns the address of an encoded tree.
func TreeID(encoded []byte) ID { return hashWithDomain(domainTree, encoded) }

// DecodeTree parses a canonical tree encoding. Anything non-canonical is
// ErrCorrupt.
func DecodeTree(b []byte) (*Tree, error) {
	if len(b) == 0 || b[0] != treeFormat && b[0] != treeFormatPerm {
		return nil, fmt.Errorf("%w: tree: bad format byte", ErrCorrupt)
	}
	withPerm := b[0] == treeFormatPerm
	orig := b
	b = b[1:]
	// An entry takes at least 37 bytes (1-byte name and varints, 32-byte
	// id); sizing for that avoids regrowing on large directories.
	t := &Tree{Entries: make([]Entry, 0, len(b)/37)}
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) || n > 4096 {
			return nil, fmt.Errorf("%w: tree: bad name length", ErrCorrupt)
		}
		b = b[k:]
		var e Entry
		e.Name = string(b[:n])
		b = b[n:]
		if len(b) < 1 {
			return nil, fmt.Errorf("%w: tree: truncated", ErrCorrupt)
		}
		e.Kind = Kind(b[0])
		b = b[1:]
		if withPerm {
			p, k := binary.Uvarint(b)
			if k <= 0 || p > PermMask {
				return nil, fmt.Errorf("%w: tree: bad mode", ErrCorrupt)
			}
			b = b[k:]
			if e.Kind.Valid() && p != uint64(DefaultPerm(e.Kind)) {
				// Not normalised through SetPerm: a kind disagreeing with
				// the mode must fail the canonical check below.
				e.perm = permSet | uint16(p)
			}
		}
		size, k := binary.Uvarint(b)
		if k <= 0 || size > 1<<62 {
			return nil, fmt.Errorf("%w: tree: bad size", ErrCorrupt)
		}
		e.Size = int64(size)
		b = b[k:]
		mt, k := binary.Varint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: tree: bad mtime", ErrCorrupt)
		}
		e.Mtime = mt
		b = b[k:]
		if len(b) < IDSize {
			return nil, fmt.Errorf("%w: tree: truncated id", ErrCorrupt)
		}
		copy(e.ID[:], b[:IDSize])
		b = b[IDSize:]
		t.Entries = append(t.Entries, e)
	}
	// Re-encode to enforce canonical form (sorted, valid names and kinds,
	// minimal varints, modes agreeing with kinds, version 2 only with a
	// mode other than the default).
	re, err := t.Encode()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(re, orig) {
		return nil, fmt.Errorf("%w: tree: non-canonical encoding", ErrCorrupt)
	}
	return t, nil
}
