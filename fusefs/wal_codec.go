package fusefs

import (
	"encoding/binary"
	"errors"
	"math"
	"sort"

	"github.com/acyclicfs/acyclicfs/store"
)

// The frames of a version 3 log (walMagic) are encoded by hand instead of
// by gob: a frame is written before every request that changed the table
// is answered, and gob's reflection spent most of that frame's cost on
// the two 32-byte IDs of every record, which it sends byte by byte even
// when zero (untar of the Go tree: 12 % of the daemon's CPU was gob).
// Each frame stands alone (no type descriptions carried over between
// frames). The layout, all integers varints (unsigned: uvarint):
//
//	frame   = NextIno Seq CapSeq n×rec n×writer n×removed (n: a uvarint count)
//	rec     = Kind(byte) inode n×(Name Num)
//	inode   = Num Mode UID GID Rdev Atime Mtime Ctime flags
//	          Lower{Name Kind Size Mtime [ID]} Target n×(key value) Seq SubSeq
//	          LinkSeq [CapTree] n×(Name Num) n×writerIdx WriterSince
//	writer  = PID Exec Comm n×Argv ArgvTruncated(byte) Session Lease LeaseKind
//	          n×Leader LeaseStart
//	removed = Path n×writerIdx First Last
//
// Strings and byte strings are a uvarint length and the bytes. flags:
// bit 0 HasLower, 1 Upper, 2 Loaded, 3 Lower.ID present (32 bytes after
// Lower's Mtime; absent: zero), 4 CapTree present. Xattrs in key order.
// Empty lists and maps decode as nil, as gob leaves them.

const (
	walFlagHasLower = 1 << iota
	walFlagUpper
	walFlagLoaded
	walFlagLowerID
	walFlagCapTree
	walFlagsAll = 1<<iota - 1
)

// errWALFrame is a frame that does not decode; it ends the log.
var errWALFrame = errors.New("bad overlay log frame")

// appendWALFrame appends f's encoding to b.
func appendWALFrame(b []byte, f *walFrame) []byte {
	b = binary.AppendUvarint(b, f.NextIno)
	b = binary.AppendUvarint(b, f.Seq)
	b = binary.AppendUvarint(b, f.CapSeq)
	b = binary.AppendUvarint(b, uint64(len(f.Recs)))
	for i := range f.Recs {
		r := &f.Recs[i]
		b = append(b, r.Kind)
		b = appendSnapInode(b, &r.Inode)
		b = appendChildren(b, r.Names)
	}
	b = binary.AppendUvarint(b, uint64(len(f.Writers)))
	for i := range f.Writers {
		w := &f.Writers[i]
		b = binary.AppendUvarint(b, uint64(w.Ref.PID))
		b = binary.AppendUvarint(b, uint64(w.Ref.Exec))
		b = appendString(b, w.Comm)
		b = appendStrings(b, w.Argv)
		b = appendBool(b, w.ArgvTruncated)
		b = appendString(b, w.Session)
		b = appendString(b, w.Lease)
		b = appendString(b, w.LeaseKind)
		b = appendStrings(b, w.Leader)
		b = binary.AppendVarint(b, w.LeaseStart)
	}
	b = binary.AppendUvarint(b, uint64(len(f.Removed)))
	for i := range f.Removed {
		r := &f.Removed[i]
		b = appendString(b, r.Path)
		b = appendUint32s(b, r.Writers)
		b = binary.AppendVarint(b, r.First)
		b = binary.AppendVarint(b, r.Last)
	}
	return b
}

func appendSnapInode(b []byte, in *snapInode) []byte {
	b = binary.AppendUvarint(b, in.Num)
	b = binary.AppendUvarint(b, uint64(in.Mode))
	b = binary.AppendUvarint(b, uint64(in.UID))
	b = binary.AppendUvarint(b, uint64(in.GID))
	b = binary.AppendUvarint(b, uint64(in.Rdev))
	b = binary.AppendVarint(b, in.Atime)
	b = binary.AppendVarint(b, in.Mtime)
	b = binary.AppendVarint(b, in.Ctime)
	var flags byte
	if in.HasLower {
		flags |= walFlagHasLower
	}
	if in.Upper {
		flags |= walFlagUpper
	}
	if in.Loaded {
		flags |= walFlagLoaded
	}
	if in.Lower.ID != (store.ID{}) {
		flags |= walFlagLowerID
	}
	if in.CapTree != (store.ID{}) {
		flags |= walFlagCapTree
	}
	b = append(b, flags)
	b = appendString(b, in.Lower.Name)
	b = binary.AppendUvarint(b, uint64(in.Lower.Kind))
	b = binary.AppendVarint(b, in.Lower.Size)
	b = binary.AppendVarint(b, in.Lower.Mtime)
	if flags&walFlagLowerID != 0 {
		b = append(b, in.Lower.ID[:]...)
	}
	b = appendString(b, string(in.Target))
	b = binary.AppendUvarint(b, uint64(len(in.Xattrs)))
	if len(in.Xattrs) > 0 {
		keys := make([]string, 0, len(in.Xattrs))
		for k := range in.Xattrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b = appendString(b, k)
			b = appendString(b, string(in.Xattrs[k]))
		}
	}
	b = binary.AppendUvarint(b, in.Seq)
	b = binary.AppendUvarint(b, in.SubSeq)
	b = binary.AppendUvarint(b, in.LinkSeq)
	if flags&walFlagCapTree != 0 {
		b = append(b, in.CapTree[:]...)
	}
	b = appendChildren(b, in.Children)
	b = appendUint32s(b, in.Writers)
	return binary.AppendVarint(b, in.WriterSince)
}

