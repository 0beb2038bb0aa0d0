package gitrepo

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestBlobReader: one process serves many reads; a missing object is
// ErrMissingObject and the next read still works; a wrong size or a name
// that is not the content's fails and the reader starts afresh; Missing
// names exactly the absent objects.
func TestBlobReader(t *testing.T) {
	needGit(t)
	dir := newRepo(t)
	ctx := context.Background()
	r, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	oid := func(rev string) string { return strings.TrimSpace(run(t, dir, "rev-parse", rev)) }
	a, b := oid("HEAD:a.txt"), oid("HEAD:d/b.go")
	const absent = "0123456789012345678901234567890123456789"
	rd := r.NewBlobReader()
	defer rd.Close()
	for range 2 {
		if got, err := rd.Read(a, int64(len("alpha\n"))); err != nil || string(got) != "alpha\n" {
			t.Fatalf("read a.txt: %q %v", got, err)
		}
		if _, err := rd.Read(absent, 1); !errors.Is(err, ErrMissingObject) {
			t.Fatalf("read of an absent object: %v", err)
		}
		if got, err := rd.Read(b, int64(len("package b\n"))); err != nil || string(got) != "package b\n" {
			t.Fatalf("read d/b.go: %q %v", got, err)
		}
		if _, err := rd.Read(a, 5); err == nil || errors.Is(err, ErrMissingObject) {
			t.Fatalf("read with a wrong size: %v", err)
		}
	}
	tree := oid("HEAD^{tree}")
	if _, err := rd.Read(tree, 1); err == nil {
		t.Fatal("a tree read as a blob")
	}
	if got, err := rd.Read(a, int64(len("alpha\n"))); err != nil || string(got) != "alpha\n" {
		t.Fatalf("read after failures: %q %v", got, err)
	}
	missing, err := r.Missing(ctx, []string{a, absent, b})
	if err != nil || len(missing) != 1 || missing[0] != absent {
		t.Fatalf("Missing: %v %v", missing, err)
	}
}
