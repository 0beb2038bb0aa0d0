package test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountedContextEnv creates workspaces app and lib and context main over
// both, each root with a mountpoint (existing directories) recorded.
func mountedContextEnv(t *testing.T) (e *env, mpApp, mpLib string) {
	t.Helper()
	e = newMountEnv(t)
	for _, ws := range []string{"app", "lib"} {
		src := filepath.Join(e.dir, "src-"+ws)
		writeTree(t, src, map[string]string{"f": ws + " 1\n"})
		e.ok("create", ws, "--from", src)
	}
	mpApp, mpLib = filepath.Join(e.dir, "mnt-app"), filepath.Join(e.dir, "mnt-lib")
	for _, mp := range []string{mpApp, mpLib} {
		if err := os.MkdirAll(mp, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.ok("context", "create", "main", "--root", "app="+mpApp, "--root", "lib="+mpLib)
	return e, mpApp, mpLib
}

// isMountpoint reports whether mp is a FUSE mountpoint now.
func isMountpoint(mp string) bool { return slices.Contains(fuseMounts(), mp) }

// wantErrno checks that err is the errno want.
func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// contextUnmount runs context unmount and waits for the on-demand daemon
// to exit once nothing of the env is mounted any more.
func (e *env) contextUnmount(ctx string) result {
	e.t.Helper()
	pid := e.daemonPID()
	r := e.run("context", "unmount", ctx)
	if r.code != 0 {
		e.t.Fatalf("context unmount %s: %s", ctx, r)
	}
	if !slices.ContainsFunc(fuseMounts(), func(m string) bool { return strings.HasPrefix(m, e.dir+"/") }) {
		if err := waitGone(pid, 10*time.Second); err != nil {
			e.t.Fatalf("the daemon did not exit after the last unmount: %v", err)
		}
	}
	return r
}

// waitNoDaemon waits for a daemon started on demand by a command that
// mounted nothing to exit (a command sent while it exits may fail).
func (e *env) waitNoDaemon() {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.store, "daemon.pid"))
	if err != nil {
		return
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
		if err := waitGone(pid, 10*time.Second); err != nil {
			e.t.Fatalf("the on-demand daemon did not exit: %v", err)
		}
	}
}

