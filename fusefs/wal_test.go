package fusefs

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// walBytes builds a log file for nonce holding frames, as a mount writes
// it (version 3).
func walBytes(t testing.TB, nonce uint64, frames ...walFrame) []byte {
	t.Helper()
	out := binary.LittleEndian.AppendUint64([]byte(walMagic), nonce)
	out = append(out, make([]byte, 32)...) // the zero root
	for i := range frames {
		b := appendWALFrame(nil, &frames[i])
		out = binary.LittleEndian.AppendUint32(out, uint32(len(b)))
		out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(b, crcTable()))
		out = append(out, b...)
	}
	return out
}

// walBytesGob builds a log file for nonce holding frames as main wrote
// them before version 3: gob frames from one encoder, under magic.
func walBytesGob(t testing.TB, magic string, nonce uint64, frames ...walFrame) []byte {
	t.Helper()
	out := binary.LittleEndian.AppendUint64([]byte(magic), nonce)
	out = append(out, make([]byte, 32)...) // the zero root
	var buf bytes.Buffer
	enc := gob.NewEncoder(&buf)
	for i := range frames {
		buf.Reset()
		if err := enc.Encode(&frames[i]); err != nil {
			t.Fatal(err)
		}
		out = binary.LittleEndian.AppendUint32(out, uint32(buf.Len()))
		out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(buf.Bytes(), crcTable()))
		out = append(out, buf.Bytes()...)
	}
	return out
}

// TestWALTornTail: a frame cut short or corrupted ends the log there; the
// frames before it apply, whole.
func TestWALTornTail(t *testing.T) {
	f1 := walFrame{NextIno: 5, Seq: 1, Recs: []walRec{{Kind: walFull, Inode: snapInode{Num: 2, Mode: 0o100644}}}}
	f2 := walFrame{NextIno: 6, Seq: 2, Recs: []walRec{{Kind: walFull, Inode: snapInode{Num: 3, Mode: 0o100644}}}}
	for _, magic := range []string{walMagicV2, walMagicV1} {
		b := walBytesGob(t, magic, 7, f1, f2)
		for cut := len(b) - 1; cut > len(walBytesGob(t, magic, 7, f1)); cut-- {
			if got, _ := decodeWAL(b[:cut], 7); len(got) != 1 || got[0].Seq != 1 {
				t.Fatalf("%s cut at %d: %d frames", magic, cut, len(got))
			}
		}
	}
	b := walBytes(t, 7, f1, f2)
	if got, _ := decodeWAL(b, 7); len(got) != 2 {
		t.Fatalf("whole log: %d frames", len(got))
	}
	if got, _ := decodeWAL(b, 8); len(got) != 0 {
		t.Fatalf("another snapshot's log: %d frames", len(got))
	}
	for cut := len(b) - 1; cut > len(walBytes(t, 7, f1)); cut-- {
		if got, _ := decodeWAL(b[:cut], 7); len(got) != 1 || got[0].Seq != 1 {
			t.Fatalf("cut at %d: %d frames", cut, len(got))
		}
	}
	bad := bytes.Clone(b)
	bad[len(bad)-1] ^= 1
	if got, _ := decodeWAL(bad, 7); len(got) != 1 {
		t.Fatalf("corrupt last frame: %d frames", len(got))
	}
}

// TestWALApplyRejectsInconsistentLog: records that do not fit the
// snapshot are an error (recovery then uses the snapshot alone).
func TestWALApplyRejectsInconsistentLog(t *testing.T) {
	base := func() *snapshot {
		return &snapshot{Version: snapVersion, NextIno: 3, Inodes: []snapInode{
			{Num: 1, Mode: 0o40755, Loaded: true, SubSeq: 1, Children: []snapChild{{Name: "a", Num: 2}}},
			{Num: 2, Mode: 0o100644},
		}}
	}
	for name, f := range map[string]walFrame{
		"unknown child":  {NextIno: 9, Recs: []walRec{{Kind: walNames, Inode: snapInode{Num: 1, Mode: 0o40755}, Names: []snapChild{{Name: "b", Num: 8}}}}},
		"sub unknown":    {NextIno: 9, Recs: []walRec{{Kind: walSub, Inode: snapInode{Num: 5}}}},
		"names unlisted": {NextIno: 9, Recs: []walRec{{Kind: walNames, Inode: snapInode{Num: 2}}}},
		"bad kind":       {NextIno: 9, Recs: []walRec{{Kind: 9, Inode: snapInode{Num: 2}}}},
	} {
		if err := base().applyWAL([]walFrame{f}); err == nil {
			t.Errorf("%s: applied", name)
		}
	}
	s := base()
	err := s.applyWAL([]walFrame{{NextIno: 4, Seq: 3, Recs: []walRec{
		{Kind: walFull, Inode: snapInode{Num: 3, Mode: 0o100644}},
		{Kind: walNames, Inode: snapInode{Num: 1, Mode: 0o40755, SubSeq: 3}, Names: []snapChild{{Name: "a", Num: 0}, {Name: "c", Num: 3}}},
	}}})
	if err != nil || len(s.Inodes) != 2 || s.Inodes[0].Children[0] != (snapChild{Name: "c", Num: 3}) || s.NextIno != 4 {
		t.Fatalf("rename by log: %v %+v", err, s.Inodes)
	}
}

