package fusefs

import (
	"bytes"
	"encoding/gob"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/acyclicfs/acyclicfs/store"
)

func genID(t *rapid.T, label string) store.ID {
	var id store.ID
	if rapid.Bool().Draw(t, label+"Zero") {
		return id
	}
	copy(id[:], rapid.SliceOfN(rapid.Byte(), len(id), len(id)).Draw(t, label))
	return id
}

func genStrings(t *rapid.T, label string) []string {
	return rapid.SliceOfN(rapid.String(), 0, 3).Draw(t, label)
}

func genUint32s(t *rapid.T, label string) []uint32 {
	return rapid.SliceOfN(rapid.Uint32(), 0, 3).Draw(t, label)
}

func genChildren(t *rapid.T, label string) []snapChild {
	n := rapid.IntRange(0, 3).Draw(t, label+"N")
	var cs []snapChild
	for range n {
		cs = append(cs, snapChild{Name: rapid.String().Draw(t, label+"Name"), Num: rapid.Uint64().Draw(t, label+"Num")})
	}
	return cs
}

func genSnapInode(t *rapid.T) snapInode {
	in := snapInode{
		Num: rapid.Uint64().Draw(t, "num"), Mode: rapid.Uint32().Draw(t, "mode"),
		UID: rapid.Uint32().Draw(t, "uid"), GID: rapid.Uint32().Draw(t, "gid"), Rdev: rapid.Uint32().Draw(t, "rdev"),
		Atime: rapid.Int64().Draw(t, "atime"), Mtime: rapid.Int64().Draw(t, "mtime"), Ctime: rapid.Int64().Draw(t, "ctime"),
		Lower: store.Entry{Name: rapid.String().Draw(t, "lname"), Kind: store.Kind(rapid.Uint8().Draw(t, "lkind")),
			Size: rapid.Int64().Draw(t, "lsize"), Mtime: rapid.Int64().Draw(t, "lmtime"), ID: genID(t, "lid")},
		HasLower: rapid.Bool().Draw(t, "haslower"), Upper: rapid.Bool().Draw(t, "upper"),
		Seq: rapid.Uint64().Draw(t, "seq"), SubSeq: rapid.Uint64().Draw(t, "subseq"), LinkSeq: rapid.Uint64().Draw(t, "linkseq"),
		CapTree: genID(t, "captree"), Loaded: rapid.Bool().Draw(t, "loaded"),
		Children: genChildren(t, "kids"), Writers: genUint32s(t, "writers"), WriterSince: rapid.Int64().Draw(t, "since"),
	}
	if target := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "target"); len(target) > 0 {
		in.Target = target
	}
	if n := rapid.IntRange(0, 3).Draw(t, "xattrs"); n > 0 {
		in.Xattrs = map[string][]byte{}
		for range n {
			in.Xattrs[rapid.String().Draw(t, "xk")] = rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "xv")
		}
	}
	return in
}

func genWALFrame(t *rapid.T) walFrame {
	f := walFrame{NextIno: rapid.Uint64().Draw(t, "nextino"), Seq: rapid.Uint64().Draw(t, "fseq"), CapSeq: rapid.Uint64().Draw(t, "capseq")}
	for range rapid.IntRange(0, 3).Draw(t, "recs") {
		f.Recs = append(f.Recs, walRec{Kind: rapid.Uint8().Draw(t, "kind"), Inode: genSnapInode(t), Names: genChildren(t, "names")})
	}
	for range rapid.IntRange(0, 2).Draw(t, "fwriters") {
		f.Writers = append(f.Writers, WriterInfo{
			Ref:  WriterRef{PID: rapid.Uint32().Draw(t, "pid"), Exec: rapid.Uint32().Draw(t, "exec")},
			Comm: rapid.String().Draw(t, "comm"), Argv: genStrings(t, "argv"), ArgvTruncated: rapid.Bool().Draw(t, "trunc"),
			Session: rapid.String().Draw(t, "session"), Lease: rapid.String().Draw(t, "lease"),
			LeaseKind: rapid.String().Draw(t, "leasekind"), Leader: genStrings(t, "leader"),
			LeaseStart: rapid.Int64().Draw(t, "leasestart")})
	}
	for range rapid.IntRange(0, 2).Draw(t, "removed") {
		f.Removed = append(f.Removed, walRemoved{Path: rapid.String().Draw(t, "path"), Writers: genUint32s(t, "rw"),
			First: rapid.Int64().Draw(t, "first"), Last: rapid.Int64().Draw(t, "last")})
	}
	return f
}

