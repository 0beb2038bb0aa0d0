package test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

// git's fsmonitor hook (docs/git.md "fsmonitor"): a mounted repository is
// pointed at `acyclicfs fsmonitor`, and git status with it must say
// exactly what git status without it says.

// fsmRepo makes a committed repository under e.dir and returns its path.
func fsmRepo(t *testing.T, e *env) string {
	t.Helper()
	repo := filepath.Join(e.dir, "repo")
	if _, err := os.Stat(repo); err == nil {
		return repo
	}
	writeTree(t, repo, map[string]string{
		"a": "a\n", "b": "b\n", "d1/x": "x\n", "d1/y": "y\n", "d1/sub/z": "z\n", "d2/w": "w\n",
	})
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "start")
	return repo
}

// gitIn runs a git command line in its own session in dir (a mount):
// the session's end lets the mount reconcile, as an agent's tool call.
func gitIn(t *testing.T, dir, args string) string {
	t.Helper()
	return inSession(t, dir, gitShellEnv()+"git "+args)
}

// statusPair runs git status with the hook and then a full scan that
// neither uses nor disturbs the index's fsmonitor state.
func statusPair(t *testing.T, mp string) (withHook, scan string) {
	t.Helper()
	withHook = gitIn(t, mp, "status --porcelain")
	scan = gitIn(t, mp, "--no-optional-locks -c core.fsmonitor=false -c core.untrackedCache=false status --porcelain")
	return withHook, scan
}

// hook runs `acyclicfs fsmonitor 2 token` in dir (in its own session)
// and returns the new token and the paths.
func (e *env) hook(t *testing.T, dir, token string) (string, []string) {
	t.Helper()
	return hookWith(t, e.store, dir, token)
}

func hookWith(t *testing.T, store, dir, token string) (string, []string) {
	t.Helper()
	cmd := exec.Command(bin, "--store", store, "fsmonitor", "2", token)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ACYCLICFS_STORE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	r, err := runLimited(cmd, sessionLimit)
	if err != nil || r.code != 0 || r.stderr != "" {
		t.Fatalf("fsmonitor hook in %s: %v %s", dir, err, r)
	}
	f := strings.Split(r.stdout, "\x00")
	if len(f) < 2 || f[len(f)-1] != "" || f[0] == "" {
		t.Fatalf("fsmonitor hook printed %q", r.stdout)
	}
	paths := f[1 : len(f)-1]
	sort.Strings(paths)
	return f[0], paths
}

func everything(paths []string) bool { return len(paths) == 1 && paths[0] == "/" }

