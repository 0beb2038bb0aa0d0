package workspace

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// commitFiles commits ws's head with files changed, through an export.
func commitFiles(t *testing.T, m *Manager, ws string, files map[string]string) {
	t.Helper()
	w, err := m.Get(ws)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "x")
	if _, err := m.Export(context.Background(), w.Head, dir, false); err != nil {
		t.Fatal(err)
	}
	write(t, dir, files)
	if _, _, err := m.Commit(context.Background(), ws, dir); err != nil {
		t.Fatal(err)
	}
}

func readAt(t *testing.T, m *Manager, ws, p string) string {
	t.Helper()
	e, err := m.CatEntry(ws, [32]byte{}, p, SideNone)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.st.ReadBlob(e.ID)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A fork of a conflicted workspace lands back what it inherited untouched,
// even after both moved on; a change to the inherited stand-in is refused.
func TestInheritedConflictsLand(t *testing.T) {
	m := openTest(t)
	src := filepath.Join(t.TempDir(), "src")
	write(t, src, map[string]string{"f": "base\n", "g": "g\n"})
	if _, _, err := m.Create(context.Background(), "main", src); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Fork("main", "p", ""); err != nil {
		t.Fatal(err)
	}
	commitFiles(t, m, "p", map[string]string{"f": "p\n"})
	commitFiles(t, m, "main", map[string]string{"f": "main\n"})
	if res, err := m.Rebase(context.Background(), "p", RebaseOptions{}); err != nil || res.Outcome != OutcomeConflicted {
		t.Fatalf("rebase p: %v %+v", err, res)
	}
	if _, err := m.Fork("p", "c", ""); err != nil {
		t.Fatal(err)
	}
	commitFiles(t, m, "p", map[string]string{"h": "from p\n"})
	commitFiles(t, m, "c", map[string]string{"g": "from c\n"})
	res, err := m.Land(context.Background(), "c", RebaseOptions{})
	if err != nil || res.Outcome == OutcomeConflicted {
		t.Fatalf("land of a fork that only inherited p's conflict: %v %+v", err, res)
	}
	if got := readAt(t, m, "p", "g"); got != "from c\n" {
		t.Fatalf("p's g after the land: %q", got)
	}
	// Now the fork changes the stand-in: that is new, and refused.
	if _, err := m.Fork("p", "c2", ""); err != nil {
		t.Fatal(err)
	}
	commitFiles(t, m, "c2", map[string]string{"f": "edited stand-in\n"})
	pHead, _ := m.Get("p")
	if res, err := m.Land(context.Background(), "c2", RebaseOptions{}); err != nil || res.Outcome != OutcomeConflicted {
		t.Fatalf("land of a changed stand-in: %v %+v", err, res)
	}
	if now, _ := m.Get("p"); now.Head != pHead.Head {
		t.Fatal("a refused land moved the parent")
	}
}

// Resolve takes each side, refuses markers unless forced, and rejects
// paths that are not recorded conflicts.
func TestResolveSides(t *testing.T) {
	m := openTest(t)
	src := filepath.Join(t.TempDir(), "src")
	write(t, src, map[string]string{"a": "1\n2\n3\n", "b": "base\n", "c": "base\n", "d": "base\n"})
	if _, _, err := m.Create(context.Background(), "main", src); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Fork("main", "w", ""); err != nil {
		t.Fatal(err)
	}
	commitFiles(t, m, "w", map[string]string{"a": "1\nours\n3\n", "b": "ours\n", "c": "ours\n", "d": "ours\n"})
	commitFiles(t, m, "main", map[string]string{"a": "1\ntheirs\n3\n", "b": "theirs\n", "c": "theirs\n", "d": "theirs\n"})
	if res, err := m.Rebase(context.Background(), "w", RebaseOptions{Markers: true}); err != nil || len(res.Conflicts) != 4 {
		t.Fatalf("rebase --markers: %v %+v", err, res)
	}
	if _, err := m.Resolve("w", []string{"a"}, ResolveOptions{}); !errors.Is(err, ErrUnresolved) {
		t.Fatalf("resolve of a marked file as it is: %v", err)
	}
	if _, err := m.Resolve("w", []string{"nope"}, ResolveOptions{Side: ResolveOurs}); !errors.Is(err, ErrNoConflicts) {
		t.Fatalf("resolve of a path without a conflict: %v", err)
	}
	if _, err := m.Resolve("w", []string{"../a"}, ResolveOptions{Side: ResolveOurs}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("resolve of ../a: %v", err)
	}
	for p, side := range map[string]ResolveSide{"b": ResolveOurs, "c": ResolveTheirs, "d": ResolveBase} {
		if _, err := m.Resolve("w", []string{p}, ResolveOptions{Side: side}); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]string{"b": "ours\n", "c": "theirs\n", "d": "base\n"} {
		if got := readAt(t, m, "w", p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	res, err := m.Resolve("w", []string{"./a"}, ResolveOptions{Force: true})
	if err != nil || len(res.Remaining) != 0 {
		t.Fatalf("resolve --force: %v %+v", err, res)
	}
	if !HasConflictMarkers([]byte(readAt(t, m, "w", "a"))) {
		t.Fatal("--force should keep the marked file as it is")
	}
	if _, err := m.Resolve("w", nil, ResolveOptions{All: true, Side: ResolveOurs}); !errors.Is(err, ErrNoConflicts) {
		t.Fatalf("resolve --all without conflicts: %v", err)
	}
}