// FuzzWAL: no log file bytes make decoding or applying panic.
func FuzzWAL(f *testing.F) {
	f.Add(walBytes(f, 1, walFrame{NextIno: 4, Recs: []walRec{
		{Kind: walFull, Inode: snapInode{Num: 3, Mode: 0o100644}},
		{Kind: walNames, Inode: snapInode{Num: 1, Mode: 0o40755}, Names: []snapChild{{Name: "c", Num: 3}}},
		{Kind: walSub, Inode: snapInode{Num: 1, SubSeq: 2}},
	}}))
	f.Add(walBytes(f, 1, walFrame{NextIno: 4, Recs: []walRec{
		{Kind: walFull, Inode: snapInode{Num: 3, Mode: 0o100644, Writers: []uint32{1, 2, 9}, WriterSince: 5}},
		{Kind: walNames, Inode: snapInode{Num: 1, Mode: 0o40755, Writers: []uint32{1}}, Names: []snapChild{{Name: "c", Num: 3}, {Name: "a", Num: 0}}},
	}, Writers: []WriterInfo{{Ref: WriterRef{PID: 9, Exec: 1}, Comm: "sh", Argv: []string{"sh", "-c", "rm a"}, Session: "sid:9", Lease: "L"}, {}},
		Removed: []walRemoved{{Path: "a", Writers: []uint32{1, 0, 7}, First: 1, Last: 2}, {Path: "gone"}}}))
	f.Add(walBytesGob(f, walMagicV2, 1, walFrame{NextIno: 4, Recs: []walRec{
		{Kind: walFull, Inode: snapInode{Num: 3, Mode: 0o100644}},
		{Kind: walNames, Inode: snapInode{Num: 1, Mode: 0o40755}, Names: []snapChild{{Name: "c", Num: 3}}},
	}}))
	f.Add([]byte(walMagic))
	f.Add([]byte(walMagicV2))
	f.Add([]byte(walMagicV1))
	f.Fuzz(func(t *testing.T, b []byte) {
		frames, _ := decodeWAL(b, 1)
		s := &snapshot{Version: snapVersion, NextIno: 3, Inodes: []snapInode{
			{Num: 1, Mode: 0o40755, Loaded: true, SubSeq: 1, Children: []snapChild{{Name: "a", Num: 2}}},
			{Num: 2, Mode: 0o100644},
		}}
		if s.applyWAL(frames) == nil {
			if o, err := s.build(newFakeObjects(t), t.TempDir()); err == nil {
				var ws []PathWriters
				o.takeWriters(o.root, "", &ws)
				for _, w := range ws {
					_ = o.describeRecovered(w.Writers)
				}
			}
		}
	})
}

// TestLogWriteFailureFreesSpace: when the log cannot be written (a full
// disk: writes to /dev/full fail with ENOSPC), an unlink still deletes the
// upper file at once, so rm gives the space back; the next change tries a
// snapshot instead of a frame.
func TestLogWriteFailureFreesSpace(t *testing.T) {
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, spec{"a": "lower"}), nil)
	p := filepath.Join(mnt, "big")
	mustWrite(t, p, strings.Repeat("x", 1<<20))
	waitReleased(m)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	m.ov.walMu.Lock()
	m.ov.walLog.f.Close()
	m.ov.walLog.f = full
	m.ov.walMu.Unlock()
	m.ov.mu.Lock()
	num := m.ov.root.children["big"].num
	m.ov.mu.Unlock()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	waitReleased(m)
	for _, f := range []string{m.ov.upperPath(num), m.ov.trashPath(num)} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s still there after rm with the log failing: %v", f, err)
		}
	}
	m.ov.mu.Lock()
	ok := m.ov.walLog.ok
	m.ov.mu.Unlock()
	if ok {
		t.Error("log still taken as writable after a failed frame")
	}
	mustWrite(t, filepath.Join(mnt, "after"), "after") // the next change writes a snapshot
	if _, err := os.Stat(filepath.Join(m.cfg.StateDir, snapName)); err != nil {
		t.Errorf("no snapshot after the log failed: %v", err)
	}
}

// TestUnlinkedNewFileRetiredInPlace: the upper file of a new file that
// only the log names is deleted where it is once the frame recording its
// removal is written (no rename into the trash); until that frame, a
// crash's recovery still finds it and keeps the file.
func TestUnlinkedNewFileRetiredInPlace(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"keep": "k"})
	state := t.TempDir()
	m, mnt := mountT(t, objs, root, &mountOpts{stateDir: state})
	mustWrite(t, filepath.Join(mnt, "new"), "new content")
	waitReleased(m)
	ov := m.ov
	ov.mu.Lock()
	ch, err := ov.children(ov.root)
	if err != nil {
		ov.mu.Unlock()
		t.Fatal(err)
	}
	c := ch["new"]
	num := c.num
	if !c.upper || !ov.wal.named[num] || ov.named == nil || ov.named[num] {
		ov.mu.Unlock()
		t.Fatalf("new file: upper %v, named by the log %v, by the snapshot %v", c.upper, ov.wal.named[num], ov.named[num])
	}
	// As Unlink does, without its flush: the frame is not written yet.
	before := ov.walMarks.Load()
	ov.removeLink(ov.root, "new", c)
	ov.mu.Unlock()
	if _, err := os.Stat(ov.upperPath(num)); err != nil {
		t.Fatalf("upper file before the frame: %v", err)
	}
	if _, err := os.Stat(ov.trashPath(num)); err == nil {
		t.Fatal("upper file renamed into the trash")
	}
	// A crash now: the log does not record the removal, and the file's
	// content is still there for its replay.
	crashed := copyState(t, state)
	objs2 := newFakeObjectsAt(objs.dir)
	rid, _, err := RecoverCapture(crashed, objs2, root)
	if err != nil {
		t.Fatalf("recover before the frame: %v", err)
	}
	if got := objs2.flatten(t, rid); got["new"] != "file:new content" {
		t.Fatalf("recovered before the frame: %v", got)
	}
	if err := ov.walFlush(&m.snapMu, before); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ov.upperPath(num)); err == nil {
		t.Fatal("upper file left after the frame")
	}
}