func TestFSMonitorConfigAndHook(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo := fsmRepo(t, e)
	e.ok("create", "w", "--from", repo)
	mp := e.mountAt("w")
	cfg := inSession(t, mp, "cat .git/config")
	if !strings.Contains(cfg, "fsmonitor = ") || !strings.Contains(cfg, "untrackedCache = true") {
		t.Fatalf(".git/config of the mount:\n%s", cfg)
	}
	// The small hook beside the binary, given the daemon's socket.
	if got := strings.TrimSpace(gitIn(t, mp, "config core.fsmonitor")); !strings.Contains(got, filepath.Join(filepath.Dir(bin), "acyclicfs-fsmonitor")) || !strings.HasSuffix(got, "/daemon.sock'") {
		t.Fatalf("core.fsmonitor = %q", got)
	}
	if st := gitIn(t, mp, "status --porcelain"); st != "" {
		t.Fatalf("git status in a fresh mount:\n%s", st)
	}

	// Anything not a token of ours: a fresh token and "everything".
	for _, bad := range []string{"", "builtin:fake", "1700000000000000000", "acyclicfs:1:zz:-:0:c", "acyclicfs:9:x"} {
		tok, paths := e.hook(t, mp, bad)
		if !everything(paths) || !strings.HasPrefix(tok, "acyclicfs:1:") {
			t.Fatalf("hook(%q) = %q %q, want a token and /", bad, tok, paths)
		}
	}
	// Only protocol version 2: anything else is a usage error (git then
	// tries version 1, which it does not get either, and scans).
	if r := e.fails(2, "fsmonitor", "1", "0"); !strings.Contains(r.stderr, "version") {
		t.Fatalf("fsmonitor 1: %s", r)
	}
	tok, _ := e.hook(t, mp, "")
	// No change: nothing to report.
	if tok2, paths := e.hook(t, mp, tok); len(paths) != 0 {
		t.Fatalf("hook(%q) with no change = %q %q", tok, tok2, paths)
	}
	// Changes, held open by a lease so the mount does not reconcile in
	// between: exactly the changed paths (the log of removed names, the
	// dirty inodes), never .git/.
	hold := e.startHolder(t, mp)
	inSession(t, mp, "echo more >> a; rm b; mkdir -p n/m; echo 1 > n/m/f; mv d1/x d2/x2; chmod +x d2/w; ln -s a lnk")
	tok3, paths := e.hook(t, mp, tok)
	want := []string{"a", "b", "d1", "d1/x", "d2", "d2/w", "d2/x2", "lnk", "n", "n/m", "n/m/f"}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Fatalf("hook after changes = %q, want %q", paths, want)
	}
	// A writer open now is reported while open, and once more after it
	// closed.
	w := e.startWriter(t, mp, "d1/y")
	_, paths = e.hook(t, mp, tok3)
	if strings.Join(paths, " ") != "d1/y" {
		t.Fatalf("hook with a writer open = %q, want d1/y", paths)
	}
	tok4, _ := e.hook(t, mp, tok3)
	if _, paths = e.hook(t, mp, tok4); strings.Join(paths, " ") != "d1/y" {
		t.Fatalf("hook with a writer still open = %q, want d1/y", paths)
	}
	w.write(t)
	w.close(t)
	if _, paths = e.hook(t, mp, tok4); strings.Join(paths, " ") != "d1/y" {
		t.Fatalf("hook after the writer closed = %q, want d1/y", paths)
	}
	// A directory moved: git's untracked cache cannot be fixed path by
	// path, so everything.
	tok5, _ := e.hook(t, mp, tok4)
	inSession(t, mp, "mv n n2")
	if _, paths = e.hook(t, mp, tok5); !everything(paths) {
		t.Fatalf("hook after a directory rename = %q, want /", paths)
	}
	// A worktree in a subdirectory of the mount: its paths only, relative
	// to it.
	subTok, _ := e.hook(t, filepath.Join(mp, "d2"), "")
	inSession(t, mp, "echo 2 > d2/w; echo 3 > a")
	if _, paths = e.hook(t, filepath.Join(mp, "d2"), subTok); strings.Join(paths, " ") != "w" {
		t.Fatalf("hook in d2 = %q, want w", paths)
	}
	hold.stop(t)

	// A token of another workspace's mount: dirty, so everything.
	e.ok("create", "v", "--from", repo)
	mv := e.mountAt("v")
	if _, paths = e.hook(t, mv, tok3); !everything(paths) {
		t.Fatalf("hook in v with w's dirty token = %q, want /", paths)
	}

	// Outside any mount (an exported tree keeps the config): everything.
	out := e.exportTo("w", "out")
	if _, paths = e.hook(t, out, ""); !everything(paths) {
		t.Fatalf("hook outside a mount = %q, want /", paths)
	}
	if st, scan := git(t, out, "status", "--porcelain"), git(t, out, "-c", "core.fsmonitor=false", "status", "--porcelain"); st != scan {
		t.Fatalf("git status in the export:\n%s\nwithout fsmonitor:\n%s", st, scan)
	}

	// No daemon answers (the hook pointed at another store): everything,
	// exit 0.
	if _, paths = hookWith(t, filepath.Join(e.dir, "nostore"), mp, tok3); !everything(paths) {
		t.Fatalf("hook with no daemon = %q, want /", paths)
	}

	// Across a remount: a dirty token is everything; a clean one is
	// answered by comparing trees.
	e.unmount(mv)
	e.waitIdle("w")
	tokC, _ := e.hook(t, mp, "")
	if !strings.HasSuffix(tokC, ":c") {
		t.Fatalf("token of a reconciled mount %q is not clean", tokC)
	}
	e.unmount(mp)
	mp = e.mountAt("w")
	if _, paths = e.hook(t, mp, tok3); !everything(paths) {
		t.Fatalf("hook after a remount with a dirty token = %q, want /", paths)
	}
	if _, paths = e.hook(t, mp, tokC); len(paths) != 0 {
		t.Fatalf("hook after a remount with a clean token = %q, want nothing", paths)
	}
	// The token create --from-git puts in a fresh index: clean at a tree,
	// of no overlay. Nothing changed since: nothing to stat, and the
	// token handed back as it is (git need not rewrite its index).
	tree := strings.Split(tokC, ":")[2]
	cleanAt := "acyclicfs:1:" + tree + ":-:0:c"
	if tok, paths := e.hook(t, mp, cleanAt); len(paths) != 0 || tok != cleanAt {
		t.Fatalf("hook(%q) = %q %q, want it back and nothing", cleanAt, tok, paths)
	}
	inSession(t, mp, "echo 4 > d1/y")
	if _, paths = e.hook(t, mp, tokC); strings.Join(paths, " ") != "d1/y" {
		t.Fatalf("hook after a remount and a change = %q, want d1/y", paths)
	}
	if _, paths = e.hook(t, mp, cleanAt); strings.Join(paths, " ") != "d1/y" {
		t.Fatalf("hook(%q) after a change = %q, want d1/y", cleanAt, paths)
	}
	e.unmount(mp)
}

