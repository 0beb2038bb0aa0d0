package test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Concurrency (issue 6, part 2): eight tool sessions write disjoint files
// and append (under flock) to one shared log in one mounted child while the
// parent advances every 100ms and a sibling lands. No update may be lost,
// no parent generation may be rebased onto twice, and fsck stays clean.

// relSessionScript is one tool session: $N files of its own and $N lines
// appended to shared.log ($LOCK is "flock shared.log" or empty: O_APPEND
// alone), with a short pause between rounds.
const relSessionScript = `set -e
j=0
while [ $j -lt $N ]; do
	j=$((j+1))
	printf 'session %s file %s\n' "$I" "$j" > "s${I}_$j.txt"
	$LOCK sh -c "printf 's%s line %s\n' '$I' '$j' >> shared.log"
	sleep 0.02
done
`

func TestReliabilityConcurrentSessionsFlock(t *testing.T) {
	t.Parallel()
	relConcurrentSessions(t, true)
}

func TestReliabilityConcurrentSessionsAppend(t *testing.T) {
	t.Parallel()
	relConcurrentSessions(t, false)
}

func relConcurrentSessions(t *testing.T, flock bool) {
	const sessions, rounds = 8, 12
	lock := ""
	if flock {
		lock = "flock shared.log"
	}
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"base.txt": "base\n"})
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "child")
	e.ok("fork", "main", "sib")
	e.edit("sib", map[string]string{"sib.txt": "from sib\n"})
	mp := e.mountAt("child")
	inSession(t, mp, ": > shared.log")
	e.waitIdle("child")
	start := e.head("child")

	// The parent advances every 100ms until the sessions are done; its
	// sixth step is the sibling's land (in the same goroutine, so a commit
	// built from an older export never reverts the land).
	stop := make(chan struct{})
	type step struct {
		what string
		r    result
		err  error
	}
	steps := make(chan step, 1000)
	var advancer sync.WaitGroup
	advancer.Add(1)
	go func() {
		defer advancer.Done()
		defer close(steps)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for k := 1; ; k++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if k == 6 {
				r, err := runCmd(e.command(nil, "land", "sib"))
				steps <- step{"land sib", r, err}
				continue
			}
			dir := filepath.Join(e.dir, fmt.Sprintf("parent-%d", k))
			r, err := runCmd(e.command(nil, "export", "main", dir))
			if err != nil || r.code != 0 {
				steps <- step{"export main", r, err}
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%d.txt", k)), []byte(fmt.Sprintf("parent %d\n", k)), 0o644); err != nil {
				steps <- step{"write", r, err}
				continue
			}
			r, err = runCmd(e.command(nil, "commit", "main", dir))
			steps <- step{fmt.Sprintf("commit p%d", k), r, err}
		}
	}()

	// Two waves of four overlapping sessions, staggered within a wave; the
	// child's window closes between the waves, so there are at least two
	// windows, each with parent advances during it.
	res := make([]result, sessions+1)
	errs := make([]error, sessions+1)
	for wave := range 2 {
		var wg sync.WaitGroup
		for i := 1 + wave; i <= sessions; i += 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i/2%4) * 100 * time.Millisecond)
				res[i], errs[i] = sessionRun(mp, fmt.Sprintf("export I=%d N=%d LOCK=%q\n%s", i, rounds, lock, relSessionScript))
			}()
		}
		wg.Wait()
		e.waitIdle("child")
	}
	time.Sleep(300 * time.Millisecond) // a few more parent advances while the child is idle
	close(stop)
	advancer.Wait()
	for i := 1; i <= sessions; i++ {
		if errs[i] != nil || res[i].code != 0 {
			t.Errorf("session %d: %v %s", i, errs[i], res[i])
		}
	}
	var commits []string
	landed := false
	for s := range steps {
		if s.err != nil || s.r.code != 0 {
			t.Errorf("%s: %v %s", s.what, s.err, s.r)
			continue
		}
		if s.what == "land sib" {
			landed = true
		} else if strings.HasPrefix(s.what, "commit ") {
			commits = append(commits, strings.TrimPrefix(s.what, "commit "))
		}
	}
	if t.Failed() {
		t.Fatalf("status:\n%s\ndaemon log:\n%s", e.run("status").stdout, e.daemonLog())
	}
	e.waitIdle("child")
	if o, _ := e.unmount(mp); o != "current" && o != "rebased" {
		t.Fatalf("unmount: %q", o)
	}
	tree := relTree(t, e.exportTo("child", "out"))

	// No update lost.
	for i := 1; i <= sessions; i++ {
		for j := 1; j <= rounds; j++ {
			p := fmt.Sprintf("s%d_%d.txt", i, j)
			if want := fmt.Sprintf("session %d file %d\n", i, j); tree[p].data != want {
				t.Errorf("%s = %s, want %q", p, tree[p], want)
			}
		}
	}
	var wantLines, gotLines []string
	for i := 1; i <= sessions; i++ {
		for j := 1; j <= rounds; j++ {
			wantLines = append(wantLines, fmt.Sprintf("s%d line %d", i, j))
		}
	}
	gotLines = strings.Split(strings.TrimSuffix(tree["shared.log"].data, "\n"), "\n")
	sort.Strings(wantLines)
	sort.Strings(gotLines)
	if strings.Join(gotLines, "\n") != strings.Join(wantLines, "\n") {
		t.Errorf("shared.log has %d lines, want the %d appended ones exactly once:\n%s", len(gotLines), len(wantLines), tree["shared.log"].data)
	}
	for _, c := range commits {
		if tree[c+".txt"].kind != "file" {
			t.Errorf("parent's %s.txt is missing from the child after the final reconcile", c)
		}
	}
	if landed && tree["sib.txt"].data != "from sib\n" {
		t.Errorf("the landed sib.txt is missing from the child: %s", tree["sib.txt"])
	}

	// Reconciled once per window: never two rebases onto one parent
	// generation, and the child ends on the parent's head.
	log, err := e.relLog("child")
	if err != nil {
		t.Fatal(err)
	}
	if err := relCheckLog("child", nil, log); err != nil {
		t.Fatal(err)
	}
	mainLog, err := e.relLog("main")
	if err != nil {
		t.Fatal(err)
	}
	onto := map[string]int{}
	rebases, captures := 0, 0
	for _, en := range log {
		if en.Gen == start {
			break
		}
		switch en.Kind {
		case "rebase":
			rebases++
			onto[en.Base]++
			if onto[en.Base] > 1 {
				t.Errorf("two rebases onto parent generation %s:\n%+v", en.Base[:12], log)
			}
		case "capture":
			captures++
		}
	}
	if captures < 2 {
		t.Errorf("two windows closed but the child's log shows %d captures: %s", captures, relKinds(log))
	}
	if log[0].Base != mainLog[0].Gen {
		t.Errorf("after the final unmount the child's base %s is not main's head %s", log[0].Base[:12], mainLog[0].Gen[:12])
	}
	if rebases > len(mainLog)-1 {
		t.Errorf("%d rebases for %d parent advances", rebases, len(mainLog)-1)
	}
	e.fsck()
	t.Logf("%d sessions × %d files and %d shared-log appends (flock %v): none lost; %d parent commits + land %v; child log: %d captures, %d rebases onto %d distinct parent generations (kinds %s)",
		sessions, rounds, sessions*rounds, flock, len(commits), landed, captures, rebases, len(onto), relKinds(log))
}

// relKinds lists a log's kinds, newest first.
func relKinds(log []relLogEntry) string {
	k := make([]string, len(log))
	for i, en := range log {
		k[i] = en.Kind
	}
	return strings.Join(k, ",")
}