// TestContextMountFreezeReadOnly mounts a two-root context, writes in both
// roots, freezes the context and checks that the mounted roots refuse
// writes with EROFS while reads work, that an open lease finishes (and
// publishes what was written before the freeze), that no new lease opens,
// and that a later mount of a frozen root is read-only.
func TestContextMountFreezeReadOnly(t *testing.T) {
	e, mpApp, mpLib := mountedContextEnv(t)
	r := e.run("context", "mount", "main", "--wait-warm")
	if r.code != 0 {
		t.Fatalf("context mount: %s", r)
	}
	for _, ws := range []string{"app", "lib"} {
		if st := e.statusOf(ws); st.Warming || st.Warmed == 0 {
			t.Fatalf("%s right after context mount --wait-warm: warmed %d, warming %v", ws, st.Warmed, st.Warming)
		}
	}
	if want := "app\t" + mpApp + "\nlib\t" + mpLib + "\n"; r.stdout != want {
		t.Fatalf("context mount printed %q, want %q", r.stdout, want)
	}
	for _, mp := range []string{mpApp, mpLib} {
		if !isMountpoint(mp) {
			t.Fatalf("%s is not mounted", mp)
		}
	}
	// Each root has its own window: an open lease on app leaves lib idle.
	lease := e.ok("lease", "begin", mpApp, "--owner", "agent")
	inSession(t, mpApp, "echo A > new-app")
	inSession(t, mpLib, "echo L > new-lib")
	e.waitIdle("lib")
	// The shell's session lease on app ends when the mount's sweeper sees
	// its processes gone (app's own sweeper: lib's being idle says nothing
	// of it); the agent's stays.
	var st statusWS
	waitFor(t, 10*time.Second, "app's shell session lease to end", func() bool {
		st = e.statusOf("app")
		return len(st.Leases) == 1
	})
	if st.Leases[0].Owner != "agent" || st.Window != "active" {
		t.Fatalf("app's window: %+v, want only the agent's lease", st)
	}
	libHead := e.head("lib")
	appHead := e.head("app")

	if got := e.ok("context", "freeze", "main"); got != "main" {
		t.Fatalf("context freeze printed %q", got)
	}
	// This test process is a new tool session for both mounts: it gets no
	// lease, reads work and every change fails with EROFS.
	for _, mp := range []string{mpApp, mpLib} {
		p := func(s string) string { return filepath.Join(mp, s) }
		wantErrno(t, "create in "+mp, os.WriteFile(p("x"), []byte("x"), 0o644), syscall.EROFS)
		wantErrno(t, "mkdir in "+mp, os.Mkdir(p("d"), 0o755), syscall.EROFS)
		f, err := os.OpenFile(p("f"), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			f.Close()
		}
		wantErrno(t, "open for write in "+mp, err, syscall.EROFS)
		wantErrno(t, "unlink in "+mp, os.Remove(p("f")), syscall.EROFS)
		wantErrno(t, "rename in "+mp, os.Rename(p("f"), p("g")), syscall.EROFS)
		wantErrno(t, "chmod in "+mp, os.Chmod(p("f"), 0o600), syscall.EROFS)
		wantErrno(t, "symlink in "+mp, os.Symlink("f", p("l")), syscall.EROFS)
	}
	if got := readFile(t, filepath.Join(mpApp, "new-app")); got != "A\n" {
		t.Fatalf("read new-app: %q", got)
	}
	if got := readFile(t, filepath.Join(mpLib, "new-lib")); got != "L\n" {
		t.Fatalf("read new-lib: %q", got)
	}
	// A shell in a new session fails the same way (and pins nothing).
	if r, err := sessionRun(mpLib, "echo y > y"); err != nil || r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Fatalf("write from a new session after the freeze: %v %s", err, r)
	}
	// No new lease: explicit ones are refused, implicit ones are not opened.
	if r := e.fails(4, "lease", "begin", mpLib, "--owner", "late"); !strings.Contains(r.stderr, "frozen") {
		t.Fatalf("lease begin on a frozen root: %s", r.stderr)
	}
	if st := e.statusOf("lib"); len(st.Leases) != 0 || st.Window != "idle" {
		t.Fatalf("lib after the freeze: %+v, want an idle window", st)
	}
	if st := e.statusOf("app"); len(st.Leases) != 1 {
		t.Fatalf("app after the freeze: %+v, want only the agent's lease", st)
	}
	if got := e.head("lib"); got != libHead {
		t.Fatalf("lib moved after the freeze: %s, was %s", got, libHead)
	}
	// The lease open at the freeze finishes and publishes the write made
	// before the freeze.
	if o := e.ok("lease", "end", mpApp, lease); o != "current" {
		t.Fatalf("lease end: %q", o)
	}
	if got := e.head("app"); got == appHead {
		t.Fatal("app's final close published nothing")
	}

	r = e.contextUnmount("main")
	if r.stdout != "app\tcurrent\nlib\tcurrent\n" {
		t.Fatalf("context unmount printed %q", r.stdout)
	}
	for _, mp := range []string{mpApp, mpLib} {
		if isMountpoint(mp) {
			t.Fatalf("%s is still mounted", mp)
		}
	}
	if got := readFile(t, filepath.Join(e.exportTo("app", "out-app"), "new-app")); got != "A\n" {
		t.Fatalf("exported app/new-app: %q", got)
	}
	if got := readFile(t, filepath.Join(e.exportTo("lib", "out-lib"), "new-lib")); got != "L\n" {
		t.Fatalf("exported lib/new-lib: %q", got)
	}

	// A root of a frozen context mounts read-only, alone or as a context.
	mp := e.mountAt("app")
	wantErrno(t, "create in a frozen root's new mount", os.WriteFile(filepath.Join(mp, "x"), nil, 0o644), syscall.EROFS)
	e.unmount(mp)
	e.fails(2, "context", "mount", "main", "--transport", "ring") // a usage error mounts nothing
	if tr := e.statusOf("lib").Transport; tr != "" {
		t.Fatalf("after a refused context mount, lib reports transport %q", tr)
	}
	e.ok("context", "mount", "main", "--transport", "dev-fuse")
	if tr := e.statusOf("lib").Transport; tr != "dev-fuse" {
		t.Fatalf("context mount --transport dev-fuse: lib reports transport %q", tr)
	}
	wantErrno(t, "create after context mount of a frozen context", os.WriteFile(filepath.Join(mpLib, "x"), nil, 0o644), syscall.EROFS)
	if got := readFile(t, filepath.Join(mpLib, "f")); got != "lib 1\n" {
		t.Fatalf("read lib/f: %q", got)
	}
	e.contextUnmount("main")
	e.fsck()
}