func TestFSMonitorNoFSMonitor(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo := fsmRepo(t, e)
	e.ok("create", "w", "--from", repo)
	before := readFile(t, filepath.Join(repo, ".git", "config"))
	mp := e.mountAt("w")
	if !strings.Contains(inSession(t, mp, "cat .git/config"), "fsmonitor") {
		t.Fatal("mount did not set core.fsmonitor")
	}
	e.unmount(mp)
	mp = e.mountAt("w", "--no-fsmonitor")
	if got := inSession(t, mp, "cat .git/config"); got != before {
		t.Fatalf("after mount --no-fsmonitor, .git/config is\n%s\nwant\n%s", got, before)
	}
	if r, _ := sessionRun(mp, gitShellEnv()+"git config core.fsmonitor"); r.code == 0 {
		t.Fatalf("core.fsmonitor still set: %s", r.stdout)
	}
	e.unmount(mp)
	// The source repository was never touched.
	if got := readFile(t, filepath.Join(repo, ".git", "config")); got != before {
		t.Fatalf("the imported repository's config changed:\n%s", got)
	}
}

// holder keeps a lease on a mount open (a process with its working
// directory there) until stopped, so that no reconcile switches the view.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (e *env) startHolder(t *testing.T, mp string) *holder {
	t.Helper()
	cmd := e.execCommand(mp, "echo held; cat >/dev/null")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: in}
	t.Cleanup(func() { h.stdin.Close(); h.cmd.Wait() })
	// exec holds its lease from before the script starts.
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("holder said %q (%v)", line, err)
	}
	return h
}

func (h *holder) stop(t *testing.T) {
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
}

// writer is a process in its own session holding a file open for
// writing: it writes a line on each request and closes at EOF.
type writer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func (e *env) startWriter(t *testing.T, mp, rel string) *writer {
	t.Helper()
	cmd := exec.Command("sh", "-c", `exec 3>>"$1"; echo open; while read x; do echo "w$x" >&3; echo ok; done; exec 3>&-; echo closed`, "sh", rel)
	cmd.Dir = mp
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &writer{cmd: cmd, stdin: in, out: bufio.NewReader(out)}
	t.Cleanup(func() { w.stdin.Close(); w.cmd.Wait() })
	w.expect(t, "open")
	return w
}

func (w *writer) expect(t *testing.T, want string) {
	t.Helper()
	line, err := w.out.ReadString('\n')
	if strings.TrimSpace(line) != want {
		t.Fatalf("writer said %q (%v), want %q", line, err, want)
	}
}

func (w *writer) write(t *testing.T) {
	t.Helper()
	fmt.Fprintln(w.stdin, "x")
	w.expect(t, "ok")
}

func (w *writer) close(t *testing.T) {
	t.Helper()
	w.stdin.Close()
	w.expect(t, "closed")
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("writer: %v", err)
	}
}

// fsmModel is what the test knows of the mounted tree (outside .git):
// files (regular and symlinks) and directories, by path.
type fsmModel struct {
	files map[string]bool // path → is a symlink
	dirs  map[string]bool
}

