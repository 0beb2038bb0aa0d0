package gitmerge_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/rebase/gitmerge"
	"github.com/acyclicfs/acyclicfs/store"
)

// TestLargeRepoTiming measures MergeSubtree on a repository the size of a
// real project: GOROOT/src committed (about 12k files, all loose objects,
// the worst case for linking), one commit on each side touching a
// different file. Set GITMERGE_TIMING=1 to run it.
func TestLargeRepoTiming(t *testing.T) {
	if os.Getenv("GITMERGE_TIMING") == "" {
		t.Skip("set GITMERGE_TIMING=1")
	}
	src := "/usr/local/go/src"
	if _, err := os.Stat(src); err != nil {
		t.Skip(err)
	}
	top := t.TempDir()
	gitDir := filepath.Join(top, "base.git")
	wt := []string{"--git-dir=" + gitDir, "--work-tree=" + src}
	start := time.Now()
	git(t, top, append(wt, "init", "-q", "-b", "main")...)
	git(t, top, append(wt, "add", "-A")...)
	git(t, top, append(wt, "commit", "-q", "-m", "go")...)
	t.Logf("repo made in %v", time.Since(start))
	side := func(name, file string) string {
		d := filepath.Join(top, name+".git")
		if out, err := execCp(gitDir, d); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		w := []string{"--git-dir=" + d, "--work-tree=" + src}
		blob := strings.TrimSpace(gitIn(t, d, name+" was here\n", "hash-object", "-w", "--stdin"))
		git(t, top, append(w, "update-index", "--add", "--cacheinfo", "100644,"+blob+","+file)...)
		git(t, top, append(w, "commit", "-q", "-m", name)...)
		return d
	}
	ours, theirs := side("ours", "ours.txt"), side("theirs", "theirs.txt")
	s := newStore(t)
	start = time.Now()
	be, oe, te := importDir(t, s, gitDir), importDir(t, s, ours), importDir(t, s, theirs)
	t.Logf("imported in %v", time.Since(start))
	n := 0
	filepath.WalkDir(filepath.Join(ours, "objects"), func(string, os.DirEntry, error) error { n++; return nil })
	t.Logf("%d files under objects/", n)

	m := gitmerge.New(s)
	m.TempDir = t.TempDir()
	var times []time.Duration
	var merged *store.Entry
	for range 10 {
		start = time.Now()
		e, cs, ok, err := m.MergeSubtree("D/.git", &be, &oe, &te)
		d := time.Since(start)
		if err != nil || !ok || len(cs) != 0 {
			t.Fatalf("MergeSubtree: ok=%v err=%v conflicts=%+v", ok, err, cs)
		}
		merged = e
		times = append(times, d)
	}
	sort.Slice(times, func(a, b int) bool { return times[a] < times[b] })
	t.Logf("MergeSubtree: min %v, median %v, max %v", times[0], times[len(times)/2], times[len(times)-1])
	dst := filepath.Join(top, "merged")
	exportDir(t, s, *merged, filepath.Join(dst, ".git"))
	if out, err := gitErr(dst, "fsck", "--no-progress", "--connectivity-only"); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
	if p := strings.Fields(git(t, dst, "log", "-1", "--format=%P", "main")); len(p) != 2 {
		t.Fatalf("main is not a merge: %v", p)
	}
}
