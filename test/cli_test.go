package test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

func TestInitIsIdempotentAndPrintsStorePath(t *testing.T) {
	e := newEnv(t)
	if got := e.ok("init"); got != e.store {
		t.Fatalf("init printed %q, want %q", got, e.store)
	}
	if got := e.ok("init"); got != e.store {
		t.Fatalf("second init printed %q", got)
	}
	e.fsck()
}

func TestStoreFromEnvironment(t *testing.T) {
	e := newEnv(t)
	cmd := []string{"init"}
	r := e.run(cmd...) // --store wins
	if r.line() != e.store {
		t.Fatal(r)
	}
}

func TestCreateForkCommitDiffExport(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"a.txt": "one\n", "dir/b.txt": "two\n", "gone.txt": "bye\n", "t": "file\n", "empty/": ""})
	head := e.ok("create", "main", "--from", src)
	if len(head) != 64 {
		t.Fatalf("create printed %q, want a 64-char id", head)
	}
	if got := e.ok("fork", "main", "child"); got != head {
		t.Fatalf("fork printed %q, want parent head %q", got, head)
	}
	work := filepath.Join(e.dir, "work")
	if n := e.ok("export", "child", work); n != "4" {
		t.Fatalf("export printed %q, want 4 files", n)
	}
	writeTree(t, work, map[string]string{"a.txt": "one\nmore\n", "new.txt": "new\n"})
	os.Remove(filepath.Join(work, "gone.txt"))
	os.Remove(filepath.Join(work, "t"))
	os.Mkdir(filepath.Join(work, "t"), 0o755)
	writeTree(t, work, map[string]string{"t/inner": "x"})
	next := e.ok("commit", "child", work)
	if next == head {
		t.Fatal("commit did not make a new generation")
	}
	stat := e.run("diff", "child", "--stat")
	want := "M\ta.txt\nD\tgone.txt\nA\tnew.txt\nT\tt\n"
	if stat.code != 0 || !strings.Contains(stat.stdout, "M\ta.txt\n") || !strings.Contains(stat.stdout, "D\tgone.txt\n") ||
		!strings.Contains(stat.stdout, "A\tnew.txt\n") {
		t.Fatalf("diff --stat:\n%s\nwant lines like:\n%s", stat, want)
	}
	unified := e.run("diff", "child")
	if !strings.Contains(unified.stdout, "+more") || !strings.Contains(unified.stdout, "--- a/a.txt") {
		t.Fatalf("unified diff:\n%s", unified)
	}
	// diff against another workspace and a generation prefix.
	if r := e.run("diff", "child", "main", "--stat"); r.stdout != stat.stdout {
		t.Fatalf("diff child main = %q, want %q", r.stdout, stat.stdout)
	}
	if r := e.run("diff", "child", head[:10], "--stat"); r.stdout != stat.stdout {
		t.Fatalf("diff by prefix = %q", r.stdout)
	}
	// export NAME@GEN gives the old tree.
	old := filepath.Join(e.dir, "old")
	e.ok("export", "child@"+head[:12], old)
	if readFile(t, filepath.Join(old, "a.txt")) != "one\n" {
		t.Fatal("export of an older generation has new content")
	}
	if fi, err := os.Stat(filepath.Join(old, "empty")); err != nil || !fi.IsDir() {
		t.Fatalf("empty directory not exported: %v", err)
	}
	e.fsck()
}

func TestLogAndUndo(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "1"})
	g1 := e.ok("create", "w", "--from", src)
	writeTree(t, src, map[string]string{"f": "2"})
	g2 := e.ok("commit", "w", src)
	writeTree(t, src, map[string]string{"f": "3"})
	g3 := e.ok("commit", "w", src)
	log := strings.Split(strings.TrimSpace(e.run("log", "w").stdout), "\n")
	if len(log) != 3 || !strings.HasPrefix(log[0], g3+"\tcommit\t") || !strings.HasPrefix(log[2], g1+"\tcreate\t") {
		t.Fatalf("log:\n%s", strings.Join(log, "\n"))
	}
	if got := strings.Split(strings.TrimSpace(e.run("log", "w", "-n", "1").stdout), "\n"); len(got) != 1 {
		t.Fatalf("log -n 1 gave %d lines", len(got))
	}
	if got := e.ok("undo", "w"); got != g2 {
		t.Fatalf("undo -> %s, want %s", got, g2)
	}
	if got := e.ok("undo", "w"); got != g1 {
		t.Fatalf("second undo -> %s, want %s", got, g1)
	}
	e.fails(2, "undo", "w")
	out := filepath.Join(e.dir, "out")
	e.ok("export", "w", out)
	if readFile(t, filepath.Join(out, "f")) != "1" {
		t.Fatal("undo did not restore the content")
	}
	var entries []map[string]any
	if err := json.Unmarshal([]byte(e.run("--json", "log", "w").stdout), &entries); err != nil || len(entries) != 5 {
		t.Fatalf("log --json: %v, %d entries", err, len(entries))
	}
}

