package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Real tools run inside a mount as one `acyclicfs exec` lease each; after
// unmount the workspace is exported and the tools' results are checked
// there, so every test proves both that the tool works on the mount and
// that its writes were captured.

// toolEnv gives every tool a private HOME and no user configuration.
func (e *env) toolEnv() []string {
	home := filepath.Join(e.dir, "home")
	os.MkdirAll(home, 0o755)
	return []string{"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
		"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com",
		"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com"}
}

// toolMount creates workspace w (from a one-file tree), mounts it and
// returns the mountpoint.
func toolMount(t *testing.T, flags ...string) (*env, string) {
	e := newMountEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"seed.txt": "seed\n"})
	e.ok("create", "w", "--from", src)
	return e, e.mountAt("w", flags...)
}

// unmountAndExport unmounts, checks the outcome and the capture in the log,
// and exports the workspace.
func (e *env) unmountAndExport(mp string) string {
	e.t.Helper()
	switch st := e.statusOf("w"); os.Getenv(transportEnv) {
	case "io_uring":
		if st.Transport != "io_uring" || st.UringRequests == 0 {
			e.t.Fatalf("mounted with --transport io_uring, but status reports transport %q and %d requests answered over io_uring", st.Transport, st.UringRequests)
		}
	case "dev-fuse":
		if st.Transport != "dev-fuse" || st.UringRequests != 0 {
			e.t.Fatalf("mounted with --transport dev-fuse, but status reports transport %q and %d requests answered over io_uring", st.Transport, st.UringRequests)
		}
	}
	if o, _ := e.unmount(mp); o != "current" {
		e.t.Fatalf("unmount of a root workspace: outcome %q, want current", o)
	}
	if l := e.log("w"); countKind(l, "capture") == 0 {
		e.t.Fatalf("log w has no capture after tool runs: %s", kinds(l))
	}
	out := e.exportTo("w", "export")
	e.fsck()
	return out
}

func TestToolGit(t *testing.T) {
	t.Parallel()
	needTool(t, "git")
	e, mp := toolMount(t)
	script := `set -e
git init -q
git checkout -q -b main
echo one > a.txt && git add a.txt && git commit -qm one
git checkout -q -b feature
echo two > b.txt && mkdir -p sub && echo deep > sub/c.txt
git add -A && git commit -qm two
git checkout -q main
echo three >> a.txt && git commit -qam three
git merge -q --no-edit feature
test -z "$(git status --porcelain)"
git log --oneline | wc -l
git fsck --strict 2>&1
`
	o, r := e.execOK(mp, script, e.toolEnv()...)
	if o != "current" {
		t.Errorf("exec outcome %q, want current", o)
	}
	if n := strings.TrimSpace(strings.Split(r.stdout, "\n")[0]); n != "4" {
		t.Fatalf("git log inside the mount has %s commits, want 4:\n%s", n, r)
	}
	// A second session sees the repository the first one left.
	_, r = e.execOK(mp, `git status --porcelain && git rev-parse --abbrev-ref HEAD && cat sub/c.txt`, e.toolEnv()...)
	if r.stdout != "main\ndeep\n" {
		t.Fatalf("second session: %q", r.stdout)
	}
	out := e.unmountAndExport(mp)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", out}, args...)...)
		cmd.Env = append(os.Environ(), e.toolEnv()...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v in the export: %v\n%s", args, err, b)
		}
		return string(b)
	}
	if n := len(strings.Split(strings.TrimSpace(git("log", "--oneline")), "\n")); n != 4 {
		t.Fatalf("exported repository has %d commits, want 4", n)
	}
	if m := strings.TrimSpace(git("rev-list", "--merges", "HEAD")); len(strings.Fields(m)) != 1 {
		t.Fatalf("exported repository has merges %q, want exactly one", m)
	}
	git("fsck", "--strict")
	if s := git("status", "--porcelain"); s != "" {
		t.Fatalf("exported work tree is not clean:\n%s", s)
	}
	if got := readFile(t, filepath.Join(out, "a.txt")); got != "one\nthree\n" {
		t.Fatalf("a.txt = %q", got)
	}
}

func TestToolTarWithSymlinks(t *testing.T) {
	t.Parallel()
	needTool(t, "tar")
	e, mp := toolMount(t)
	src := filepath.Join(e.dir, "tree")
	sampleTree(t, src)
	want := treeList(t, src)
	back := filepath.Join(e.dir, "back")
	os.Mkdir(back, 0o755)
	script := `set -e
mkdir x
tar -C "$SRC" -cf - . | tar -C x -xf -
tar -C x -cf - . | tar -C "$BACK" -xf -
readlink x/link-dir
cat x/link-dir/util.h
`
	_, r := e.execOK(mp, script, "SRC="+src, "BACK="+back)
	if r.stdout != "src/lib\n#define X 1\n" {
		t.Fatalf("symlinks inside the mount: %q", r.stdout)
	}
	sameTree(t, "tree tarred out of the mount", want, treeList(t, back))
	out := e.unmountAndExport(mp)
	sameTree(t, "exported tree", want, treeList(t, filepath.Join(out, "x")))
}

