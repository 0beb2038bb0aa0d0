package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkout exports ws into a fresh directory and returns it.
func (e *env) checkout(ws, name string) string {
	e.t.Helper()
	dir := filepath.Join(e.dir, name)
	os.RemoveAll(dir)
	e.ok("export", ws, dir)
	return dir
}

// edit commits changes to ws: files maps path to content ("" deletes).
func (e *env) edit(ws string, files map[string]string) string {
	e.t.Helper()
	dir := e.checkout(ws, "edit-"+ws)
	for p, c := range files {
		full := filepath.Join(dir, p)
		if c == "" {
			os.RemoveAll(full)
			continue
		}
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	return e.ok("commit", ws, dir)
}

func (e *env) content(ws, path string) string {
	e.t.Helper()
	dir := e.checkout(ws, "read-"+ws)
	b, err := os.ReadFile(filepath.Join(dir, path))
	if err != nil {
		return "<missing>"
	}
	return string(b)
}

// TestRebaseLandScenario is issue 4's "done when" scenario through the CLI.
func TestRebaseLandScenario(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"shared.txt": "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\n", "keep": "k\n"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "a")
	e.ok("fork", "main", "b")
	e.edit("a", map[string]string{"a.txt": "from a\n", "shared.txt": "L1-a\nl2\nl3\nl4\nl5\nl6\nl7\nl8\n"})
	e.edit("b", map[string]string{"b.txt": "from b\n"})
	e.edit("main", map[string]string{"main.txt": "from main\n", "shared.txt": "l1\nl2\nl3\nl4\nl5\nl6\nl7\nL8-main\n"})

	r := e.run("rebase", "a")
	if r.code != 0 || r.line() != "rebased" {
		t.Fatalf("rebase a: %s", r)
	}
	if got := e.content("a", "shared.txt"); got != "L1-a\nl2\nl3\nl4\nl5\nl6\nl7\nL8-main\n" {
		t.Fatalf("merged shared.txt = %q", got)
	}
	if e.content("a", "main.txt") != "from main\n" || e.content("a", "a.txt") != "from a\n" {
		t.Fatal("rebase lost a side")
	}
	if r := e.run("rebase", "a"); r.line() != "current" {
		t.Fatalf("second rebase: %s", r)
	}
	e.ok("land", "a")
	// b is idle: it followed main when a landed.
	if e.content("b", "a.txt") != "from a\n" {
		t.Fatal("idle sibling b did not follow the land of a")
	}
	mainHead := e.ok("land", "b")
	var ws []map[string]string
	json.Unmarshal([]byte(e.run("--json", "list").stdout), &ws)
	for _, w := range ws {
		if w["name"] == "main" && w["head"] != mainHead {
			t.Fatalf("land printed %s but main's head is %s", mainHead, w["head"])
		}
	}
	for p, want := range map[string]string{"a.txt": "from a\n", "b.txt": "from b\n", "main.txt": "from main\n", "keep": "k\n"} {
		if got := e.content("main", p); got != want {
			t.Errorf("main:%s = %q, want %q", p, got, want)
		}
	}
	e.fsck()
}