func (m *fsmModel) sortedFiles(regularOnly bool) []string {
	var out []string
	for p, link := range m.files {
		if !regularOnly || !link {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (m *fsmModel) sortedDirs() []string {
	out := []string{""}
	for d := range m.dirs {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func (m *fsmModel) exists(p string) bool {
	_, f := m.files[p]
	return f || m.dirs[p]
}

// newName draws a name not yet taken in directory dir.
func (m *fsmModel) newName(rt *rapid.T, dir string) string {
	for {
		p := path.Join(dir, rapid.SampledFrom([]string{"a", "b", "c", "n1", "n2", "n3", "x", "y", "z", "q"}).Draw(rt, "name"))
		if !m.exists(p) {
			return p
		}
		if rapid.IntRange(0, 3).Draw(rt, "retry") == 0 {
			return path.Join(dir, fmt.Sprintf("u%d", rapid.IntRange(0, 1000).Draw(rt, "n")))
		}
	}
}

func q(p string) string { return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'" }

// TestFSMonitorMatchesScan: random edits in a mounted repository,
// interleaved with git status; with the hook its output is always that of
// a full scan without it. Edits run as their own sessions, so the mount
// reconciles (captures and switches its view) between them unless a
// holder keeps a lease open; some steps remount, some keep a file open
// for writing across git runs.
func TestFSMonitorMatchesScan(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo := fsmRepo(t, e)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		ws := fmt.Sprintf("w%d", n)
		e.ok("create", ws, "--from", repo)
		mp := e.mountAt(ws)
		var (
			hold *holder
			w    *writer
		)
		defer func() {
			// Also after a failed check: nothing may keep the mount busy.
			if w != nil {
				w.stdin.Close()
				w.cmd.Wait()
			}
			if hold != nil {
				hold.stdin.Close()
				hold.cmd.Wait()
			}
			e.unmount(mp)
		}()
		m := &fsmModel{files: map[string]bool{"a": false, "b": false, "d1/x": false, "d1/y": false, "d1/sub/z": false, "d2/w": false},
			dirs: map[string]bool{"d1": true, "d1/sub": true, "d2": true}}
		check := func(what string) {
			got, want := statusPair(t, mp)
			if got != want {
				rt.Fatalf("after %s: git status with fsmonitor:\n%s\nwithout:\n%s", what, got, want)
			}
		}
		check("mount")
		moves := 0
		steps := rapid.IntRange(2, 8).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			var script, what string
			files, regs, dirs := m.sortedFiles(false), m.sortedFiles(true), m.sortedDirs()
			switch op := rapid.IntRange(0, 14).Draw(rt, "op"); {
			case op == 0 && len(regs) > 0: // write
				p := rapid.SampledFrom(regs).Draw(rt, "file")
				script = fmt.Sprintf("printf %s > %s", q(rapid.SampledFrom([]string{"", "1", "22", "a\n"}).Draw(rt, "data")), q(p))
			case op == 1 && len(regs) > 0: // append
				script = "echo more >> " + q(rapid.SampledFrom(regs).Draw(rt, "file"))
			case op == 2: // create
				p := m.newName(rt, rapid.SampledFrom(dirs).Draw(rt, "dir"))
				script, m.files[p] = "echo new > "+q(p), false
			case op == 3 && len(files) > 0: // rename a file
				p := rapid.SampledFrom(files).Draw(rt, "file")
				to := m.newName(rt, rapid.SampledFrom(dirs).Draw(rt, "dir"))
				script = "mv " + q(p) + " " + q(to)
				m.files[to] = m.files[p]
				delete(m.files, p)
			case op == 4 && len(dirs) > 1: // rename a directory
				d := rapid.SampledFrom(dirs[1:]).Draw(rt, "dir")
				var targets []string
				for _, t := range dirs {
					if t != d && !strings.HasPrefix(t, d+"/") {
						targets = append(targets, t)
					}
				}
				to := m.newName(rt, rapid.SampledFrom(targets).Draw(rt, "to"))
				script = "mv " + q(d) + " " + q(to)
				move := func(set map[string]bool) {
					for p, v := range set {
						if p == d || strings.HasPrefix(p, d+"/") {
							delete(set, p)
							set[to+strings.TrimPrefix(p, d)] = v
						}
					}
				}
				move(m.files)
				move(m.dirs)
			case op == 5 && len(files) > 0: // delete
				p := rapid.SampledFrom(files).Draw(rt, "file")
				script = "rm " + q(p)
				delete(m.files, p)
			case op == 6 && len(regs) > 0: // chmod
				script = rapid.SampledFrom([]string{"chmod +x ", "chmod -x "}).Draw(rt, "chmod") + q(rapid.SampledFrom(regs).Draw(rt, "file"))
			case op == 7: // symlink
				p := m.newName(rt, rapid.SampledFrom(dirs).Draw(rt, "dir"))
				script, m.files[p] = "ln -s target-"+path.Base(p)+" "+q(p), true
			case op == 8: // mkdir
				p := m.newName(rt, rapid.SampledFrom(dirs).Draw(rt, "dir"))
				script, m.dirs[p] = "mkdir "+q(p), true
			case op == 9 && len(dirs) > 1: // rmdir or rm -r
				d := rapid.SampledFrom(dirs[1:]).Draw(rt, "dir")
				script = "rm -r " + q(d)
				for _, set := range []map[string]bool{m.files, m.dirs} {
					for p := range set {
						if p == d || strings.HasPrefix(p, d+"/") {
							delete(set, p)
						}
					}
				}
			case op == 10 && len(regs) > 0: // a writer open across git runs
				p := rapid.SampledFrom(regs).Draw(rt, "file")
				w = e.startWriter(t, mp, p)
				check("opening " + p + " for writing")
				w.write(t)
				check("writing " + p + " through an open handle")
				w.write(t)
				w.close(t)
				w = nil
				check("closing " + p)
				continue
			case op == 11: // remount
				if hold != nil {
					hold.stop(t)
					hold = nil
				}
				e.unmount(mp)
				mp = e.mountAt(ws)
				check("remount")
				continue
			case op == 13: // remount at a new place (git's untracked cache is keyed by the path)
				if hold != nil {
					hold.stop(t)
					hold = nil
				}
				e.unmount(mp)
				moves++
				mp = e.mountAtPath(ws, filepath.Join(e.dir, fmt.Sprintf("mnt-%s-%d", ws, moves)))
				check("remount elsewhere")
				continue
			case op == 12: // hold a lease open (no reconcile) or let go
				if hold == nil {
					hold = e.startHolder(t, mp)
				} else {
					hold.stop(t)
					hold = nil
				}
				continue
			default:
				check("nothing")
				continue
			}
			what = script
			inSession(t, mp, script)
			check(what)
		}
		if hold != nil {
			hold.stop(t)
		}
		check("the last session's end")
	})
}

// TestFSMonitorParentMoved: a mounted fork follows its parent when a
// sibling lands (a view switch onto a rebased tree); git status with the
// hook sees the sibling's changes as a full scan does.
func TestFSMonitorParentMoved(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo := fsmRepo(t, e)
	e.ok("create", "main", "--from", repo)
	e.ok("fork", "main", "f")
	e.ok("fork", "main", "g")
	mf := e.mountAt("f")
	if got, want := statusPair(t, mf); got != want || got != "" {
		t.Fatalf("git status in f: %q, without the hook %q", got, want)
	}
	// f changes something of its own; its token is then dirty.
	inSession(t, mf, "echo mine >> a")
	if got, want := statusPair(t, mf); got != want {
		t.Fatalf("git status in f: %q, without the hook %q", got, want)
	}
	mg := e.mountAt("g")
	inSession(t, mg, "echo parent >> d1/x; echo new > d2/new; rm d1/sub/z")
	e.unmount(mg)
	e.waitIdle("f")
	e.ok("land", "g") // f is idle: it follows main at once
	if got := inSession(t, mf, "cat d2/new"); got != "new\n" {
		t.Fatalf("f did not follow main: d2/new = %q", got)
	}
	got, want := statusPair(t, mf)
	if got != want {
		t.Fatalf("after f followed main: git status %q, without the hook %q", got, want)
	}
	for _, p := range []string{" M a", " M d1/x", " D d1/sub/z", "?? d2/new"} {
		if !strings.Contains(got, p+"\n") {
			t.Fatalf("git status after following main lacks %q:\n%s", p, got)
		}
	}
	e.unmount(mf)
}

// opendirs runs git status with the hook in mp and returns its output and
// how many directories git opened to find untracked files (trace2's
// read_directory opendir count).
func opendirs(t *testing.T, mp string) (string, int) {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "trace")
	out := inSession(t, mp, gitShellEnv()+"GIT_TRACE2_PERF="+q(trace)+" git status --porcelain")
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	for _, line := range strings.Split(string(b), "\n") {
		if _, v, ok := strings.Cut(line, "opendir:"); ok {
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatalf("trace line %q: %v", line, err)
			}
		}
	}
	if n < 0 {
		t.Fatalf("no read_directory in git's trace:\n%s", b)
	}
	return out, n
}

// TestFSMonitorUntrackedCacheAtNewMountpoint: git keys its untracked
// cache by the work tree's path. A workspace mounted at another place, or
// a fork of it, keeps using the cache its index carries (the mount moves
// it), so git status reads no directory there, and still says what a
// full scan says.
func TestFSMonitorUntrackedCacheAtNewMountpoint(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo := fsmRepo(t, e)
	e.ok("create", "w", "--from", repo)
	mp := e.mountAt("w")
	inSession(t, mp, "echo new > d1/untracked; mkdir d2/newdir; echo n > d2/newdir/f")
	// Captured: the token git keeps names no open change, so a mount
	// elsewhere answers it exactly (a dirty one gets "/", and git then
	// checks each directory's stat data instead).
	e.waitIdle("w")
	first := gitIn(t, mp, "status --porcelain") // writes the cache at mp
	if _, n := opendirs(t, mp); n != 0 {
		t.Fatalf("second git status at the same mount opened %d directories", n)
	}
	e.unmount(mp)
	e.ok("fork", "w", "f")
	// f first: a fork follows w's head, so w's new file below would
	// (rightly) make git read that directory in f.
	for i, ws := range []string{"f", "w"} {
		mp := e.mountAtPath(ws, filepath.Join(e.dir, fmt.Sprintf("elsewhere-%d", i)))
		got, n := opendirs(t, mp)
		if n != 0 {
			t.Fatalf("%s at a new mountpoint: git status opened %d directories (the untracked cache was dropped)", ws, n)
		}
		_, scan := statusPair(t, mp)
		lost := slices.ContainsFunc(strings.SplitAfter(first, "\n"), func(l string) bool { return !strings.Contains(got, l) })
		if got != scan || lost {
			t.Fatalf("%s at a new mountpoint: git status %q, without the hook %q, before %q", ws, got, scan, first)
		}
		// The cache still follows changes.
		inSession(t, mp, "echo more > d1/sub/another")
		if got, scan := statusPair(t, mp); got != scan || !strings.Contains(got, "?? d1/sub/another\n") {
			t.Fatalf("%s after a new file: git status %q, without the hook %q", ws, got, scan)
		}
		e.unmount(mp)
	}
}

// TestFSMonitorMountSkipsWarmUp: a mount whose root is a work tree the
// hook serves lists nothing in the background by default (git status
// there looks nothing up, and the warm-up only slowed it); a warm-up
// asked for still runs, and a mount without the hook warms as any other.
func TestFSMonitorMountSkipsWarmUp(t *testing.T) {
	needTool(t, "git")
	e := newMountEnv(t)
	repo := fsmRepo(t, e)
	for _, ws := range []string{"def", "asked", "nohook"} {
		e.ok("create", ws, "--from", repo)
	}
	// Fresh from the import, the index has no untracked cache: git will
	// read every directory, and the warm-up runs by default.
	mp := e.mountAt("def")
	if st := e.statusOf("def"); !st.Warming && st.Warmed == 0 {
		t.Fatalf("a mount with the hook, index without an untracked cache: warmed %d, warming %v; want a warm-up", st.Warmed, st.Warming)
	}
	if got := gitIn(t, mp, "status --porcelain"); got != "" {
		t.Fatalf("git status: %q", got)
	}
	e.unmount(mp)
	// That status wrote the cache (the mount sets core.untrackedCache):
	// the next mount warms nothing up.
	mp = e.mountAt("def")
	if st := e.statusOf("def"); st.Warming || st.Warmed != 0 {
		t.Fatalf("a mount with the hook, index with an untracked cache: warmed %d, warming %v; want no warm-up", st.Warmed, st.Warming)
	}
	if got := gitIn(t, mp, "status --porcelain"); got != "" {
		t.Fatalf("git status: %q", got)
	}
	e.unmount(mp)
	for ws, flags := range map[string][]string{"asked": {"--warm-entries", "1000", "--wait-warm"}, "nohook": {"--no-fsmonitor", "--wait-warm"}} {
		mp := e.mountAt(ws, flags...)
		if st := e.statusOf(ws); st.Warming || st.Warmed == 0 {
			t.Fatalf("%s (%v): warmed %d, warming %v; want a finished warm-up", ws, flags, st.Warmed, st.Warming)
		}
		e.unmount(mp)
	}
}