func TestInvalidNamesAreRefusedBeforeAnyChange(t *testing.T) {
	e := newEnv(t)
	e.ok("create", "main")
	bad := []string{"", "..", ".hidden", "-dash", "a/b", "a b", strings.Repeat("x", 129), "tab\t", "ünï"}
	for _, name := range bad {
		r := e.run("create", name)
		if r.code != 2 {
			t.Errorf("create %q: %s", name, r)
		}
		if !strings.HasPrefix(r.stderr, "acyclicfs: ") {
			t.Errorf("create %q: stderr %q", name, r.stderr)
		}
		if r := e.run("fork", "main", name); r.code != 2 {
			t.Errorf("fork main %q: %s", name, r)
		}
	}
	if got := e.ok("create", strings.Repeat("x", 128)); len(got) != 64 {
		t.Fatal("128-byte name refused")
	}
	var rows []map[string]any
	json.Unmarshal([]byte(e.run("--json", "list").stdout), &rows)
	if len(rows) != 2 {
		t.Fatalf("bad names changed state: %d workspaces", len(rows))
	}
	e.fsck()
}

func TestUsageAndLookupErrors(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "x"})
	e.ok("create", "main", "--from", src)
	r := e.fails(2, "fork", "nope", "child")
	if !strings.Contains(r.stderr, "unknown workspace") || !strings.Contains(r.stderr, "hint:") {
		t.Errorf("unknown workspace error: %q", r.stderr)
	}
	e.fails(2, "diff", "main", "zzzzzzzzzz")
	e.fails(2, "fork", "main", "c", "--at", "abc")       // too short
	e.fails(2, "fork", "main", "c", "--at", "xyzxyzxyz") // not hex
	e.fails(2, "fork", "main", "c", "--at", "0000000000000000")
	e.fails(2, "create", "x", "--from", filepath.Join(src, "f"))         // a file
	e.fails(2, "create", "y", "--from", filepath.Join(e.dir, "nowhere")) // missing
	e.fails(2, "rebase", "main")                                         // root
	e.fails(2, "frobnicate")
	e.fails(2, "log", "main", "--bogus")
	// A bad flag value names the command and says what was expected, in
	// one line, without strconv's or time's wording.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"log", "main", "-n", "abc"}, `acyclicfs: log: invalid argument "abc" for "-n, --number" flag: not a number`},
		{[]string{"mount", "main", e.dir, "--lease-ttl", "xyz"}, `acyclicfs: mount: invalid argument "xyz" for "--lease-ttl" flag: not a duration`},
	} {
		r := e.fails(2, c.args...)
		if !strings.HasPrefix(r.stderr, c.want) || strings.Contains(r.stderr, "strconv") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: stderr %q, want %q", c.args, r.stderr, c.want)
		}
	}
	e.fails(2, "fork", "main")
	e.fails(2, "create", "main") // exists
	// export to a non-empty directory needs --force; a file target is refused.
	dst := filepath.Join(e.dir, "dst")
	writeTree(t, dst, map[string]string{"keep": "k"})
	e.fails(2, "export", "main", dst)
	if readFile(t, filepath.Join(dst, "keep")) != "k" {
		t.Fatal("refused export touched the target")
	}
	e.fails(2, "export", "main", filepath.Join(dst, "keep"))
	if n := e.ok("export", "main", dst, "--force"); n != "1" {
		t.Fatalf("export --force printed %q", n)
	}
	if _, err := os.Stat(filepath.Join(dst, "keep")); !os.IsNotExist(err) {
		t.Fatal("export --force kept an old file")
	}
	// A symlinked target is refused, never written through.
	link := filepath.Join(e.dir, "link")
	os.Symlink(filepath.Join(e.dir, "elsewhere"), link)
	e.fails(2, "export", "main", link)
	if _, err := os.Stat(filepath.Join(e.dir, "elsewhere")); !os.IsNotExist(err) {
		t.Fatal("export wrote through a symlink")
	}
}

