package test

import (
	"encoding/json"
	"fmt"
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

// TestConflictIsRecordedUntilResolved: a conflicted rebase moves the child
// onto its parent's head with its own versions standing at the conflicting
// paths, records both sides, and nothing lands until they are resolved.
func TestConflictIsRecordedUntilResolved(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f.txt": "base\n", "bin": "\x00\x01base"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "c")
	e.edit("c", map[string]string{"f.txt": "child\n", "bin": "\x00\x01child"})
	mainHead := e.edit("main", map[string]string{"f.txt": "parent\n", "bin": "\x00\x01parent", "other": "from main\n"})
	r := e.run("rebase", "c")
	if r.code != 3 || r.line() != "conflicted" || !strings.Contains(r.stdout, "\nf.txt\n") || !strings.Contains(r.stdout, "\nbin\n") {
		t.Fatalf("conflicting rebase: %s", r)
	}
	if !strings.Contains(r.stderr, "hint: ") || !strings.Contains(r.stderr, "acyclicfs resolve") {
		t.Fatalf("a conflict's text output must end with a hint naming resolve: %s", r)
	}
	if e.content("c", "f.txt") != "child\n" || e.content("c", "bin") != "\x00\x01child" || e.content("c", "other") != "from main\n" {
		t.Fatal("a conflicted rebase must keep the child's versions and take the parent's other changes")
	}
	for side, want := range map[string]string{"base": "base\n", "ours": "child\n", "theirs": "parent\n"} {
		if got := e.run("cat", "c", "f.txt", "--conflict", side); got.code != 0 || got.stdout != want {
			t.Fatalf("cat --conflict %s: %s", side, got)
		}
	}
	if got := e.run("cat", "c", "bin", "--conflict", "theirs"); got.stdout != "\x00\x01parent" {
		t.Fatalf("the binary conflict's other side is gone: %q", got.stdout)
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
	// land refuses, with exit 3 and nothing published; so does every
	// later try, whatever else happens in the child.
	for i := 0; i < 2; i++ {
		if r := e.run("land", "c"); r.code != 3 || !strings.Contains(r.stdout, "f.txt") || e.head("main") != mainHead {
			t.Fatalf("land of a conflicted child: %s", r)
		}
		e.edit("c", map[string]string{"unrelated": fmt.Sprint(i)})
	}
	// gc keeps every side while the conflict is recorded.
	e.ok("gc")
	if got := e.run("cat", "c", "bin", "--conflict", "theirs"); got.stdout != "\x00\x01parent" {
		t.Fatalf("gc dropped a conflict's side: %s", got)
	}
	// Resolving: a path that is not conflicted, then a side per path.
	if r := e.run("resolve", "c", "unrelated", "--ours"); r.code != 2 {
		t.Fatalf("resolve of a path without a conflict: %s", r)
	}
	e.ok("resolve", "c", "bin", "--theirs")
	if e.content("c", "bin") != "\x00\x01parent" {
		t.Fatal("resolve --theirs did not take the parent's version")
	}
	if r := e.run("land", "c"); r.code != 3 || strings.Contains(r.stdout, "bin") || !strings.Contains(r.stdout, "f.txt") {
		t.Fatalf("land with one conflict left: %s", r)
	}
	e.ok("resolve", "c", "f.txt", "--ours")
	if st := e.run("status", "c"); strings.Contains(st.stdout, "conflict c") {
		t.Fatalf("status still shows a conflict after resolution:\n%s", st.stdout)
	}
	if log := e.log("c"); countKind(log, "resolve") != 2 {
		t.Fatalf("each resolve is a generation of kind resolve: %s", kinds(log))
	}
	e.ok("land", "c")
	if e.content("main", "f.txt") != "child\n" || e.content("main", "bin") != "\x00\x01parent" {
		t.Fatal("the landing does not hold the resolutions")
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