func appendChildren(b []byte, cs []snapChild) []byte {
	b = binary.AppendUvarint(b, uint64(len(cs)))
	for _, c := range cs {
		b = appendString(b, c.Name)
		b = binary.AppendUvarint(b, c.Num)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

func appendUint32s(b []byte, vs []uint32) []byte {
	b = binary.AppendUvarint(b, uint64(len(vs)))
	for _, v := range vs {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return b
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// walDecoder reads one frame's bytes; the first error sticks and every
// later read returns zero values.
type walDecoder struct {
	b   []byte
	err error
}

func (d *walDecoder) fail() {
	if d.err == nil {
		d.err = errWALFrame
	}
	d.b = nil
}

func (d *walDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *walDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *walDecoder) uint32() uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.fail()
		return 0
	}
	return uint32(v)
}

func (d *walDecoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *walDecoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail()
	return false
}

// count reads a list length; every element takes at least one byte, so
// a count past what is left is corrupt (and no huge allocation is made).
func (d *walDecoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *walDecoder) bytes() []byte {
	n := d.count()
	if n == 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *walDecoder) string() string { return string(d.bytes()) }

func (d *walDecoder) id() (id store.ID) {
	if d.err != nil || len(d.b) < len(id) {
		d.fail()
		return id
	}
	copy(id[:], d.b)
	d.b = d.b[len(id):]
	return id
}

func (d *walDecoder) strings() []string {
	n := d.count()
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.string()
	}
	return ss
}

func (d *walDecoder) uint32s() []uint32 {
	n := d.count()
	if n == 0 {
		return nil
	}
	vs := make([]uint32, n)
	for i := range vs {
		vs[i] = d.uint32()
	}
	return vs
}

func (d *walDecoder) children() []snapChild {
	n := d.count()
	if n == 0 {
		return nil
	}
	cs := make([]snapChild, n)
	for i := range cs {
		cs[i] = snapChild{Name: d.string(), Num: d.uvarint()}
	}
	return cs
}

func (d *walDecoder) snapInode(in *snapInode) {
	in.Num = d.uvarint()
	in.Mode, in.UID, in.GID, in.Rdev = d.uint32(), d.uint32(), d.uint32(), d.uint32()
	in.Atime, in.Mtime, in.Ctime = d.varint(), d.varint(), d.varint()
	flags := d.byte()
	if flags&^walFlagsAll != 0 {
		d.fail()
	}
	in.HasLower, in.Upper, in.Loaded = flags&walFlagHasLower != 0, flags&walFlagUpper != 0, flags&walFlagLoaded != 0
	in.Lower.Name = d.string()
	kind := d.uvarint()
	if kind > math.MaxUint8 {
		d.fail()
	}
	in.Lower.Kind = store.Kind(kind)
	in.Lower.Size, in.Lower.Mtime = d.varint(), d.varint()
	if flags&walFlagLowerID != 0 {
		in.Lower.ID = d.id()
	}
	in.Target = d.bytes()
	if n := d.count(); n > 0 {
		in.Xattrs = make(map[string][]byte, n)
		for range n {
			k := d.string()
			v := d.bytes()
			if v == nil {
				v = []byte{} // an empty value is still a value
			}
			in.Xattrs[k] = v
		}
	}
	in.Seq, in.SubSeq, in.LinkSeq = d.uvarint(), d.uvarint(), d.uvarint()
	if flags&walFlagCapTree != 0 {
		in.CapTree = d.id()
	}
	in.Children = d.children()
	in.Writers = d.uint32s()
	in.WriterSince = d.varint()
}

// decodeWALFrame parses one frame's payload; it must be consumed whole.
func decodeWALFrame(b []byte) (walFrame, error) {
	d := &walDecoder{b: b}
	var f walFrame
	f.NextIno, f.Seq, f.CapSeq = d.uvarint(), d.uvarint(), d.uvarint()
	if n := d.count(); n > 0 {
		f.Recs = make([]walRec, n)
		for i := range f.Recs {
			r := &f.Recs[i]
			r.Kind = d.byte()
			d.snapInode(&r.Inode)
			r.Names = d.children()
		}
	}
	if n := d.count(); n > 0 {
		f.Writers = make([]WriterInfo, n)
		for i := range f.Writers {
			w := &f.Writers[i]
			w.Ref.PID, w.Ref.Exec = d.uint32(), d.uint32()
			w.Comm = d.string()
			w.Argv = d.strings()
			w.ArgvTruncated = d.bool()
			w.Session, w.Lease, w.LeaseKind = d.string(), d.string(), d.string()
			w.Leader = d.strings()
			w.LeaseStart = d.varint()
		}
	}
	if n := d.count(); n > 0 {
		f.Removed = make([]walRemoved, n)
		for i := range f.Removed {
			r := &f.Removed[i]
			r.Path = d.string()
			r.Writers = d.uint32s()
			r.First, r.Last = d.varint(), d.varint()
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return walFrame{}, d.err
	}
	return f, nil
}