func TestAmbiguousGenerationPrefix(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	ids := map[string][]string{}
	// Make generations until two share an 8-character prefix is unlikely;
	// instead find two sharing the first hex digit and use a 1-char prefix
	// padded: prefixes under 8 chars are refused as malformed (exit 2).
	writeTree(t, src, map[string]string{"f": "0"})
	g := e.ok("create", "w", "--from", src)
	ids[g[:1]] = append(ids[g[:1]], g)
	r := e.fails(2, "fork", "w", "c", "--at", g[:7])
	if !strings.Contains(r.stderr, "generation") {
		t.Errorf("short prefix error: %q", r.stderr)
	}
	if got := e.ok("fork", "w", "c", "--at", g[:8]); got != g {
		t.Fatalf("8-char prefix resolved to %q", got)
	}
}

func TestImportOddTrees(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"target.txt": "T", "dir/x": "x", "empty/": ""})
	os.Symlink("target.txt", filepath.Join(src, "rel-link"))
	os.Symlink("/etc/passwd", filepath.Join(src, "abs-link"))
	os.Symlink("dir", filepath.Join(src, "dir-link"))
	os.Link(filepath.Join(src, "target.txt"), filepath.Join(src, "hard"))
	syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644)
	os.WriteFile(filepath.Join(src, "new\nline"), []byte("nl"), 0o644)
	os.WriteFile(filepath.Join(src, "bad\xffutf8"), []byte("bad"), 0o644)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	r := e.run("create", "w", "--from", src)
	if r.code != 0 {
		t.Fatal(r)
	}
	if strings.Contains(r.stderr, "warning") {
		t.Fatalf("import warned: %q", r.stderr) // a FIFO is an entry like any other
	}
	out := filepath.Join(e.dir, "out")
	e.ok("export", "w", out)
	for link, want := range map[string]string{"rel-link": "target.txt", "abs-link": "/etc/passwd", "dir-link": "dir"} {
		got, err := os.Readlink(filepath.Join(out, link))
		if err != nil || got != want {
			t.Errorf("symlink %s -> %q (%v), want %q", link, got, err, want)
		}
	}
	var a, b syscall.Stat_t
	syscall.Stat(filepath.Join(out, "hard"), &a)
	syscall.Stat(filepath.Join(out, "target.txt"), &b)
	if a.Ino != b.Ino || a.Nlink != 2 || readFile(t, filepath.Join(out, "hard")) != "T" {
		t.Error("hard link should come back as a second name of the same file")
	}
	if readFile(t, filepath.Join(out, "new\nline")) != "nl" || readFile(t, filepath.Join(out, "bad\xffutf8")) != "bad" {
		t.Error("odd names not preserved")
	}
	if fi, err := os.Stat(filepath.Join(out, "run.sh")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("executable bit lost: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(out, "empty")); err != nil || !fi.IsDir() {
		t.Error("empty dir lost")
	}
	if fi, err := os.Lstat(filepath.Join(out, "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo not exported as a FIFO: %v %v", fi, err)
	}
	// diff --stat keeps one line per path: the odd names come quoted.
	e.ok("create", "empty")
	stat := e.run("diff", "w", "empty", "--stat")
	for _, want := range []string{"A\t\"new\\nline\"\n", "A\t\"bad\\xffutf8\"\n", "A\trun.sh\n"} {
		if !strings.Contains(stat.stdout, want) {
			t.Errorf("diff --stat lacks %q:\n%s", want, stat.stdout)
		}
	}
	for _, line := range strings.Split(strings.TrimSuffix(stat.stdout, "\n"), "\n") {
		if len(line) < 3 || line[1] != '\t' {
			t.Errorf("diff --stat line %q is not LETTER TAB PATH", line)
		}
	}
	e.fsck()
}

