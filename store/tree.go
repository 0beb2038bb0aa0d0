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
	KindFile    Kind = 1 // regular file, mode 0644-ish
	KindExec    Kind = 2 // regular file with the executable bit
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
type Entry struct {
	Name  string
	Kind  Kind
	Size  int64
	Mtime int64
	ID    ID
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

const treeFormat = 1

// Encode returns the canonical encoding: a version byte, then per entry
// uvarint(len name), name, kind byte, uvarint(size), varint(mtime), 32-byte id.
// Special entries use the same layout (kinds 5-8, size = device number,
// id all zero), so trees without them encode exactly as before.
// It fails if entries are unsorted, duplicated or invalid, so every encoded
// tree is canonical and its ID unique.
func (t *Tree) Encode() ([]byte, error) {
	buf := make([]byte, 0, 1+len(t.Entries)*64)
	buf = append(buf, treeFormat)
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
		buf = binary.AppendUvarint(buf, uint64(len(e.Name)))
		buf = append(buf, e.Name...)
		buf = append(buf, byte(e.Kind))
		buf = binary.AppendUvarint(buf, uint64(e.Size))
		buf = binary.AppendVarint(buf, e.Mtime)
		buf = append(buf, e.ID[:]...)
	}
	return buf, nil
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
	if len(b) == 0 || b[0] != treeFormat {
		return nil, fmt.Errorf("%w: tree: bad format byte", ErrCorrupt)
	}
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
	// minimal varints).
	re, err := t.Encode()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(re, orig) {
		return nil, fmt.Errorf("%w: tree: non-canonical encoding", ErrCorrupt)
	}
	return t, nil
}
