package test

import (
	"path/filepath"
	"testing"
)

// TestCoherentTailThroughMount: a shell holds a workspace file open on a
// descriptor and reads it to the end, as tail -f does; lines appended
// through other descriptors show through the first one (before, it kept
// reading the stored content: EOF at the old size).
func TestCoherentTailThroughMount(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"log.txt": "a\n"})
	e.ok("create", "main", "--from", src)
	mp := e.mountAt("main")
	got := inSession(t, mp, `exec 3< log.txt
cat <&3
printf 'b\n' >> log.txt
cat <&3
printf 'c\n' >> log.txt
cat <&3`)
	if want := "a\nb\nc\n"; got != want {
		t.Fatalf("reads through the first descriptor: %q, want %q", got, want)
	}
	if o, _ := e.unmount(mp); o != "current" && o != "rebased" {
		t.Fatalf("unmount: %q", o)
	}
}