func TestCorruptBlobIsReported(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"f": "precious content\n", "g": "other\n"})
	e.ok("create", "w", "--from", src)
	var blobs []string
	filepath.Walk(filepath.Join(e.store, "objects"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			blobs = append(blobs, p)
		}
		return nil
	})
	sort.Strings(blobs)
	if len(blobs) == 0 {
		t.Fatal("no blob files found under objects/")
	}
	var victim string
	for _, b := range blobs {
		if strings.Contains(readFile(t, b), "precious") {
			victim = b
		}
	}
	if victim == "" {
		t.Fatal("blob of f not found")
	}
	os.Chmod(victim, 0o644)
	os.WriteFile(victim, []byte("precious cOntent\n"), 0o444)
	r := e.run("fsck")
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, filepath.Base(filepath.Dir(victim))) {
		t.Fatalf("fsck should name the corrupt blob:\n%s", r)
	}
	r = e.run("export", "w", filepath.Join(e.dir, "out"))
	if r.code != 1 || !strings.Contains(r.stderr, "corrupt") {
		t.Fatalf("export of corrupt data: %s", r)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "out")); !os.IsNotExist(err) {
		t.Fatal("failed export left a partial target")
	}
}

func TestReadOnlyStoreIsAClearError(t *testing.T) {
	if os.Getuid() == 0 {
		// root ignores directory permissions; use a read-only bind mount.
		e := newEnv(t)
		e.ok("init")
		ro := filepath.Join(e.dir, "ro")
		os.Mkdir(ro, 0o755)
		if err := syscall.Mount(e.store, ro, "", syscall.MS_BIND, ""); err != nil {
			t.Skipf("bind mount: %v", err)
		}
		defer syscall.Unmount(ro, syscall.MNT_DETACH)
		if err := syscall.Mount("", ro, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			t.Skipf("remount read-only: %v", err)
		}
		r := e.run("--store", ro, "create", "x")
		if r.code != 1 || !strings.Contains(r.stderr, "read-only") {
			t.Fatalf("create in read-only store: %s", r)
		}
		return
	}
}

func TestRemove(t *testing.T) {
	e := newEnv(t)
	e.ok("create", "main")
	e.ok("fork", "main", "a")
	e.ok("fork", "a", "a1")
	e.fails(2, "rm", "a")
	e.ok("rm", "a", "--recursive")
	e.fails(2, "log", "a1")
	e.ok("rm", "main")
	e.fails(2, "rm", "main")
	e.fsck()
}

func TestGCFreesUnreachable(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"big": strings.Repeat("x", 100000)})
	e.ok("create", "tmp", "--from", src)
	e.ok("create", "keep")
	e.ok("rm", "tmp")
	if freed := e.ok("gc"); freed == "0" {
		t.Fatal("gc freed nothing after rm")
	}
	if freed := e.ok("gc"); freed != "0" {
		t.Fatalf("second gc freed %s", freed)
	}
	e.fsck()
}

// TestJSONListsAreNeverNull: machine-readable output has empty lists, not
// null or nothing, where there is nothing to list; status's header is one
// word per column.
func TestJSONListsAreNeverNull(t *testing.T) {
	e := newEnv(t)
	e.ok("create", "w")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--json", "fsck"}, `"problems":[]`},
		{[]string{"--json", "shutdown"}, `"unmounted":[]`}, // no daemon runs
	} {
		r := e.run(c.args...)
		if r.code != 0 || !strings.Contains(strings.Join(strings.Fields(r.stdout), ""), c.want) {
			t.Errorf("%v: %s; want %s", c.args, r, c.want)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Errorf("%v: not JSON: %v", c.args, err)
		}
	}
	header := strings.Fields(strings.SplitN(e.run("status").stdout, "\n", 2)[0])
	if len(header) != 7 || header[4] != "PENDING-PARENT" {
		t.Errorf("status header %q", header)
	}
}