// nilEmpty makes empty slices nil, as both codecs decode them.
func nilEmpty(f *walFrame) {
	norm := func(in *snapInode) {
		if len(in.Children) == 0 {
			in.Children = nil
		}
		if len(in.Writers) == 0 {
			in.Writers = nil
		}
	}
	for i := range f.Recs {
		norm(&f.Recs[i].Inode)
		if len(f.Recs[i].Names) == 0 {
			f.Recs[i].Names = nil
		}
	}
	for i := range f.Writers {
		if len(f.Writers[i].Argv) == 0 {
			f.Writers[i].Argv = nil
		}
		if len(f.Writers[i].Leader) == 0 {
			f.Writers[i].Leader = nil
		}
	}
	for i := range f.Removed {
		if len(f.Removed[i].Writers) == 0 {
			f.Removed[i].Writers = nil
		}
	}
}

// Property: a frame decodes to what was encoded, every field of every
// record, and every strict prefix of its encoding is refused.
func TestWALFrameRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := genWALFrame(t)
		nilEmpty(&f)
		b := appendWALFrame(nil, &f)
		got, err := decodeWALFrame(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(got, f) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, f)
		}
		cut := rapid.IntRange(0, len(b)-1).Draw(t, "cut")
		if _, err := decodeWALFrame(b[:cut]); err == nil {
			t.Fatalf("prefix of %d of %d bytes decoded", cut, len(b))
		}
		if _, err := decodeWALFrame(append(bytes.Clone(b), 0)); err == nil {
			t.Fatal("trailing byte accepted")
		}
	})
}

// The hand-written codec names every field of the records it encodes: a
// field added to one of them must be added to wal_codec.go (and to
// format.md) too, and this count with it. store.Entry's sixth field, its
// mode, is deliberately not logged: a lower entry's mode is copied into
// the inode's Mode when the inode is made, and capture and getattr use
// that (the log keeps Mode), never the lower entry's.
func TestWALCodecCoversEveryField(t *testing.T) {
	for _, c := range []struct {
		v any
		n int
	}{
		{walFrame{}, 6}, {walRec{}, 3}, {snapInode{}, 21}, {snapChild{}, 2}, {store.Entry{}, 6},
		{WriterInfo{}, 9}, {WriterRef{}, 2}, {walRemoved{}, 4},
	} {
		if got := reflect.TypeOf(c.v).NumField(); got != c.n {
			t.Errorf("%T has %d fields, the log codec encodes %d", c.v, got, c.n)
		}
	}
}

// FuzzWALFrame: no bytes make the frame decoder panic, and what it
// accepts survives encoding and decoding again unchanged.
func FuzzWALFrame(f *testing.F) {
	f.Add(appendWALFrame(nil, &walFrame{NextIno: 4, Recs: []walRec{
		{Kind: walFull, Inode: snapInode{Num: 3, Mode: 0o100644, Lower: store.Entry{ID: store.ID{1}}, Xattrs: map[string][]byte{"user.a": []byte("b")}}},
		{Kind: walNames, Inode: snapInode{Num: 1, Mode: 0o40755, Writers: []uint32{1}}, Names: []snapChild{{Name: "c", Num: 3}}},
	}, Writers: []WriterInfo{{Ref: WriterRef{PID: 9, Exec: 1}, Comm: "sh", Argv: []string{"sh"}}},
		Removed: []walRemoved{{Path: "a", Writers: []uint32{1}, First: 1, Last: 2}}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeWALFrame(b)
		if err != nil {
			return
		}
		again, err := decodeWALFrame(appendWALFrame(nil, &fr))
		if err != nil || !reflect.DeepEqual(again, fr) {
			t.Fatalf("re-encoded frame: %v\n got %+v\nwant %+v", err, again, fr)
		}
	})
}

// typicalFrame is the frame a create in a listed directory writes: the
// new file's record and its directory's changed name.
func typicalFrame() *walFrame {
	return &walFrame{NextIno: 12345, Seq: 678, Recs: []walRec{
		{Kind: walFull, Inode: snapInode{Num: 12344, Mode: 0o100644, UID: 1000, GID: 1000, Atime: 1764900000000000000,
			Mtime: 1764900000000000000, Ctime: 1764900000000000000, Upper: true, Seq: 678, LinkSeq: 678, Writers: []uint32{1}, WriterSince: 1764900000000000000}},
		{Kind: walNames, Inode: snapInode{Num: 77, Mode: 0o40755, Atime: 1764900000000000000, Mtime: 1764900000000000000,
			Ctime: 1764900000000000000, HasLower: true, Lower: store.Entry{Name: "dir", Kind: store.KindDir, ID: store.ID{1, 2, 3}},
			Seq: 600, SubSeq: 678, Writers: []uint32{1}, WriterSince: 1764900000000000000}, Names: []snapChild{{Name: "zversion.go", Num: 12344}}},
	}}
}

// BenchmarkWALFrameEncode: the per-request cost of a log frame, the
// hand-written codec against gob (one encoder per log, as version 2).
func BenchmarkWALFrameEncode(b *testing.B) {
	f := typicalFrame()
	b.Run("v3", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = appendWALFrame(buf[:0], f)
		}
	})
	b.Run("gob", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		enc := gob.NewEncoder(&buf)
		for b.Loop() {
			buf.Reset()
			if err := enc.Encode(f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
