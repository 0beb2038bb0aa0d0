package sessions

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSplitCmdline(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		cut  bool
	}{
		{"", nil, false},
		{"sh\x00-c\x00echo > a\x00", []string{"sh", "-c", "echo > a"}, false},
		{"cp\x00\x00b\x00", []string{"cp", "", "b"}, false}, // an empty argument stays
		{"no-nul", []string{"no-nul"}, false},
		{strings.Repeat("x", MaxArgvBytes+5), []string{strings.Repeat("x", MaxArgvBytes)}, true},
	} {
		got, cut := splitCmdline([]byte(c.in))
		if !slices.Equal(got, c.want) || cut != c.cut {
			t.Errorf("splitCmdline(%q) = %q, %v; want %q, %v", c.in, got, cut, c.want, c.cut)
		}
	}
}

// The command line is read once, when the tracker first resolves a pid,
// and kept after the process is gone until PruneProcs.
func TestProcInfoReadOnceKeptUntilPruned(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(42, 42, 42)
	dir := filepath.Join(fp.root, "42")
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("comm", "sh\n")
	write("cmdline", "sh\x00-c\x00echo > a\x00")
	tr := newTestTracker(t, fp, newRecorder(), nil)
	if err := tr.Admit(42); err != nil {
		t.Fatal(err)
	}
	write("cmdline", "changed\x00") // read once: a later change is not seen
	if err := tr.Admit(42); err != nil {
		t.Fatal(err)
	}
	pi, ok := tr.Proc(42)
	if !ok || pi.Comm != "sh" || !slices.Equal(pi.Argv, []string{"sh", "-c", "echo > a"}) || pi.Owner != "sid:42" {
		t.Fatalf("Proc(42) = %+v, %v", pi, ok)
	}
	fp.remove(42)
	tr.Sweep() // the process is gone: its lease ends, its pid is dropped
	if _, ok := tr.Proc(42); !ok {
		t.Fatal("Proc(42) forgotten by a sweep; want it kept until PruneProcs")
	}
	tr.PruneProcs()
	if _, ok := tr.Proc(42); ok {
		t.Fatal("Proc(42) kept after PruneProcs of a gone process")
	}
}

// An exec (a changed command name) is noticed by ExecGen: the pid's next
// exec generation describes the new program, the old one stays as it was.
func TestExecGenNoticesExec(t *testing.T) {
	fp := newFakeProc(t)
	fp.add(42, 42, 42)
	dir := filepath.Join(fp.root, "42")
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("comm", "sh\n")
	write("cmdline", "sh\x00-c\x00exec cp a b\x00")
	tr := newTestTracker(t, fp, newRecorder(), nil)
	if g := tr.ExecGen(42); g != 0 {
		t.Fatalf("ExecGen of an unknown pid = %d", g)
	}
	mustAdmit(t, tr, 42)
	if g := tr.ExecGen(42); g != 0 {
		t.Fatalf("ExecGen before any exec = %d", g)
	}
	write("cmdline", "sh\x00changed\x00") // same program name: no exec noticed
	if g := tr.ExecGen(42); g != 0 {
		t.Fatalf("ExecGen with the same comm = %d", g)
	}
	write("comm", "cp\n")
	write("cmdline", "cp\x00a\x00b\x00")
	if g := tr.ExecGen(42); g != 1 {
		t.Fatalf("ExecGen after an exec = %d, want 1", g)
	}
	if g := tr.ExecGen(42); g != 1 {
		t.Fatalf("ExecGen asked again = %d, want 1", g)
	}
	p0, ok0 := tr.ProcExec(42, 0)
	p1, ok1 := tr.ProcExec(42, 1)
	last, _ := tr.Proc(42)
	if !ok0 || !ok1 || p0.Comm != "sh" || !slices.Equal(p0.Argv, []string{"sh", "-c", "exec cp a b"}) ||
		p1.Comm != "cp" || !slices.Equal(p1.Argv, []string{"cp", "a", "b"}) || p1.Owner != "sid:42" || last.Comm != "cp" {
		t.Fatalf("ProcExec(42, 0) = %+v; ProcExec(42, 1) = %+v; Proc(42) = %+v", p0, p1, last)
	}
	if p, _ := tr.ProcExec(42, 9); p.Comm != "cp" {
		t.Fatalf("ProcExec past the last generation = %+v", p)
	}
}

func FuzzSplitCmdline(f *testing.F) {
	f.Add([]byte("sh\x00-c\x00echo > a\x00"))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0}, MaxArgvBytes+2))
	f.Fuzz(func(t *testing.T, b []byte) {
		argv, cut := splitCmdline(b)
		n := 0
		for _, a := range argv {
			if strings.IndexByte(a, 0) >= 0 {
				t.Fatalf("argument %q holds a NUL", a)
			}
			n += len(a) + 1
		}
		if n > MaxArgvBytes+1 {
			t.Fatalf("kept %d bytes, bound %d", n, MaxArgvBytes)
		}
		if cut != (len(b) > MaxArgvBytes) {
			t.Fatalf("truncated = %v for %d bytes", cut, len(b))
		}
	})
}

// BenchmarkExecGen is what the mount pays per change of an inode to
// notice an exec: one pread of the caller's /proc/PID/comm.
func BenchmarkExecGen(b *testing.B) {
	tr, err := New(Config{Handler: newRecorder(), SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	pid := uint32(os.Getpid())
	if err := tr.Admit(pid); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if g := tr.ExecGen(pid); g != 0 {
			b.Fatalf("ExecGen = %d without an exec", g)
		}
	}
}
