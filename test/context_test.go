package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// contextEnv creates workspaces app and lib, context main over both, and
// its fork c1.
func contextEnv(t *testing.T) *env {
	t.Helper()
	return contextEnvIn(t, newEnv(t))
}

func contextEnvIn(t *testing.T, e *env) *env {
	t.Helper()
	for _, ws := range []string{"app", "lib"} {
		src := filepath.Join(e.dir, "src-"+ws)
		writeTree(t, src, map[string]string{"f": ws + " line 1\n", "common": "same\n"})
		e.ok("create", ws, "--from", src)
	}
	id := e.ok("context", "create", "main", "--root", "app="+filepath.Join(e.dir, "mnt-app"), "--root", "lib")
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("context create printed %q, want a context id", id)
	}
	if child := e.ok("context", "fork", "main", "c1"); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(child) || child == id {
		t.Fatalf("context fork printed %q", child)
	}
	return e
}

// commitFiles commits files (on top of the common ones) into ws.
func (e *env) commitFiles(ws string, files map[string]string) string {
	e.t.Helper()
	src := filepath.Join(e.dir, "commit-"+ws+"-"+strings.ReplaceAll(e.t.Name(), "/", "_"))
	all := map[string]string{"common": "same\n"}
	for k, v := range files {
		all[k] = v
	}
	writeTree(e.t, src, all)
	return e.ok("commit", ws, src)
}

// newestLog returns the newest log entry of ws as (generation, operation).
func (e *env) newestLog(ws string) (string, string) {
	e.t.Helper()
	fields := strings.Split(e.ok("log", ws, "-n", "1"), "\t")
	if len(fields) < 4 {
		e.t.Fatalf("log %s: %q", ws, fields)
	}
	return fields[0], fields[3]
}

func TestContextLandAdvancesEveryParentInOneStep(t *testing.T) {
	e := contextEnv(t)
	appHead := e.commitFiles("c1.app", map[string]string{"f": "app line 1\n", "new-app": "A\n"})
	libHead := e.commitFiles("c1.lib", map[string]string{"f": "lib line 1\n", "new-lib": "L\n"})
	r := e.run("context", "land", "c1")
	if r.code != 0 {
		t.Fatalf("context land: %s", r)
	}
	for _, ws := range []string{"c1.app", "c1.lib"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(ws) + `\t\w+\tlanded\t[0-9a-f]{64}$`).MatchString(r.stdout) {
			t.Fatalf("no landed line for %s:\n%s", ws, r.stdout)
		}
	}
	appGen, appOp := e.newestLog("app")
	libGen, libOp := e.newestLog("lib")
	if appGen != appHead || libGen != libHead {
		t.Fatalf("parents at %s %s, want %s %s", appGen, libGen, appHead, libHead)
	}
	if appOp != libOp || !strings.HasPrefix(appOp, "context-land c1 ") {
		t.Fatalf("parent log operations %q and %q: want one landing", appOp, libOp)
	}
	var shown struct {
		State string `json:"state"`
		Roots []struct {
			Workspace string `json:"workspace"`
			Head      string `json:"head"`
		} `json:"roots"`
	}
	if err := json.Unmarshal([]byte(e.run("--json", "context", "show", "main").stdout), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.State != "active" || len(shown.Roots) != 2 || shown.Roots[0].Head != appHead {
		t.Fatalf("show main = %+v", shown)
	}
	e.fsck()
}

func TestContextLandConflictInOneRootLandsNothing(t *testing.T) {
	e := contextEnv(t)
	e.commitFiles("c1.app", map[string]string{"f": "app line 1\n", "new-app": "A\n"})
	e.commitFiles("lib", map[string]string{"f": "parent's lib\n"})
	e.commitFiles("c1.lib", map[string]string{"f": "child's lib\n"})
	appBefore, _ := e.newestLog("app")
	libBefore, _ := e.newestLog("lib")
	r := e.fails(3, "context", "land", "c1")
	if !strings.Contains(r.stdout, "c1.lib\tlib\tconflicted") || !strings.Contains(r.stdout, "c1.app\tapp\tnot-landed") ||
		!strings.Contains(r.stdout, "conflict\tc1.lib\tf\t") {
		t.Fatalf("context land output:\n%s", r.stdout)
	}
	if a, _ := e.newestLog("app"); a != appBefore {
		t.Fatal("app moved although lib conflicted")
	}
	if l, _ := e.newestLog("lib"); l != libBefore {
		t.Fatal("lib moved although it conflicted")
	}
	e.fsck()
}

