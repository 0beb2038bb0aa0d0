package sessions

import (
	"errors"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	cases := []struct {
		name string
		line string
		want statInfo
	}{
		{"plain", statLine(4242, "bash", 4242, 4200, 99887766), statInfo{4242, 4242, 4200, 99887766, 1}},
		{"spaces and parens in comm", statLine(7, "a) (b c) S 1 2 3", 8, 9, 10), statInfo{7, 8, 9, 10, 1}},
		{"empty comm", statLine(1, "", 1, 1, 1), statInfo{1, 1, 1, 1, 1}},
		{"no trailing newline", strings.TrimSuffix(statLine(5, "x", 6, 7, 8), "\n"), statInfo{5, 6, 7, 8, 1}},
		{"negative sid", statLine(2, "k", 0, -1, 3), statInfo{2, 0, -1, 3, 1}},
	}
	for _, c := range cases {
		got, err := parseStat([]byte(c.line))
		if err != nil || got != c.want {
			t.Errorf("%s: parseStat = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	bad := []string{
		"",
		"1 (x S 1 2 3",
		"1 x) S 1 2 3",
		"abc (x) S 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
		"1 (x) S 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0", // no starttime
		"1 (x) S 1 two 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
		"1 (x) S 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99999999999999999999999",
		"1 (x) S 1 2 99999999999 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
	}
	for _, b := range bad {
		if _, err := parseStat([]byte(b)); !errors.Is(err, ErrBadStat) {
			t.Errorf("parseStat(%q) = %v, want ErrBadStat", b, err)
		}
	}
}

func TestOwnerOfFakeTree(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(10, 11, 12)
	fp.add(13, 11, 12)
	fp.thread(13, 10)
	for _, c := range []struct {
		pid  int
		by   By
		want Owner
	}{
		{10, BySID, "sid:12"}, {10, ByPGID, "pgid:11"}, {10, ByPID, "pid:10"}, {13, ByPID, "pid:10"},
	} {
		got, err := OwnerOf(fp.root, c.pid, c.by)
		if err != nil || got != c.want {
			t.Errorf("OwnerOf(%d, %v) = %q, %v; want %q", c.pid, c.by, got, err, c.want)
		}
	}
	if _, err := OwnerOf(fp.root, 99, BySID); !errors.Is(err, ErrNoProcess) {
		t.Errorf("OwnerOf(missing) = %v, want ErrNoProcess", err)
	}
	if _, err := OwnerOf(fp.root, 10, By(9)); !errors.Is(err, ErrInvalidLeaseBy) {
		t.Errorf("OwnerOf(bad by) = %v", err)
	}
}

// FuzzParseStat checks that parseStat never panics on arbitrary input, and
// that a well-formed line round-trips whatever the comm contains (spaces,
// ") (", fake field lists, newlines).
func FuzzParseStat(f *testing.F) {
	f.Add("bash", int32(10), int32(11), uint64(12), []byte("1 (x) S"))
	f.Add(") (", int32(1), int32(1), uint64(0), []byte("1 () S 1 2 3"))
	f.Add("a) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 (", int32(-1), int32(0), uint64(1<<63), []byte(""))
	f.Add("x\ny) (z", int32(7), int32(8), uint64(9), []byte(")))((("))
	f.Add("tool) (x y", int32(2147483647), int32(-2147483648), uint64(18446744073709551615), []byte("9 (t) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"))
	f.Fuzz(func(t *testing.T, comm string, pgid, sid int32, start uint64, raw []byte) {
		_, _ = parseStat(raw)
		line := statLine(321, comm, int(pgid), int(sid), start)
		got, err := parseStat([]byte(line))
		if err != nil {
			t.Fatalf("parseStat(%q): %v", line, err)
		}
		want := statInfo{321, int(pgid), int(sid), start, 1}
		if got != want {
			t.Fatalf("parseStat(%q) = %+v, want %+v", line, got, want)
		}
	})
}
