package gitmerge_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/rebase/gitmerge"
	"github.com/acyclicfs/acyclicfs/store"
)

func TestDivergedCommitsMerge(t *testing.T) {
	s := newStore(t)
	base := newRepo(t)
	ours, theirs := fork(t, base, "ours"), fork(t, base, "theirs")
	commitFile(t, ours, "a.txt", "ONE\ntwo\nthree\n", "ours edits a")
	commitFile(t, theirs, "b.txt", "alpha\nBETA\n", "theirs edits b")
	oc, tc := revParse(t, ours, "main"), revParse(t, theirs, "main")

	out := merge3(t, s, base, ours, theirs)
	if len(out.conflicts) != 0 {
		t.Fatalf("conflicts: %+v", out.conflicts)
	}
	checkRepo(t, out.dir)
	m := revParse(t, out.dir, "main")
	if m == oc || m == tc {
		t.Fatalf("main = %s, want a merge commit", m)
	}
	if p := strings.Fields(git(t, out.dir, "log", "-1", "--format=%P", "main")); len(p) != 2 || p[0] != oc || p[1] != tc {
		t.Fatalf("merge parents %v, want [%s %s]", p, oc, tc)
	}
	if a := git(t, out.dir, "log", "-1", "--format=%an <%ae>", "main"); strings.TrimSpace(a) != "acyclicfs <acyclicfs@localhost>" {
		t.Errorf("author %q", a)
	}
	if st := git(t, out.dir, "status", "--porcelain"); st != "" {
		t.Fatalf("git status not clean:\n%s", st)
	}
	if got := git(t, out.dir, "show", "main:a.txt") + git(t, out.dir, "show", "main:b.txt"); got != "ONE\ntwo\nthree\nalpha\nBETA\n" {
		t.Fatalf("merged content %q", got)
	}
	// Reflogs hold both sides' commits and the merge.
	for _, log := range []string{"HEAD", "refs/heads/main"} {
		data, err := os.ReadFile(filepath.Join(out.dir, ".git", "logs", log))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{oc, tc, m} {
			if !strings.Contains(string(data), " "+c+" ") {
				t.Errorf("logs/%s lacks %s:\n%s", log, c, data)
			}
		}
	}
	if st := git(t, out.dir, "symbolic-ref", "HEAD"); strings.TrimSpace(st) != "refs/heads/main" {
		t.Errorf("HEAD %q", st)
	}

	// The same merge makes the same commit.
	again := merge3(t, s, base, ours, theirs)
	if m2 := revParse(t, again.dir, "main"); m2 != m {
		t.Errorf("merge not deterministic: %s then %s", m, m2)
	}
}

func TestFastForward(t *testing.T) {
	s := newStore(t)
	base := newRepo(t)
	ours, theirs := fork(t, base, "ours"), fork(t, base, "theirs")
	// The same commit in both (same content and dates), then one more in
	// theirs: ours' main is an ancestor of theirs'.
	for _, d := range []string{ours, theirs} {
		write(t, filepath.Join(d, "a.txt"), "1\n")
		gitAt(t, d, 1800000000, "add", "-A")
		gitAt(t, d, 1800000000, "commit", "-q", "-m", "same")
	}
	git(t, ours, "tag", "ours-tag") // ours changes .git elsewhere too
	commitFile(t, theirs, "b.txt", "2\n", "theirs only")
	if revParse(t, ours, "main") != revParse(t, theirs, "main~1") {
		t.Fatal("setup: shared commit differs")
	}
	out := merge3(t, s, base, ours, theirs)
	if len(out.conflicts) != 0 {
		t.Fatalf("conflicts: %+v", out.conflicts)
	}
	checkRepo(t, out.dir)
	if got, want := revParse(t, out.dir, "main"), revParse(t, theirs, "main"); got != want {
		t.Fatalf("main = %s, want theirs' %s (fast-forward)", got, want)
	}
	if revParse(t, out.dir, "ours-tag") == "" {
		t.Fatal("ours' tag lost")
	}
	if st := git(t, out.dir, "status", "--porcelain"); st != "" {
		t.Fatalf("git status not clean:\n%s", st)
	}
}

func TestConflictingEditsKeepBoth(t *testing.T) {
	s := newStore(t)
	base := newRepo(t)
	ours, theirs := fork(t, base, "ours"), fork(t, base, "theirs")
	commitFile(t, ours, "a.txt", "ours\ntwo\nthree\n", "ours")
	commitFile(t, theirs, "a.txt", "theirs\ntwo\nthree\n", "theirs")
	oc, tc := revParse(t, ours, "main"), revParse(t, theirs, "main")

	out := merge3(t, s, base, ours, theirs)
	checkRepo(t, out.dir)
	if got := revParse(t, out.dir, "main"); got != oc {
		t.Fatalf("main = %s, want ours %s", got, oc)
	}
	if got := revParse(t, out.dir, "refs/acyclicfs/theirs/heads/main"); got != tc {
		t.Fatalf("theirs kept at %s, want %s", got, tc)
	}
	var c *rebase.Conflict
	for i := range out.conflicts {
		if out.conflicts[i].Path == "D/.git/refs/heads/main" {
			c = &out.conflicts[i]
		}
	}
	if c == nil || c.Kind != gitmerge.ConflictRef {
		t.Fatalf("conflicts %+v, want git-ref at D/.git/refs/heads/main", out.conflicts)
	}
	for side, e := range map[string]*store.Entry{"ours": c.Ours, "theirs": c.Theirs} {
		want := map[string]string{"ours": oc, "theirs": tc}[side]
		b, err := s.ReadBlob(e.ID)
		if err != nil || string(b) != want+"\n" {
			t.Errorf("conflict %s entry holds %q (%v), want %s", side, b, err, want)
		}
	}
	// Taking theirs at the ref path is a valid ref.
	b, _ := s.ReadBlob(c.Theirs.ID)
	write(t, filepath.Join(out.dir, ".git/refs/heads/main"), string(b))
	checkRepo(t, out.dir)
}

