package workspace

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

func linkIn(t *testing.T, dir, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, to)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
		t.Fatal(err)
	}
}

func headLinks(t *testing.T, m *Manager, ws string) [][]string {
	t.Helper()
	w, err := m.Get(ws)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.LinksOf(w.Head)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLinkGroupsThroughCommitRebaseLand: imports record hard links; a
// rebase keeps a group both sides keep and one the child made, drops one
// the parent broke; a land gives the parent the child's groups.
func TestLinkGroupsThroughCommitRebaseLand(t *testing.T) {
	m := openTest(t)
	src := t.TempDir()
	write(t, src, map[string]string{"a": "A", "k": "K", "other": "o", "x": "X"})
	linkIn(t, src, "a", "d/b")
	linkIn(t, src, "k", "d/k2")
	if _, _, err := m.Create(context.Background(), "main", src); err != nil {
		t.Fatal(err)
	}
	if got, want := headLinks(t, m, "main"), [][]string{{"a", "d/b"}, {"d/k2", "k"}}; !store.EqualLinks(got, want) {
		t.Fatalf("import: links %v, want %v", got, want)
	}
	if _, err := m.Fork("main", "c", ""); err != nil {
		t.Fatal(err)
	}
	// The child keeps both groups, makes a new one and edits x.
	c := t.TempDir()
	write(t, c, map[string]string{"a": "A", "k": "K", "other": "o", "x": "child", "n": "N"})
	linkIn(t, c, "a", "d/b")
	linkIn(t, c, "k", "d/k2")
	linkIn(t, c, "n", "e/n2")
	if _, _, err := m.Commit(context.Background(), "c", c); err != nil {
		t.Fatal(err)
	}
	// The parent changes another file and splits k from d/k2.
	p := t.TempDir()
	write(t, p, map[string]string{"a": "A", "k": "K", "d/k2": "K", "other": "parent", "x": "X"})
	linkIn(t, p, "a", "d/b")
	if _, _, err := m.Commit(context.Background(), "main", p); err != nil {
		t.Fatal(err)
	}
	if got, want := headLinks(t, m, "main"), [][]string{{"a", "d/b"}}; !store.EqualLinks(got, want) {
		t.Fatalf("parent: links %v, want %v", got, want)
	}
	r, err := m.Rebase(context.Background(), "c", RebaseOptions{})
	if err != nil || r.Outcome != OutcomeRebased {
		t.Fatalf("rebase: %+v %v", r, err)
	}
	if got, want := headLinks(t, m, "c"), [][]string{{"a", "d/b"}, {"e/n2", "n"}}; !store.EqualLinks(got, want) {
		t.Fatalf("rebased: links %v, want %v", got, want)
	}
	if _, err := m.Land(context.Background(), "c", RebaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := headLinks(t, m, "main"), [][]string{{"a", "d/b"}, {"e/n2", "n"}}; !store.EqualLinks(got, want) {
		t.Fatalf("landed: links %v, want %v", got, want)
	}
	// An export makes them one file again.
	out := filepath.Join(t.TempDir(), "out")
	w, _ := m.Get("main")
	if _, err := m.Export(context.Background(), w.Head, out, false); err != nil {
		t.Fatal(err)
	}
	a, err1 := os.Stat(filepath.Join(out, "e/n2"))
	b, err2 := os.Stat(filepath.Join(out, "n"))
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		t.Fatalf("export: e/n2 and n are not one file (%v %v)", err1, err2)
	}
	if k, k2 := filepath.Join(out, "k"), filepath.Join(out, "d/k2"); func() bool {
		a, _ := os.Stat(k)
		b, _ := os.Stat(k2)
		return os.SameFile(a, b)
	}() {
		t.Fatal("export: k and d/k2 linked, but the parent split them")
	}
}