// TestContextDiscardUnmountsMountedRoots discards a context whose roots
// are mounted: the idle root is unmounted at once, the one with an open
// lease once that lease ends (reconciled first).
func TestContextDiscardUnmountsMountedRoots(t *testing.T) {
	e, mpApp, mpLib := mountedContextEnv(t)
	e.ok("context", "mount", "main")
	pid := e.daemonPID()
	lease := e.ok("lease", "begin", mpLib, "--owner", "agent")
	inSession(t, mpLib, "echo L > new-lib")
	waitFor(t, 10*time.Second, "the shell's lease on lib to end", func() bool { return len(e.statusOf("lib").Leases) == 1 })
	r := e.run("context", "discard", "main")
	if r.code != 0 || r.stdout != "main\n" {
		t.Fatalf("context discard: %s", r)
	}
	if isMountpoint(mpApp) {
		t.Fatal("the idle root app is still mounted after the discard")
	}
	if !isMountpoint(mpLib) {
		t.Fatal("lib was unmounted although a lease is open")
	}
	wantErrno(t, "create in a discarded context's root", os.WriteFile(filepath.Join(mpLib, "x"), nil, 0o644), syscall.EROFS)
	if o := e.ok("lease", "end", mpLib, lease); o != "current" {
		t.Fatalf("lease end: %q", o)
	}
	waitFor(t, 10*time.Second, "lib to be unmounted after its window closed", func() bool { return !isMountpoint(mpLib) })
	if err := waitGone(pid, 10*time.Second); err != nil {
		t.Fatalf("the on-demand daemon did not exit after the last unmount: %v", err)
	}
	if got := readFile(t, filepath.Join(e.exportTo("lib", "out-lib"), "new-lib")); got != "L\n" {
		t.Fatalf("exported lib/new-lib: %q", got)
	}
	e.fails(2, "context", "mount", "main") // discarded
	e.waitNoDaemon()
	e.fsck()
}

// TestContextMountNeedsEveryMountpoint: a root without a recorded
// mountpoint fails the whole context mount (exit 2, naming it) before
// anything is mounted; a root that fails to mount unmounts the ones
// mounted before it.
func TestContextMountNeedsEveryMountpoint(t *testing.T) {
	e, mpApp, _ := mountedContextEnv(t)
	e.ok("context", "create", "half", "--root", "app="+mpApp, "--root", "lib")
	r := e.fails(2, "context", "mount", "half")
	if !strings.Contains(r.stderr, "without a mountpoint: lib") {
		t.Fatalf("context mount error: %s", r.stderr)
	}
	e.waitNoDaemon()
	if slices.ContainsFunc(fuseMounts(), func(m string) bool { return strings.HasPrefix(m, e.dir+"/") }) {
		t.Fatal("a context mount that failed left a mount")
	}
	// lib's mountpoint does not exist: app is mounted, then unmounted again.
	e.ok("context", "create", "broken", "--root", "app="+mpApp, "--root", "lib="+filepath.Join(e.dir, "missing"))
	r = e.fails(2, "context", "mount", "broken")
	if !strings.Contains(r.stderr, "mount lib at") || !strings.Contains(r.stderr, "unmounted again: app") {
		t.Fatalf("context mount error: %s", r.stderr)
	}
	if isMountpoint(mpApp) {
		t.Fatal("app stayed mounted after the context mount failed")
	}
	e.waitNoDaemon()
	if r := e.run("context", "unmount", "broken"); r.code != 0 || r.stdout != "" {
		t.Fatalf("context unmount with nothing mounted: %s", r)
	}
	e.fsck()
}
