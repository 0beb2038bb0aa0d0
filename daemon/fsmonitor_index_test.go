package daemon

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitIndexAt makes a repository at dir (version version, with or without
// the end-of-index-entries extension) whose index carries an untracked
// cache written by git at dir, and returns the index.
func gitIndexAt(t testing.TB, dir string, version int, eoie bool) []byte {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	for p, data := range map[string]string{"a": "a", "d/b": "b", "d/e/" + strings.Repeat("long", 60): "c", "untracked/x": "x"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("init", "-q")
	run("config", "core.untrackedCache", "true")
	run("config", "index.recordEndOfIndexEntries", map[bool]string{true: "true", false: "false"}[eoie])
	run("add", "a", "d")
	run("update-index", "--index-version", string(rune('0'+version)))
	run("commit", "-qm", "x")
	run("update-index", "--untracked-cache")
	if got := run("status", "--porcelain"); got != "?? untracked/\n" {
		t.Fatalf("git status: %q", got)
	}
	b, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWithUntrackedIdent: an index git wrote at one place, its ident
// rewritten for another, is one git at that other place reads with the
// cache in use (git's own check of the extension), in every index version.
func TestWithUntrackedIdent(t *testing.T) {
	for _, tc := range []struct {
		version int
		eoie    bool
	}{{2, false}, {3, false}, {4, false}, {2, true}, {4, true}} {
		base := t.TempDir()
		from, to := filepath.Join(base, "from"), filepath.Join(base, "to-a-longer-path")
		if err := os.Mkdir(from, 0o755); err != nil {
			t.Fatal(err)
		}
		old := gitIndexAt(t, from, tc.version, tc.eoie)
		if tc.eoie != bytes.Contains(old, []byte("EOIE")) {
			t.Fatalf("v%d: EOIE in the index: %v, want %v", tc.version, !tc.eoie, tc.eoie)
		}
		ident, err := untrackedIdent(from)
		if err != nil {
			t.Fatal(err)
		}
		if same, changed, err := withUntrackedIdent(old, ident); err != nil || changed || !bytes.Equal(same, old) {
			t.Fatalf("v%d: the index's own ident: changed %v, err %v", tc.version, changed, err)
		}
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
		ident, _ = untrackedIdent(to)
		next, changed, err := withUntrackedIdent(old, ident)
		if err != nil || !changed {
			t.Fatalf("v%d: rewrite: changed %v, err %v", tc.version, changed, err)
		}
		if err := os.WriteFile(filepath.Join(to, ".git", "index"), next, 0o644); err != nil {
			t.Fatal(err)
		}
		// git's own reading: the ident it dumps is the new place's.
		cmd := exec.Command("git", "-c", "core.untrackedCache=true", "status", "--porcelain")
		cmd.Dir = to
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+to, "GIT_TRACE2_PERF="+filepath.Join(base, "trace"))
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != "?? untracked/\n" {
			t.Fatalf("v%d: git status at the new place: %v %q", tc.version, err, out)
		}
		tr, err := os.ReadFile(filepath.Join(base, "trace"))
		if err != nil {
			t.Fatal(err)
		}
		// The cache was kept: no node made anew (a dropped cache makes one
		// per directory), and git reads only what the move touched.
		if !bytes.Contains(tr, []byte("node-creation:0")) {
			t.Fatalf("v%d: git rebuilt the untracked cache:\n%s", tc.version, tr)
		}
	}
}

func TestWithUntrackedIdentRejects(t *testing.T) {
	dir := t.TempDir()
	old := gitIndexAt(t, dir, 2, false)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"truncated": old[:len(old)/2],
		"checksum":  append(append([]byte(nil), old[:len(old)-1]...), old[len(old)-1]^1),
	} {
		if _, _, err := withUntrackedIdent(b, "Location /x, system Linux"); !errors.Is(err, ErrIndexFormat) {
			t.Errorf("%s: err %v, want ErrIndexFormat", name, err)
		}
	}
}

// FuzzWithUntrackedIdent: any input gets a rewrite or an error, never a
// panic, and a rewrite reads back with the new ident.
func FuzzWithUntrackedIdent(f *testing.F) {
	for _, v := range []int{2, 3, 4} {
		f.Add(gitIndexAt(f, f.TempDir(), v, v == 4), "Location /y, system Linux")
	}
	f.Fuzz(func(t *testing.T, index []byte, ident string) {
		if strings.IndexByte(ident, 0) >= 0 {
			return
		}
		next, changed, err := withUntrackedIdent(index, ident)
		if err != nil || !changed {
			return
		}
		again, changed, err := withUntrackedIdent(next, ident)
		if err != nil || changed || !bytes.Equal(again, next) {
			t.Fatalf("rewritten index: changed %v, err %v", changed, err)
		}
	})
}

func TestGitVarint(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 255, 16511, 16512, 1 << 40} {
		b := appendGitVarint(nil, v)
		got, n := decodeGitVarint(b)
		if got != v || n != len(b) {
			t.Fatalf("varint %d: % x decodes to %d (%d bytes)", v, b, got, n)
		}
	}
}