func TestContextFreezeRefusesForkAndLand(t *testing.T) {
	e := contextEnv(t)
	e.commitFiles("c1.app", map[string]string{"f": "changed\n"})
	if got := e.ok("context", "freeze", "main"); got != "main" {
		t.Fatalf("freeze printed %q", got)
	}
	e.fails(4, "context", "fork", "main", "c2")
	e.fails(4, "context", "land", "c1")
	e.ok("context", "freeze", "c1")
	e.fails(4, "context", "fork", "c1", "c3")
	if r := e.run("context", "list"); !regexp.MustCompile(`(?m)^main\s+[0-9a-f]{12}\s+frozen\s+-\s+app,lib$`).MatchString(r.stdout) {
		t.Fatalf("context list:\n%s", r.stdout)
	}
	e.fails(2, "context", "create", "bad/name", "--root", "app")
	e.fails(2, "context", "create", "x", "--root", "nosuch")
	e.fails(2, "context", "create", "main", "--root", "app")
}

func TestContextDiscardIsBounded(t *testing.T) {
	e := contextEnv(t)
	e.ok("context", "fork", "c1", "c1a")
	e.ok("context", "fork", "c1", "c1b")
	r := e.fails(2, "context", "discard", "c1", "--max", "2")
	if !strings.Contains(r.stderr, "traversal bound") {
		t.Fatalf("discard error: %s", r.stderr)
	}
	if out := e.run("context", "list").stdout; strings.Contains(out, "discarded") {
		t.Fatalf("a refused discard changed something:\n%s", out)
	}
	r = e.run("context", "discard", "c1", "--max", "3")
	if r.code != 0 {
		t.Fatalf("discard: %s", r)
	}
	got := strings.Fields(r.stdout)
	if len(got) != 3 || got[0] != "c1" {
		t.Fatalf("discard printed %q, want c1 and its two children", got)
	}
	var list []struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(e.run("--json", "context", "list").stdout), &list); err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if want := map[bool]string{true: "active", false: "discarded"}[c.Name == "main"]; c.State != want {
			t.Fatalf("%s is %s, want %s", c.Name, c.State, want)
		}
	}
	e.fails(2, "context", "land", "c1a")
	e.ok("list") // the workspaces of discarded contexts are kept
	e.ok("log", "c1a.c1.app")
}

// TestContextLandCrashRecovery kills a landing at each durable step and
// checks that the next command lands every root or none.
func TestContextLandCrashRecovery(t *testing.T) {
	for _, p := range []struct {
		point  string
		landed bool
	}{
		{"context.land.after-claim", false},
		{"context.land.after-first", false},
		{"context.land.after-prepare", false},
		{"context.land.after-append", true},
	} {
		t.Run(p.point, func(t *testing.T) {
			e := contextEnv(t)
			appHead := e.commitFiles("c1.app", map[string]string{"f": "app 2\n"})
			libHead := e.commitFiles("c1.lib", map[string]string{"f": "lib 2\n"})
			appBefore, _ := e.newestLog("app")
			libBefore, _ := e.newestLog("lib")
			e.runCrash(p.point, "context", "land", "c1")
			e.ok("list") // any command recovers
			app, _ := e.newestLog("app")
			lib, _ := e.newestLog("lib")
			if p.landed {
				if app != appHead || lib != libHead {
					t.Fatalf("after recovery: app %s lib %s, want both landed", app, lib)
				}
			} else {
				if app != appBefore || lib != libBefore {
					t.Fatalf("after recovery: app %s lib %s, want neither moved", app, lib)
				}
				if r := e.run("context", "land", "c1"); r.code != 0 || strings.Count(r.stdout, "\tlanded\t") != 2 {
					t.Fatalf("land after rollback: %s", r)
				}
			}
			e.fsck()
		})
	}
}

// TestContextLandThroughTheDaemon lands a context whose roots are mounted:
// the command runs in the daemon, refuses while a root has an open lease,
// and the mounted parent root shows the landed content afterwards.
func TestContextLandThroughTheDaemon(t *testing.T) {
	e := contextEnvIn(t, newMountEnv(t))
	mpApp := e.mountAt("c1.app")
	mpLib := e.mountAt("c1.lib")
	mpMain := e.mountAt("app")
	e.execOK(mpApp, "echo A > new-app")
	e.execOK(mpLib, "echo L > new-lib")
	lease := e.ok("lease", "begin", mpLib, "--owner", "agent")
	e.fails(4, "context", "land", "c1")
	e.ok("lease", "end", mpLib, lease)
	if r := e.run("context", "land", "c1"); r.code != 0 || strings.Count(r.stdout, "\tlanded\t") != 2 {
		t.Fatalf("context land: %s", r)
	}
	if got := e.head("app"); got != e.head("c1.app") {
		t.Fatalf("app at %s, c1.app at %s", got, e.head("c1.app"))
	}
	waitFor(t, 10*time.Second, "the mounted parent shows the landed file", func() bool {
		b, err := os.ReadFile(filepath.Join(mpMain, "new-app"))
		return err == nil && string(b) == "A\n"
	})
	for _, mp := range []string{mpApp, mpLib, mpMain} {
		e.unmount(mp)
	}
	e.fsck()
}
