package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// requestCount counts the requests of kind op the daemon logged (mount
// --debug) after byte offset off of its log.
func (e *env) requestCount(off int64, op string) int {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.store, "daemon.log"))
	if err != nil {
		e.t.Fatal(err)
	}
	return len(regexp.MustCompile(`rx \d+: `+op+` `).FindAll(b[off:], -1))
}

func (e *env) logSize() int64 {
	e.t.Helper()
	st, err := os.Stat(filepath.Join(e.store, "daemon.log"))
	if err != nil {
		e.t.Fatal(err)
	}
	return st.Size()
}

// TestMountWarmUp: after a mount the daemon lists the view in the
// background (mount --warm-entries); mount --wait-warm returns once it is
// done (status says so at once), stat of every path in a tool session then
// sends no LOOKUP, and the warm-up opened no lease. Without it
// (--warm-entries 0, where --wait-warm returns at once) the same listing
// sends one LOOKUP per name. A negative limit is a usage error.
func TestMountWarmUp(t *testing.T) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	files := map[string]string{"top.txt": "t\n"}
	for d := range 30 {
		for f := range 10 {
			files[fmt.Sprintf("d%02d/sub/f%d.go", d, f)] = fmt.Sprintf("package p%d\n", f)
		}
	}
	writeTree(t, src, files)
	// The paths to stat, without listing any directory first (as git
	// status stats what its index names): a listing would fetch the
	// entries with READDIRPLUS in either case.
	var list []byte
	for p := range files {
		list = append(list, p+"\n"...)
	}
	listFile := filepath.Join(e.dir, "paths")
	if err := os.WriteFile(listFile, list, 0o644); err != nil {
		t.Fatal(err)
	}
	statAll := "xargs stat -c %s <" + listFile + " >/dev/null"
	names := int64(1 + 30*(1+1+10)) // top.txt; per dNN: itself, sub, 10 files
	e.ok("create", "base", "--from", src)
	e.ok("fork", "base", "w")
	e.ok("fork", "base", "cold")

	mp := e.mountAt("w", "--debug", "--wait-warm")
	st := e.statusOf("w")
	if st.Warming || st.Warmed != names {
		t.Fatalf("right after mount --wait-warm: warmed %d names (warming %v), want %d done", st.Warmed, st.Warming, names)
	}
	if len(st.Leases) != 0 || st.Window != "idle" {
		t.Fatalf("after the warm-up: window %s, leases %v (the warm-up must open none)", st.Window, st.Leases)
	}
	off := e.logSize()
	e.execOK(mp, statAll)
	if n := e.requestCount(off, "LOOKUP"); n != 0 {
		t.Fatalf("stat of every file after the warm-up sent %d LOOKUPs, want 0", n)
	}

	cold := e.mountAt("cold", "--debug", "--warm-entries", "0", "--wait-warm")
	if st := e.statusOf("cold"); st.Warmed != 0 || st.Warming {
		t.Fatalf("--warm-entries 0: warmed %d, warming %v", st.Warmed, st.Warming)
	}
	off = e.logSize()
	e.execOK(cold, statAll)
	if n := e.requestCount(off, "LOOKUP"); n < len(files) {
		t.Fatalf("stat of every file without a warm-up sent %d LOOKUPs, want at least %d", n, len(files))
	}
	e.unmount(cold)

	r := e.fails(2, "mount", "cold", filepath.Join(e.dir, "mnt-cold"), "--warm-entries", "-1")
	if r.stderr == "" {
		t.Fatal("no error message for --warm-entries -1")
	}
	e.unmount(mp)
}