// runWith runs acyclicfs in cwd with extra environment variables (after
// the harness's own).
func (e *env) runWith(cwd string, extraEnv []string, args ...string) result {
	e.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = cwd
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(append(os.Environ(), "ACYCLICFS_STORE="), extraEnv...)
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			e.t.Fatalf("run %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{out.String(), errb.String(), code}
}

// TestDestructivePathsRefused: a path argument that would destroy data
// is refused with exit 2 and a message saying why, and nothing changes:
// export's DIR empty (an unset $OUT: the working directory), or with
// --force the working directory, a directory holding it, $HOME, the
// store, a directory holding the store, another store; --store, init
// STORE or mount's MOUNTPOINT empty; --store or init at a directory of
// the user's files (it would be chmodded 0700 and get meta.db); create
// --from the store, --in-place $HOME; a mountpoint inside the store.
// (Export over / is refused too: TestCheckSafeTarget, not run here.)
func TestDestructivePathsRefused(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"a.txt": "alpha\n"})
	e.ok("create", "w", "--from", src)
	cwd := filepath.Join(e.dir, "cwd")
	writeTree(t, cwd, map[string]string{"mine.txt": "keep me\n", "sub/deep.txt": "me too\n"})
	home := filepath.Join(e.dir, "home")
	writeTree(t, home, map[string]string{".profile": "keep\n"})
	other := filepath.Join(e.dir, "other")
	if r := (&env{t: t, store: other, dir: e.dir}).run("init"); r.code != 0 {
		t.Fatalf("init the other store: %s", r)
	}
	if err := os.Mkdir(filepath.Join(e.store, "mnt"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	// The store itself may gain the daemon's files (mount starts it).
	before := dirState(t, e.dir, e.store)
	envHome := []string{"HOME=" + home}
	st := "--store=" + e.store
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{st, "export", "w", "", "--force"}, "empty path"},
		{[]string{st, "export", "w", "", "--force=true"}, "empty path"},
		{[]string{st, "export", "w", "."}, "not empty"},
		{[]string{st, "export", "w", ".", "--force"}, "current directory"},
		{[]string{st, "export", "w", "sub/..", "--force"}, "current directory"},
		{[]string{st, "export", "w", "..", "--force"}, "holds"},
		{[]string{st, "export", "w", home, "--force"}, "home directory"},
		{[]string{st, "export", "w", e.store, "--force"}, "is the store"},
		{[]string{st, "export", "w", filepath.Join(e.store, "objects"), "--force"}, "inside the store"},
		{[]string{st, "export", "w", other, "--force"}, "inside the store " + other},
		{[]string{"--store", "", "list"}, "empty path"},
		{[]string{"--store=", "create", "x"}, "empty path"},
		{[]string{"init", ""}, "empty path"},
		{[]string{st, "commit", "w", ""}, "empty path"},
		{[]string{"--store", cwd, "list"}, "not an acyclicfs store"},
		{[]string{"--store", cwd, "create", "x"}, "not an acyclicfs store"},
		{[]string{"init", cwd}, "not an acyclicfs store"},
		{[]string{"init", "."}, "not an acyclicfs store"},
		{[]string{"--store", home, "mount", "w", filepath.Join(e.dir, "mnt")}, "not an acyclicfs store"},
		{[]string{st, "mount", "w", ""}, "empty path"},
		{[]string{st, "mount", "w", filepath.Join(e.store, "mnt")}, "inside the store"},
		{[]string{st, "create", "x", "--from", ""}, "needs a directory"},
		{[]string{st, "create", "x", "--from", e.store}, "store"},
		{[]string{st, "create", "x", "--from", e.dir}, "store"},
		{[]string{st, "create", "x", "--from", other}, "inside the store"},
		{[]string{st, "create", "x", "--in-place", ""}, "needs a directory"},
		{[]string{st, "create", "x", "--in-place", home}, "home directory"},
		{[]string{st, "create", "x", "--in-place", e.dir}, "holds the store"},
	} {
		r := e.runWith(cwd, envHome, c.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "acyclicfs: ") || !strings.Contains(r.stderr, c.says) {
			t.Errorf("acyclicfs %q: want exit 2 saying %q, got %s", c.args, c.says, r)
		}
	}
	sameTree(t, "the test's directory", before, dirState(t, e.dir, e.store))
	if got := readFile(t, filepath.Join(cwd, "mine.txt")); got != "keep me\n" {
		t.Fatalf("cwd's file: %q", got)
	}
	e.fsck()

	// What is meant still works: a new directory, --force over one's own
	// directory, a store in an empty directory.
	out := filepath.Join(cwd, "out")
	if n := e.runWith(cwd, envHome, st, "export", "w", "out").line(); n != "1" {
		t.Fatalf("export into a new directory printed %q", n)
	}
	writeTree(t, out, map[string]string{"old.txt": "old\n"})
	if r := e.runWith(cwd, envHome, st, "export", "w", "out", "--force"); r.code != 0 {
		t.Fatalf("export --force into a directory of its own: %s", r)
	}
	if _, err := os.Stat(filepath.Join(out, "old.txt")); !os.IsNotExist(err) {
		t.Fatalf("export --force kept old.txt: %v", err)
	}
	empty := filepath.Join(e.dir, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	if r := e.runWith(cwd, envHome, "init", empty); r.code != 0 {
		t.Fatalf("init in an empty directory: %s", r)
	}
}