func TestToolCpArchive(t *testing.T) {
	t.Parallel()
	e, mp := toolMount(t)
	src := filepath.Join(e.dir, "tree")
	sampleTree(t, src)
	want := treeList(t, src)
	// cp -a keeps modes and mtimes: compare find's view inside the mount
	// with the source's.
	list := `find . -printf '%y %m %s %TY-%Tm-%Td %TH:%TM:%TS %p -> %l\n' | LC_ALL=C sort`
	srcList := inSession(t, src, list)
	_, r := e.execOK(mp, `set -e; cp -a "$SRC" copy; cd copy && `+list, "SRC="+src)
	if r.stdout != srcList {
		t.Fatalf("find inside the mount after cp -a:\n%s\nwant (source):\n%s", r.stdout, srcList)
	}
	out := e.unmountAndExport(mp)
	sameTree(t, "exported copy", want, treeList(t, filepath.Join(out, "copy")))
}

func TestToolGoBuildAndTest(t *testing.T) {
	t.Parallel()
	needTool(t, "go")
	e, mp := toolMount(t)
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Skipf("go env GOCACHE: %v", err)
	}
	// The build cache lives outside the mount (the machine's, already warm:
	// a cold cache would compile the standard library for a minute); the
	// module, its sources and the built binary live in the mount.
	env := append(e.toolEnv(), "GOCACHE="+strings.TrimSpace(string(gocache)), "GOPATH="+filepath.Join(e.dir, "gopath"),
		"GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off", "CGO_ENABLED=0")
	script := `set -e
mkdir -p mod/calc && cd mod
printf 'module example.com/m\n\ngo 1.21\n' > go.mod
cat > calc/calc.go <<'EOF'
package calc

// Sum adds.
func Sum(xs ...int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}
EOF
cat > calc/calc_test.go <<'EOF'
package calc

import "testing"

func TestSum(t *testing.T) {
	t.Parallel()
	if Sum(1, 2, 3) != 6 {
		t.Fatal("bad sum")
	}
}
EOF
cat > main.go <<'EOF'
package main

import (
	"fmt"

	"example.com/m/calc"
)

func main() { fmt.Println("sum", calc.Sum(20, 22)) }
EOF
go vet ./...
go build -o app .
./app
go test -count=1 ./... 2>&1
`
	_, r := e.execOK(mp, script, env...)
	if !strings.HasPrefix(r.stdout, "sum 42\n") || !strings.Contains(r.stdout, "ok  \texample.com/m/calc") {
		t.Fatalf("go build/test inside the mount:\n%s", r)
	}
	out := e.unmountAndExport(mp)
	b, err := exec.Command(filepath.Join(out, "mod", "app")).Output()
	if err != nil || string(b) != "sum 42\n" {
		t.Fatalf("exported binary: %q, %v", b, err)
	}
}

func TestToolSqliteConcurrentWriters(t *testing.T) {
	t.Parallel()
	needTool(t, "sqlite3")
	e, mp := toolMount(t)
	// Two writers insert 200 rows each, one transaction per row, into one
	// database at once: they contend for sqlite's POSIX locks on the mount.
	// Once with a rollback journal, once in WAL mode (shared memory: the
	// -shm file is mmapped by both writers).
	script := `set -e
gen() { echo '.timeout 30000'; i=1; while [ $i -le 200 ]; do echo "INSERT INTO t VALUES('$1',$i);"; i=$((i+1)); done; }
gen a > a.sql; gen b > b.sql
for mode in delete wal; do
	sqlite3 $mode.sqlite "PRAGMA journal_mode=$mode; CREATE TABLE t(w TEXT, i INT);" >/dev/null
	sqlite3 $mode.sqlite < a.sql & pa=$!
	sqlite3 $mode.sqlite < b.sql & pb=$!
	wait $pa; wait $pb
	sqlite3 $mode.sqlite 'SELECT count(*) FROM t; SELECT count(DISTINCT w||i) FROM t; PRAGMA integrity_check;'
done
`
	_, r := e.execOK(mp, script)
	if r.stdout != "400\n400\nok\n400\n400\nok\n" {
		t.Fatalf("sqlite inside the mount (delete, then wal): %s", r)
	}
	out := e.unmountAndExport(mp)
	for _, mode := range []string{"delete", "wal"} {
		db := filepath.Join(out, mode+".sqlite")
		for _, side := range []string{"-journal", "-wal", "-shm"} {
			if _, err := os.Stat(db + side); !os.IsNotExist(err) {
				t.Errorf("a leftover %s%s was captured: %v", mode, side, err)
			}
		}
		b, err := exec.Command("sqlite3", db, "SELECT count(*) FROM t; PRAGMA integrity_check;").CombinedOutput()
		if err != nil || string(b) != "400\nok\n" {
			t.Fatalf("exported %s database: %q, %v", mode, b, err)
		}
	}
}

func TestToolMake(t *testing.T) {
	t.Parallel()
	needTool(t, "make")
	e, mp := toolMount(t)
	script := `set -e
printf 'hello\n' > in.txt
printf 'out.txt: in.txt\n\ttr a-z A-Z < in.txt > out.txt\n\techo built >> log.txt\n' > Makefile
make -s
make -q
make -s
touch -d '-10 seconds' out.txt
! make -q
make -s
cat out.txt log.txt
`
	_, r := e.execOK(mp, script)
	if r.stdout != "HELLO\nbuilt\nbuilt\n" {
		t.Fatalf("make inside the mount (want two builds, the second after touch):\n%s", r)
	}
	// A new session: everything is up to date.
	if _, r := e.execOK(mp, `make -q && echo up-to-date`); r.stdout != "up-to-date\n" {
		t.Fatalf("make -q in a later session: %s", r)
	}
	out := e.unmountAndExport(mp)
	if got := readFile(t, filepath.Join(out, "out.txt")); got != "HELLO\n" {
		t.Fatalf("exported out.txt = %q", got)
	}
}
