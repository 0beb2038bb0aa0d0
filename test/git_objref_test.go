package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGitObjectRefs: a workspace created from git holds its files as
// references to the repository's objects, read on demand: through a
// mount, cat, export and a fork landed back they read as the commit's
// content; gc keeps them and fsck is clean; when the repository loses an
// object (its branch deleted, gc'd), reading that file fails with a clear
// error and every other file still reads.
func TestGitObjectRefs(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo := threeBranches(t, e)
	e.ok("create", "m", "--from-git", repo)
	e.ok("gc")
	e.fsck()

	mp := e.mountAt("m")
	for p, want := range map[string]string{"README": "hello, main\n", "src/a.go": "package a\n", "src/deep/b.txt": "b\n", "run.sh": "#!/bin/sh\necho run\n"} {
		if got := readFile(t, filepath.Join(mp, p)); got != want {
			t.Fatalf("%s in the mount: %q, want %q", p, got, want)
		}
	}
	if l, err := os.Readlink(filepath.Join(mp, "link")); err != nil || l != "src/a.go" {
		t.Fatalf("link in the mount: %q %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(mp, "run.sh")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("run.sh in the mount: %v %v", fi, err)
	}
	e.unmount(mp)
	if got := e.run("cat", "m", "src/deep/b.txt").stdout; got != "b\n" {
		t.Fatalf("cat: %q", got)
	}
	out := e.exportTo("m", "export-m")
	if got := readFile(t, filepath.Join(out, "src", "a.go")); got != "package a\n" {
		t.Fatalf("export: %q", got)
	}
	if got := git(t, out, "status", "--porcelain"); got != "" {
		t.Fatalf("git status in the export: %q", got)
	}

	// A fork changes one file and lands; the untouched references land as
	// they are and still read.
	e.ok("fork", "m", "f")
	mp = e.mountAt("f")
	e.execOK(mp, "echo forked >> src/a.go")
	e.unmount(mp)
	e.ok("land", "f")
	if got := e.run("cat", "m", "src/a.go").stdout; got != "package a\nforked\n" {
		t.Fatalf("landed change: %q", got)
	}
	if got := e.run("cat", "m", "README").stdout; got != "hello, main\n" {
		t.Fatalf("untouched file after land: %q", got)
	}
	if d := e.ok("diff", "m", "f"); strings.Contains(d, "README") {
		t.Fatalf("diff names an unchanged reference:\n%s", d)
	}
	e.ok("gc")
	e.fsck()

	// The repository loses the feature branch's only new blob.
	e.ok("create", "feat", "--from-git", repo+"@feature")
	oid := strings.TrimSpace(git(t, repo, "rev-parse", "feature:src/feature.go"))
	git(t, repo, "branch", "-D", "feature")
	git(t, repo, "reflog", "expire", "--expire=now", "--all")
	git(t, repo, "gc", "-q", "--prune=now")
	r := e.run("cat", "feat", "src/feature.go")
	if r.code == 0 || !strings.Contains(r.stderr, oid) || !strings.Contains(r.stderr, "missing") {
		t.Fatalf("cat of a file whose object the repository lost: %s", r)
	}
	if r := e.run("fsck"); r.code == 0 || !strings.Contains(r.stdout+r.stderr, "missing-git-object") || !strings.Contains(r.stdout+r.stderr, oid) {
		t.Fatalf("fsck after the repository lost an object: %s", r)
	}
	if got := e.run("cat", "feat", "README").stdout; got != "hello\n" {
		t.Fatalf("another file of that workspace: %q", got)
	}
	mp = e.mountAt("feat")
	if _, err := os.ReadFile(filepath.Join(mp, "src", "feature.go")); err == nil {
		t.Fatal("the mount read a file whose object the repository lost")
	}
	if got := readFile(t, filepath.Join(mp, "src", "a.go")); got != "package a\n" {
		t.Fatalf("another file in the mount: %q", got)
	}
	e.unmount(mp)
}