func TestConflictLeavesChildUnchangedAndIsReported(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f.txt": "base\n", "bin": "\x00\x01base"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "c")
	before := e.edit("c", map[string]string{"f.txt": "child\n", "bin": "\x00\x01child"})
	e.edit("main", map[string]string{"f.txt": "parent\n", "bin": "\x00\x01parent"})
	r := e.run("rebase", "c")
	if r.code != 3 || r.line() != "conflicted" || !strings.Contains(r.stdout, "\nf.txt\n") || !strings.Contains(r.stdout, "\nbin\n") {
		t.Fatalf("conflicting rebase: %s", r)
	}
	var ws []map[string]string
	json.Unmarshal([]byte(e.run("--json", "list").stdout), &ws)
	for _, w := range ws {
		if w["name"] == "c" && w["head"] != before {
			t.Fatal("a conflicted rebase changed the child's head")
		}
	}
	st := e.run("status", "c")
	if !strings.Contains(st.stdout, "conflict c f.txt (content)") {
		t.Fatalf("status does not show the conflict:\n%s", st)
	}
	var js struct {
		Workspaces []struct {
			Conflicts []struct{ Path, Kind string }
		}
	}
	json.Unmarshal([]byte(e.run("--json", "status", "c").stdout), &js)
	if len(js.Workspaces) != 1 || len(js.Workspaces[0].Conflicts) != 2 {
		t.Fatalf("status --json conflicts: %+v", js)
	}
	// land refuses too, with exit 3 and nothing changed.
	if r := e.run("land", "c"); r.code != 3 {
		t.Fatalf("land of a conflicted child: %s", r)
	}
	// --markers writes diff3 markers into text files; binary keeps ours.
	r = e.run("rebase", "c", "--markers")
	if r.code != 3 {
		t.Fatalf("rebase --markers: %s", r)
	}
	f := e.content("c", "f.txt")
	for _, m := range []string{"<<<<<<< ours\n", "child\n", "||||||| base\n", "base\n", "=======\n", "parent\n", ">>>>>>> theirs\n"} {
		if !strings.Contains(f, m) {
			t.Fatalf("markers missing %q in:\n%s", m, f)
		}
	}
	if e.content("c", "bin") != "\x00\x01child" {
		t.Fatal("binary conflict under --markers should keep ours")
	}
	// Resolving and committing clears the conflict from status.
	e.edit("c", map[string]string{"f.txt": "resolved\n"})
	if st := e.run("status", "c"); strings.Contains(st.stdout, "conflict c") {
		t.Fatalf("status still shows a conflict after resolution:\n%s", st.stdout)
	}
	e.fsck()
}

func TestRebasePrefer(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "base\n"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "o")
	e.ok("fork", "main", "th")
	e.edit("o", map[string]string{"f": "ours\n"})
	e.edit("th", map[string]string{"f": "ours\n"})
	e.edit("main", map[string]string{"f": "theirs\n"})
	if r := e.run("rebase", "o", "--prefer", "ours"); r.code != 0 || r.line() != "rebased" {
		t.Fatal(r)
	}
	if e.content("o", "f") != "ours\n" {
		t.Fatal("--prefer ours")
	}
	e.ok("rebase", "th", "--prefer", "theirs")
	if e.content("th", "f") != "theirs\n" {
		t.Fatal("--prefer theirs")
	}
	e.fails(2, "rebase", "o", "--prefer", "mine")
}

// TestThreeLevelLineageFollows: main → a → a1, main → b; landing b makes
// a and then a1 follow.
func TestThreeLevelLineageFollows(t *testing.T) {
	e := newEnv(t)
	e.ok("create", "main")
	e.ok("fork", "main", "a")
	e.ok("fork", "a", "a1")
	e.ok("fork", "main", "b")
	e.edit("a", map[string]string{"a": "a\n"})
	e.ok("rebase", "a1") // a1 picks up a's change
	e.edit("a1", map[string]string{"a1": "a1\n"})
	e.edit("b", map[string]string{"b": "b\n"})
	e.ok("land", "b")
	if e.content("a", "b") != "b\n" || e.content("a", "a") != "a\n" {
		t.Fatal("a did not follow main")
	}
	if e.content("a1", "b") != "b\n" || e.content("a1", "a1") != "a1\n" || e.content("a1", "a") != "a\n" {
		t.Fatal("a1 did not follow a")
	}
	st := e.run("--json", "status")
	var js struct {
		Workspaces []struct {
			Workspace string
			Behind    bool `json:"behind_parent"`
		}
	}
	json.Unmarshal([]byte(st.stdout), &js)
	for _, w := range js.Workspaces {
		if w.Behind {
			t.Errorf("%s is behind its parent after propagation", w.Workspace)
		}
	}
	e.fsck()
}
