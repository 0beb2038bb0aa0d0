package gitmerge_test

import (
	"flag"
	"fmt"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestPropRandomHistories: two forks of a repository make random
// histories (commits on main and on a second branch, gc, pack-refs); the
// merged .git must pass git fsck --strict, hold no conflict marker and
// keep every commit of either side reachable from some ref.
func TestPropRandomHistories(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		// Each check runs a few dozen git commands; the default 100
		// would take a minute.
		f.Value.Set("60")
		defer f.Value.Set(f.DefValue)
	}
	s := newStore(t)
	rapid.Check(t, func(rt *rapid.T) {
		base := newRepo(t)
		if rapid.Bool().Draw(rt, "base branch b") {
			git(t, base, "branch", "b")
		}
		sides := map[string]string{"ours": fork(t, base, "ours"), "theirs": fork(t, base, "theirs")}
		for _, name := range []string{"ours", "theirs"} {
			dir := sides[name]
			n := rapid.IntRange(0, 4).Draw(rt, name+" ops")
			for i := range n {
				switch op := rapid.SampledFrom([]string{"main", "main", "branch", "gc", "pack-refs"}).Draw(rt, fmt.Sprintf("%s op %d", name, i)); op {
				case "main", "branch":
					if op == "branch" {
						if _, err := gitErr(dir, "checkout", "-q", "b"); err != nil {
							git(t, dir, "checkout", "-q", "-b", "b")
						}
					}
					f := rapid.SampledFrom([]string{"a.txt", "b.txt", "c.txt"}).Draw(rt, "file")
					v := rapid.SampledFrom([]string{"x", "y", "z"}).Draw(rt, "line")
					commitFile(t, dir, f, v+"\nline two\nline three\n", name+" "+op)
					if op == "branch" {
						git(t, dir, "checkout", "-q", "main")
					}
				case "gc":
					git(t, dir, "gc", "-q")
				case "pack-refs":
					git(t, dir, "pack-refs", "--all")
				}
			}
		}
		out := merge3(t, s, base, sides["ours"], sides["theirs"])
		checkRepo(t, out.dir)
		have := map[string]bool{}
		for _, c := range strings.Fields(git(t, out.dir, "rev-list", "--all")) {
			have[c] = true
		}
		var lost []string
		for _, name := range []string{"ours", "theirs"} {
			for _, c := range strings.Fields(git(t, sides[name], "rev-list", "--all")) {
				if !have[c] {
					lost = append(lost, name+":"+c)
				}
			}
		}
		if len(lost) > 0 {
			sort.Strings(lost)
			rt.Fatalf("commits not reachable from any merged ref: %v\nrefs:\n%s\nconflicts: %+v", lost,
				git(t, out.dir, "show-ref"), out.conflicts)
		}
		if _, err := gitErr(out.dir, "status", "--porcelain"); err != nil {
			rt.Fatalf("git status fails: %v", err)
		}
	})
}