func TestPackedRefsOneSide(t *testing.T) {
	s := newStore(t)
	base := newRepo(t)
	git(t, base, "branch", "topic")
	ours, theirs := fork(t, base, "ours"), fork(t, base, "theirs")
	commitFile(t, ours, "a.txt", "ONE\ntwo\nthree\n", "ours")
	git(t, ours, "branch", "-D", "topic")
	git(t, ours, "gc", "-q") // packs objects and refs, prunes loose refs
	commitFile(t, theirs, "b.txt", "alpha\nBETA\n", "theirs")
	git(t, theirs, "pack-refs", "--all")
	commitFile(t, theirs, "c.txt", "c\n", "theirs 2")
	git(t, theirs, "tag", "t1")
	oc, tc := revParse(t, ours, "main"), revParse(t, theirs, "main")

	out := merge3(t, s, base, ours, theirs)
	if len(out.conflicts) != 0 {
		t.Fatalf("conflicts: %+v", out.conflicts)
	}
	checkRepo(t, out.dir)
	m := revParse(t, out.dir, "main")
	if !isAncestor(out.dir, oc, m) || !isAncestor(out.dir, tc, m) {
		t.Fatalf("main %s does not contain %s and %s", m, oc, tc)
	}
	if revParse(t, out.dir, "t1") == "" {
		t.Fatal("theirs' tag lost")
	}
	if _, err := gitErr(out.dir, "rev-parse", "--verify", "-q", "refs/heads/topic"); err == nil {
		t.Fatal("topic deleted by ours (unchanged by theirs) survived")
	}
	if st := git(t, out.dir, "status", "--porcelain"); st != "" {
		t.Fatalf("git status not clean:\n%s", st)
	}
}

func TestStagedChangesSurvive(t *testing.T) {
	s := newStore(t)
	base := newRepo(t)
	ours, theirs := fork(t, base, "ours"), fork(t, base, "theirs")
	commitFile(t, ours, "a.txt", "ONE\ntwo\nthree\n", "ours")
	write(t, filepath.Join(ours, "new.txt"), "staged\n")
	git(t, ours, "add", "new.txt")
	commitFile(t, theirs, "b.txt", "alpha\nBETA\n", "theirs")

	out := merge3(t, s, base, ours, theirs)
	if len(out.conflicts) != 0 {
		t.Fatalf("conflicts: %+v", out.conflicts)
	}
	checkRepo(t, out.dir)
	if st := git(t, out.dir, "status", "--porcelain"); st != "A  new.txt\n" {
		t.Fatalf("git status:\n%s\nwant the staged new.txt only", st)
	}
}

func TestStagedChangesConflict(t *testing.T) {
	s := newStore(t)
	base := newRepo(t)
	ours, theirs := fork(t, base, "ours"), fork(t, base, "theirs")
	commitFile(t, ours, "b.txt", "x\n", "ours")
	write(t, filepath.Join(ours, "a.txt"), "ours staged\n")
	git(t, ours, "add", "a.txt")
	commitFile(t, theirs, "a.txt", "theirs committed\n", "theirs")

	out := merge3(t, s, base, ours, theirs)
	checkRepo(t, out.dir)
	found := false
	for _, c := range out.conflicts {
		if c.Path == "D/.git/index" && c.Kind == gitmerge.ConflictIndex {
			found = true
		}
	}
	if !found {
		t.Fatalf("conflicts %+v, want git-index at D/.git/index", out.conflicts)
	}
}

func TestNotAGitDir(t *testing.T) {
	s := newStore(t)
	m := gitmerge.New(s)
	empty, err := s.PutTree(&store.Tree{})
	if err != nil {
		t.Fatal(err)
	}
	d := &store.Entry{Kind: store.KindDir, ID: empty}
	for _, p := range []string{"D/.git", "D/src"} {
		if _, _, ok, err := m.MergeSubtree(p, nil, d, d); ok || err != nil {
			t.Errorf("%s: ok=%v err=%v, want declined", p, ok, err)
		}
	}
}

func TestTimeoutFailsCleanly(t *testing.T) {
	s := newStore(t)
	base := newRepo(t)
	ours, theirs := fork(t, base, "ours"), fork(t, base, "theirs")
	commitFile(t, ours, "a.txt", "ONE\ntwo\nthree\n", "ours")
	commitFile(t, theirs, "b.txt", "alpha\nBETA\n", "theirs")
	b := root(t, s, importDir(t, s, base))
	o := root(t, s, importDir(t, s, ours))
	th := root(t, s, importDir(t, s, theirs))
	m := gitmerge.New(s)
	m.TempDir = t.TempDir()
	m.Timeout = time.Nanosecond
	_, err := rebase.Merge3(s, s, b, o, th, rebase.Options{Subtree: m, KeepConflicts: true})
	if !errors.Is(err, gitmerge.ErrGitTimeout) {
		t.Fatalf("err = %v, want ErrGitTimeout", err)
	}
	if left, _ := os.ReadDir(m.TempDir); len(left) != 0 {
		t.Errorf("temp dir not cleaned: %v", left)
	}
	// The same Merger works once given time.
	m.Timeout = 0
	if _, err := rebase.Merge3(s, s, b, o, th, rebase.Options{Subtree: m, KeepConflicts: true}); err != nil {
		t.Fatal(err)
	}
}
