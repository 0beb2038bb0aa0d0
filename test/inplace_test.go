package test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// In-place workspaces (SPEC.md "In-place workspaces and contexts",
// docs/inplace.md): a workspace over a real directory, read lazily, mounted
// over that directory, materialized back into it at reconciliation.

// baseReads is the daemon's count of in-place file opens for content.
func (e *env) baseReads() int64 {
	e.t.Helper()
	n, _ := e.baseReadInfo()
	return n
}

// baseReadInfo is the daemon's count of in-place file opens for content
// and the distinct paths opened.
func (e *env) baseReadInfo() (int64, []string) {
	e.t.Helper()
	r := e.run("--json", "status")
	if r.code != 0 {
		e.t.Fatalf("status --json: %s", r)
	}
	var s struct {
		BaseReads     int64    `json:"base_reads"`
		BaseReadPaths []string `json:"base_read_paths"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		e.t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return s.BaseReads, s.BaseReadPaths
}

// copyTree copies src to dst natively (cp -a), for a reference copy that
// receives the same edits as the workspace.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
}

// nativeSh runs a shell script in dir outside any mount.
func nativeSh(t *testing.T, dir, script string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh -c %q in %s: %v\n%s", script, dir, err, out)
	}
	return string(out)
}

// noTemporaries fails if a materialization temporary is left in dir.
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	for p := range treeList(t, dir) {
		if strings.Contains(filepath.Base(p), ".acyclicfs-") {
			t.Errorf("temporary left in %s: %s", dir, p)
		}
	}
}

func inPlaceFiles(n int) map[string]string {
	files := map[string]string{
		"a/f1":   "one\n",
		"a/f2":   "two\n",
		"b/c/f3": "three\n",
		"top":    "top\n",
	}
	for i := range n {
		files[fmt.Sprintf("bulk/d%02d/f%04d", i%20, i)] = fmt.Sprintf("bulk %d\n", i)
	}
	return files
}

// TestInPlaceMountEditUnmount: create is lazy (nothing read), the mount
// covers the directory itself and reads only what tools open, and the
// unmount leaves DIR holding exactly the edits — compared with a native
// copy that received the same edits.
func TestInPlaceMountEditUnmount(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	dir := filepath.Join(e.dir, "work")
	writeTree(t, dir, inPlaceFiles(600))
	if err := os.Symlink("a/f1", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	native := filepath.Join(e.dir, "native")
	copyTree(t, dir, native)

	gen := e.ok("create", "ws", "--in-place", dir)
	if len(gen) != 64 {
		t.Fatalf("create --in-place printed %q, want a generation id", gen)
	}
	if got := e.ok("mount", "ws"); got != dir {
		t.Fatalf("mount ws printed %q, want %q", got, dir)
	}
	if !isMountpoint(dir) {
		t.Fatalf("%s is not a mountpoint after mount ws", dir)
	}
	if n := e.baseReads(); n != 0 {
		t.Fatalf("create and mount read %d files of the directory, want 0", n)
	}
	_, r := e.execOK(dir, "find . -type f | wc -l; cat a/f1 b/c/f3")
	if want := "604\none\nthree\n"; r.stdout != want {
		t.Fatalf("through the mount: got %q, want %q", r.stdout, want)
	}
	if n, paths := e.baseReadInfo(); n != 2 || strings.Join(paths, " ") != "a/f1 b/c/f3" {
		t.Fatalf("listing every file and reading two opened %d files (%v), want a/f1 and b/c/f3 once each", n, paths)
	}
	if _, r = e.execOK(dir, "readlink link"); r.stdout != "a/f1\n" {
		t.Fatalf("readlink link = %q", r.stdout)
	}
	// status --json times the last final close: a lease that changed
	// nothing wrote nothing into DIR; one that changed two files wrote
	// exactly those, and its parts fit in its total.
	if lr := e.statusOf("ws").LastReconcile; lr == nil || lr.Edits != 0 || lr.MaterializeMS != 0 {
		t.Fatalf("last_reconcile after a lease that only read: %+v, want one with no edits", lr)
	}
	two := "echo two >> a/f1 && echo two > two.txt"
	e.execOK(dir, two)
	nativeSh(t, native, two)
	lr := e.statusOf("ws").LastReconcile
	if lr == nil || lr.Edits != 2 || lr.MaterializeMS <= 0 || lr.CaptureMS <= 0 ||
		lr.TotalMS+0.3 < lr.CaptureMS+lr.DetectMS+lr.MaterializeMS {
		t.Fatalf("last_reconcile after a lease writing two files: %+v, want 2 edits, each part timed, within the total", lr)
	}

	edits := `printf 'more\n' >> a/f1 && echo new > new.txt && rm a/f2 && mkdir -p n/m &&
		echo deep > n/m/x && chmod +x top && rm -r b && ln -s top link2 && rm bulk/d03/f0003`
	e.execOK(dir, edits)
	nativeSh(t, native, edits)
	// exec returns after its lease's final close: materialized, and the
	// window idle again (it used to stay reconciling until the next lease).
	if st := e.statusOf("ws"); st.Window != "idle" {
		t.Fatalf("after exec's lease: window %s, want idle", st.Window)
	}

	if o, _ := e.unmount(dir); o != "current" {
		t.Fatalf("unmount: outcome %s, want current", o)
	}
	if isMountpoint(dir) {
		t.Fatalf("%s still mounted after unmount", dir)
	}
	sameTree(t, "the directory after unmount", treeList(t, native), treeList(t, dir))
	noTemporaries(t, dir)
	if l := e.log("ws"); l[0].kind != "capture" {
		t.Fatalf("log after unmount: %s, want a capture on top", kinds(l))
	}
	e.fsck()

	// A program edits the directory while it is not mounted: the next
	// mount takes the edit in as an "external" generation and shows it.
	nativeSh(t, dir, "echo outside > a/f1 && echo added > added.txt")
	nativeSh(t, native, "echo outside > a/f1 && echo added > added.txt")
	e.ok("mount", "ws")
	if l := e.log("ws"); l[0].kind != "external" {
		t.Fatalf("log after an external edit and a mount: %s, want external on top", kinds(l))
	}
	_, r = e.execOK(dir, "cat a/f1 added.txt")
	if r.stdout != "outside\nadded\n" {
		t.Fatalf("the mount shows %q, want the external edits", r.stdout)
	}
	e.unmount(dir)
	sameTree(t, "the directory after the second unmount", treeList(t, native), treeList(t, dir))
	e.fsck()
}

// newInPlaceEnv writes files into DIR (e.dir/work) and makes it the
// in-place workspace ws.
func newInPlaceEnv(t *testing.T, files map[string]string) (*env, string) {
	t.Helper()
	e := newMountEnv(t)
	dir := filepath.Join(e.dir, "work")
	writeTree(t, dir, files)
	e.ok("create", "ws", "--in-place", dir)
	return e, dir
}

// openUnder opens DIR as a program that was there before the mount does:
// after the mount the descriptor still reaches the directory underneath.
func openUnder(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// writeUnder writes content to name (created or truncated) underneath the
// mount, through under.
func writeUnder(t *testing.T, under *os.File, name, content string) {
	t.Helper()
	fd, err := unix.Openat(int(under.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

// TestInPlaceWriteUnderneathWhileMounted: a program that opened DIR before
// the mount writes into it underneath the mount, in a directory a lease end
// already stored and in an unresolved one (a new name): the next lease end takes both in as an
// external generation (the daemon watches DIR and answers untouched
// directories from events), and the mount shows them.
func TestInPlaceWriteUnderneathWhileMounted(t *testing.T) {
	t.Parallel()
	e, dir := newInPlaceEnv(t, inPlaceFiles(100))
	under := openUnder(t, dir)
	// Without the warm-up the view lists only what the tool looks at.
	e.ok("mount", "ws", "--warm-entries", "0")
	e.execOK(dir, "printf 'more\\n' >> a/f1")
	for range 2 { // the materialized directory is listed again, then quiet
		e.execOK(dir, "true")
	}
	// The daemon watches DIR underneath: the root and a (the directories
	// the materialized tree or the view lists), b and bulk (the root's
	// unresolved subdirectories nothing listed, for their own lstat).
	if st := e.statusOf("ws"); st.WatchedDirs != 4 {
		t.Fatalf("status: %d directories of DIR watched, want 4 (the root, a, b, bulk)", st.WatchedDirs)
	}
	writeUnder(t, under, "a/f2", "underneath\n")
	writeUnder(t, under, "bulk/new", "new\n")
	e.execOK(dir, "true")
	if l := e.log("ws"); l[0].kind != "external" {
		t.Fatalf("log after writes underneath the mount and a lease end: %s, want external on top", kinds(l))
	}
	if _, r := e.execOK(dir, "cat a/f1 a/f2 bulk/new"); r.stdout != "one\nmore\nunderneath\nnew\n" {
		t.Fatalf("the mount shows %q, want the writes made underneath", r.stdout)
	}
	if o, _ := e.unmount(dir); o != "current" {
		t.Fatalf("unmount: outcome %s, want current", o)
	}
	for name, want := range map[string]string{"a/f1": "one\nmore\n", "a/f2": "underneath\n", "bulk/new": "new\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Fatalf("%s after unmount: %q %v, want %q", name, b, err, want)
		}
	}
	e.fsck()
}

// TestInPlaceRewriteUnderneathListedDirectory: a directory the view listed
// (here by the warm-up) but nothing resolved is still a reference in the
// head, and a program rewriting one of its files underneath the mount
// leaves the directory's own fingerprint as it was. The view named the
// file's old fingerprint all the same: the next lease end takes the new
// content in (it read EIO in the mount, and export failed, before).
func TestInPlaceRewriteUnderneathListedDirectory(t *testing.T) {
	t.Parallel()
	e, dir := newInPlaceEnv(t, inPlaceFiles(10))
	under := openUnder(t, dir)
	e.ok("mount", "ws")
	waitFor(t, 30*time.Second, "the warm-up", func() bool { return !e.statusOf("ws").Warming })
	if _, r := e.execOK(dir, "cat b/c/f3"); r.stdout != "three\n" {
		t.Fatalf("b/c/f3 before: %q", r.stdout)
	}
	writeUnder(t, under, "b/c/f3", "rewritten\n")
	if _, r := e.execOK(dir, "true"); !strings.Contains(r.stderr, "rebased") {
		t.Fatalf("lease end after a rewrite underneath: %s, want rebased", r)
	}
	if _, r := e.execOK(dir, "cat b/c/f3"); r.stdout != "rewritten\n" {
		t.Fatalf("the mount shows b/c/f3 %q, want the rewrite", r.stdout)
	}
	if got := readFile(t, filepath.Join(e.exportTo("ws", "exp"), "b/c/f3")); got != "rewritten\n" {
		t.Fatalf("export: b/c/f3 %q", got)
	}
	if o, _ := e.unmount(dir); o != "current" {
		t.Fatalf("unmount: %s", o)
	}
}

// TestInPlaceNameAddedAndRemovedUnderneath: a program adds a name to a
// directory the view listed and removes it again underneath the mount:
// the listing holds, but the directory's own fingerprint moved. The lease
// end must name the directory as it is now; the head named the old
// fingerprint before, readable only while the daemon remembered the
// listing, so an export after the unmount failed.
func TestInPlaceNameAddedAndRemovedUnderneath(t *testing.T) {
	t.Parallel()
	e, dir := newInPlaceEnv(t, inPlaceFiles(10))
	under := openUnder(t, dir)
	e.ok("mount", "ws")
	waitFor(t, 30*time.Second, "the warm-up", func() bool { return !e.statusOf("ws").Warming })
	e.execOK(dir, "printf 'v\\n' > top") // the root becomes a stored tree naming b
	writeUnder(t, under, "b/x", "")
	if err := unix.Unlinkat(int(under.Fd()), "b/x", 0); err != nil {
		t.Fatal(err)
	}
	e.execOK(dir, "true")
	if o, _ := e.unmount(dir); o != "current" {
		t.Fatalf("unmount: %s", o)
	}
	sameTree(t, "export after the unmount, against DIR", treeList(t, dir), treeList(t, e.exportTo("ws", "exp")))
}

// TestInPlaceLostContentDoesNotWedge: the view renames a file and a
// directory it never changed (their content is still DIR's, by reference),
// then a program holding a descriptor from before the mount rewrites the
// file and adds a name to the directory underneath, before the lease ends.
// The bytes the view showed are gone; the lease end must not fail for ever
// (it did: every reconcile, and so every unmount, failed planning the write
// of the renamed file). The renamed paths take what the program left at
// the old ones, as a merge of a rename with an edit would, and are
// reported as conflicts; nothing DIR holds is lost; the workspace unmounts.
func TestInPlaceLostContentDoesNotWedge(t *testing.T) {
	t.Parallel()
	e, dir := newInPlaceEnv(t, inPlaceFiles(10))
	under := openUnder(t, dir)
	// No warm-up: nothing lists b before the program changes it, so the
	// view's z names a listing DIR no longer has.
	e.ok("mount", "ws", "--warm-entries", "0")
	gate := e.fifo("gate")
	run := e.startExec(dir, `mv a/f1 a/g1 && mv a/f2 a/h2 && mv b z && read x < "$G"`, "G="+gate.path)
	w := gate.opened(30 * time.Second)
	writeUnder(t, under, "a/f1", "rewritten underneath\n")
	writeUnder(t, under, "b/new", "new underneath\n")
	// As git's lock files did under a mount: the program renames the file
	// to the name the view gave it.
	if err := unix.Renameat(int(under.Fd()), "a/f2", int(under.Fd()), "a/h2"); err != nil {
		t.Fatal(err)
	}
	release(t, w)
	r := run.wait(t)
	o, paths := parseOutcome(r.stderr)
	if r.code != 0 || o != "conflicted" || !slices.Contains(paths, "a/g1") || !slices.Contains(paths, "a/h2") || !slices.Contains(paths, "z") {
		t.Fatalf("exec: outcome %q paths %q, want conflicted listing a/g1, a/h2 and z: %s", o, paths, r)
	}
	lost := map[string]bool{}
	for _, c := range e.statusOf("ws").Conflicts {
		if c.Kind == "lost-underneath" {
			lost[c.Path] = true
		}
	}
	if !lost["a/g1"] || !lost["a/h2"] || !lost["z"] || len(lost) != 3 {
		t.Fatalf("status conflicts: lost-underneath at %v, want a/g1, a/h2 and z", lost)
	}
	// What was taken in is what DIR holds: a lease end that changes
	// nothing finds nothing to take in (z was kept as a listing, not as a
	// reference to b's path), and the conflicts stand.
	head := e.head("ws")
	e.execOK(dir, "true")
	if h := e.head("ws"); h != head || len(e.statusOf("ws").Conflicts) < 3 {
		t.Fatalf("a no-op lease end moved the head %s -> %s (%s) or dropped the conflicts", head, h, kinds(e.log("ws")))
	}
	want := map[string]string{
		"a/g1":   "rewritten underneath\n",
		"a/f1":   "rewritten underneath\n", // modify/delete: the edit is kept
		"z/c/f3": "three\n",
		"z/new":  "new underneath\n",
		// b's listing was never read, so the merge cannot tell b/c from a
		// name the program added: b keeps everything DIR holds.
		"b/c/f3":         "three\n",
		"b/new":          "new underneath\n",
		"a/h2":           "two\n",
		"top":            "top\n",
		"bulk/d03/f0003": "bulk 3\n",
	}
	names := slices.Sorted(maps.Keys(want))
	var all string
	for _, n := range names {
		all += want[n]
	}
	if _, r := e.execOK(dir, "cat "+strings.Join(names, " ")); r.stdout != all {
		t.Fatalf("the mount shows %q for %v, want %q", r.stdout, names, all)
	}
	if o, _ := e.unmount(dir); o != "current" {
		t.Fatalf("unmount: outcome %s, want current", o)
	}
	for _, n := range names {
		if got := readFile(t, filepath.Join(dir, n)); got != want[n] {
			t.Fatalf("DIR's %s after unmount: %q, want %q", n, got, want[n])
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "a/f2")); err == nil {
		t.Fatal("DIR holds a/f2 after unmount: both sides renamed it")
	}
	e.fsck()
}

// TestInPlaceGit: a git repository in the directory keeps working under the
// mount, and a commit made under it is in the real repository afterwards.
func TestInPlaceGit(t *testing.T) {
	t.Parallel()
	needTool(t, "git")
	e := newMountEnv(t)
	dir := filepath.Join(e.dir, "repo")
	writeTree(t, dir, map[string]string{"main.go": "package main\n", "lib/x.txt": "x\n"})
	git := "git -c user.name=t -c user.email=t@e -c init.defaultBranch=main"
	// Old mtimes keep git's index from being "racily clean", so a status
	// that trusts the index re-reads nothing.
	nativeSh(t, dir, "find . -type f -exec touch -d @1600000000 {} + && "+git+" init -q && "+git+" add -A && "+git+" commit -qm first && "+git+" status --porcelain")
	e.ok("create", "repo", "--in-place", dir)
	e.ok("mount", "repo")
	// The mount reports the directory's own inode numbers for unchanged
	// files, so the index written outside matches inside: git status
	// reads no tracked file.
	if _, r := e.execOK(dir, git+" status --porcelain"); r.stdout != "" {
		t.Fatalf("git status under the mount: %q, want clean", r.stdout)
	}
	if _, paths := e.baseReadInfo(); slices.ContainsFunc(paths, func(p string) bool { return !strings.HasPrefix(p, ".git/") }) {
		t.Fatalf("a clean git status under the mount read working files: %v", paths)
	}
	_, r := e.execOK(dir, git+" status --porcelain && echo changed >> lib/x.txt && "+git+" add -A && "+git+" commit -qm second && "+git+" log --oneline | wc -l")
	if strings.TrimSpace(r.stdout) != "2" {
		t.Fatalf("git under the mount: %q", r.stdout)
	}
	e.unmount(dir)
	if out := nativeSh(t, dir, git+" status --porcelain"); out != "" {
		t.Fatalf("git status after unmount: %q, want clean", out)
	}
	if out := nativeSh(t, dir, git+" log --oneline | wc -l"); strings.TrimSpace(out) != "2" {
		t.Fatalf("git log after unmount: %q, want 2 commits", out)
	}
	nativeSh(t, dir, "git fsck --no-progress")
	if got := readFile(t, filepath.Join(dir, "lib/x.txt")); got != "x\nchanged\n" {
		t.Fatalf("lib/x.txt = %q", got)
	}
	e.fsck()
}

// lines returns n numbered lines, with overrides.
func lines(n int, over map[int]string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if s, ok := over[i]; ok {
			b.WriteString(s + "\n")
			continue
		}
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// TestInPlaceExternalEditMerge: a fork's edit lands into the in-place
// workspace while another program edited the same file in the directory:
// different lines merge; the same line is a conflict with both versions
// kept, reported by status.
func TestInPlaceExternalEditMerge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		external int // line the other program edits
	}{{"other-line", 10}, {"same-line", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newMountEnv(t)
			dir := filepath.Join(e.dir, "work")
			writeTree(t, dir, map[string]string{"f": lines(10, nil), "g": "g\n"})
			e.ok("create", "ws", "--in-place", dir)
			e.ok("fork", "ws", "agent")
			mp := e.mountAt("agent")
			e.execOK(mp, "sed -i 's/^line 1$/agent 1/' f")
			e.unmount(mp)

			// Another program edits DIR (not mounted) meanwhile.
			ext := map[int]string{tc.external: fmt.Sprintf("outside %d", tc.external)}
			if err := os.WriteFile(filepath.Join(dir, "f"), []byte(lines(10, ext)), 0o644); err != nil {
				t.Fatal(err)
			}
			e.ok("land", "agent")
			got := readFile(t, filepath.Join(dir, "f"))
			log := e.log("ws")
			if !strings.HasPrefix(log[0].op, "external ") || log[1].kind != "land" {
				t.Fatalf("log of ws: %v, want the land, then the external edit merged", log)
			}
			if tc.external != 1 {
				want := lines(10, map[int]string{1: "agent 1", 10: "outside 10"})
				if got != want {
					t.Fatalf("merged f = %q, want %q", got, want)
				}
				if cs := e.statusOf("ws").Conflicts; len(cs) != 0 {
					t.Fatalf("conflicts after a clean merge: %v", cs)
				}
			} else {
				if !strings.Contains(got, "agent 1") || !strings.Contains(got, "outside 1") || !strings.Contains(got, "<<<<<<<") {
					t.Fatalf("conflicted f should keep both versions with markers, got %q", got)
				}
				cs := e.statusOf("ws").Conflicts
				if len(cs) != 1 || cs[0].Path != "f" {
					t.Fatalf("status conflicts = %v, want f", cs)
				}
			}
			if g := readFile(t, filepath.Join(dir, "g")); g != "g\n" {
				t.Fatalf("untouched g = %q", g)
			}
			noTemporaries(t, dir)
			e.fsck()
		})
	}
}

// TestInPlaceMaterializeCrash: a crash during materialization (the land
// that writes a fork's changes into the directory) is rolled forward by the
// next command; an error while applying is rolled back from the preimages
// so the directory is exactly as before. Never a mix, never a temporary.
func TestInPlaceMaterializeCrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		point   string
		crash   bool // SIGKILL (else an injected error)
		forward bool
	}{
		{"materialize.after-prepared", true, true},
		{"materialize.after-first", true, true},
		{"materialize.after-apply", true, true},
		{"materialize.after-state", true, true},
		{"materialize.apply=error", false, false},
	} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			dir := filepath.Join(e.dir, "work")
			writeTree(t, dir, map[string]string{"a": "A\n", "d/b": "B\n", "d/c": "C\n", "gone/x": "X\n"})
			before := treeList(t, dir)
			e.ok("create", "ws", "--in-place", dir)
			e.ok("fork", "ws", "agent")
			// The agent's changes, made in a copy and committed.
			edit := filepath.Join(e.dir, "edit")
			e.ok("export", "agent", edit)
			nativeSh(t, edit, "echo A2 > a && echo new > d/new && rm -r gone && rm d/c && mkdir e && echo E > e/f")
			want := treeList(t, edit)
			e.ok("commit", "agent", edit)

			if tc.crash {
				e.runCrash(tc.point, "land", "agent")
				e.ok("status") // any command recovers
			} else {
				cmd := e.command([]string{"ACYCLICFS_FAILPOINT_ARMED=1", "ACYCLICFS_FAILPOINT=" + tc.point}, "land", "agent")
				r, err := runCmd(cmd)
				if err != nil {
					t.Fatal(err)
				}
				if r.code != 1 || !strings.Contains(r.stderr, "rolled back") {
					t.Fatalf("land with an injected error: want exit 1 and a rollback, got %s", r)
				}
			}
			got := treeList(t, dir)
			if tc.forward {
				sameTree(t, "rolled-forward directory", want, got)
			} else {
				sameTree(t, "rolled-back directory", before, got)
				// The head moved; the next sync writes it.
				e.ok("rebase", "ws")
				sameTree(t, "directory after the retry", want, treeList(t, dir))
			}
			noTemporaries(t, dir)
			if st := e.run("status"); strings.Contains(st.stdout, "materialization of") {
				t.Fatalf("a materialization journal is left: %s", st.stdout)
			}
			e.fsck()
		})
	}
}

// TestInPlaceCompletedJournalLeavesLaterEdits: a crash after the state
// record says DIR holds the landed generation, but before the journal is
// removed, leaves a complete journal. Recovery drops it without writing
// DIR again: an edit another program made in between is kept (and taken
// in by the next sync, like any external change).
func TestInPlaceCompletedJournalLeavesLaterEdits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := filepath.Join(e.dir, "work")
	writeTree(t, dir, map[string]string{"a": "A\n", "d/b": "B\n"})
	e.ok("create", "ws", "--in-place", dir)
	e.ok("fork", "ws", "agent")
	edit := filepath.Join(e.dir, "edit")
	e.ok("export", "agent", edit)
	nativeSh(t, edit, "echo A2 > a && echo B2 > d/b")
	e.ok("commit", "agent", edit)
	e.runCrash("materialize.after-state", "land", "agent")
	// DIR holds the landed tree; a program edits it before anything recovers.
	sameTree(t, "directory after the crash", treeList(t, edit), treeList(t, dir))
	nativeSh(t, dir, "echo mine > d/b")
	if st := e.run("status"); strings.Contains(st.stdout, "materialization of") {
		t.Fatalf("a complete materialization journal is still listed: %s", st.stdout)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "d", "b")); err != nil || string(b) != "mine\n" {
		t.Fatalf("recovery wrote over a later edit: d/b holds %q (%v)", b, err)
	}
	noTemporaries(t, dir)
	e.ok("rebase", "ws")
	out := filepath.Join(e.dir, "out")
	e.ok("export", "ws", out)
	if b, err := os.ReadFile(filepath.Join(out, "d", "b")); err != nil || string(b) != "mine\n" {
		t.Fatalf("the later edit was not taken in: ws d/b = %q (%v)", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "A2\n" {
		t.Fatalf("a holds %q, want the landed A2", b)
	}
	e.fsck()
}

// TestInPlaceBadInput: clear errors, nothing created.
func TestInPlaceBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	file := filepath.Join(e.dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.fails(2, "create", "ws", "--in-place", filepath.Join(e.dir, "missing"))
	e.fails(2, "create", "ws", "--in-place", file)
	e.fails(2, "create", "ws", "--in-place", e.dir) // holds the store
	e.fails(2, "create", "ws", "--in-place", e.dir, "--from", e.dir)
	for _, empty := range [][]string{{"--in-place", ""}, {"--in-place="}, {"--from", ""}} {
		if r := e.fails(2, append([]string{"create", "ws"}, empty...)...); !strings.Contains(r.stderr, "needs a directory") {
			t.Errorf("create ws %q: %s", empty, r)
		}
	}
	// A mountpoint cannot take the workspace's own mount over it.
	if os.Geteuid() == 0 {
		mnt := filepath.Join(e.dir, "tmpfs")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount tmpfs: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
		if r := e.fails(2, "create", "ws", "--in-place", mnt); !strings.Contains(r.stderr, "is a mountpoint") {
			t.Errorf("create --in-place over a mountpoint: %s", r)
		}
	}
	if r := e.run("list"); strings.Contains(r.stdout, "ws") {
		t.Fatalf("a refused create left a workspace:\n%s", r.stdout)
	}
	dir := filepath.Join(e.dir, "work")
	writeTree(t, dir, map[string]string{"a": "A"})
	e.ok("create", "ws", "--in-place", dir)
	e.fails(2, "create", "ws2", "--in-place", dir) // already in place
	e.ok("create", "plain")
	e.fails(2, "mount", "plain") // no mountpoint, not in place
	// The directory moved away: nothing is taken for "everything deleted".
	head := e.head("ws")
	moved := filepath.Join(e.dir, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if r := e.fails(2, "rebase", "ws"); !strings.Contains(r.stderr, "missing") {
		t.Fatalf("rebase of an in-place workspace whose directory is gone: %s", r)
	}
	if got := e.head("ws"); got != head {
		t.Fatalf("the head moved to %s after a failed sync", got)
	}
	if err := os.Rename(moved, dir); err != nil {
		t.Fatal(err)
	}
	e.ok("rebase", "ws")
	if got := e.head("ws"); got != head {
		t.Fatalf("the head moved to %s after the directory came back unchanged", got)
	}
	e.fsck()
}

// TestInPlaceDaemonKilledMidMaterialization: the daemon dies (SIGKILL at a
// failpoint) after writing the first file of the final close's
// materialization, leaving a dead mount over DIR. The next `mount` detaches
// it, rolls the journal forward, and DIR ends up holding exactly the edits.
func TestInPlaceDaemonKilledMidMaterialization(t *testing.T) {
	t.Parallel()
	e := newMountEnv(t)
	dir := filepath.Join(e.dir, "work")
	writeTree(t, dir, map[string]string{"a": "A\n", "b": "B\n", "d/c": "C\n", "d/e": "E\n"})
	native := filepath.Join(e.dir, "native")
	copyTree(t, dir, native)
	e.ok("create", "ws", "--in-place", dir)
	e.mountWithFailpoint("materialize.after-first", "ws", dir, "--lease-ttl", "500ms")
	pid := e.daemonPID()
	edits := "echo A2 > a && echo B2 > b && rm d/c && echo new > d/new && mkdir f && echo G > f/g"
	nativeSh(t, native, edits)
	e.execSh(dir, edits) // its final close kills the daemon: no outcome
	if err := waitGone(pid, 20*time.Second); err != nil {
		t.Fatalf("the daemon did not die at the failpoint: %v", err)
	}
	if st := e.run("status"); !strings.Contains(st.stdout, "materialization of ws") {
		t.Errorf("status after the crash should list the interrupted materialization:\n%s", st.stdout)
	}
	if got := e.ok("mount", "ws"); got != dir {
		t.Fatalf("remount printed %q", got)
	}
	e.unmount(dir)
	sameTree(t, "the directory after recovery", treeList(t, native), treeList(t, dir))
	noTemporaries(t, dir)
	e.fsck()
}

// TestInPlaceLargeTreeLazy: a 100,000-file directory. create --in-place and
// mount read no file; a build and git inside work and read only the files
// they open (the daemon's base-read count), not the tree.
func TestInPlaceLargeTreeLazy(t *testing.T) {
	needTool(t, "git", "go")
	e := newMountEnv(t)
	dir := filepath.Join(e.dir, "big")
	const n = 100_000
	for d := range 100 {
		sub := filepath.Join(dir, "pkg", fmt.Sprintf("d%03d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n / 100 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%04d.txt", i)), []byte("data\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeTree(t, dir, map[string]string{
		"go.mod":  "module example.com/big\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() { println(\"hi\") }\n",
	})
	e.ok("create", "big", "--in-place", dir)
	e.ok("mount", "big")
	if r := e.baseReads(); r != 0 {
		t.Fatalf("create and mount of %d files read %d of them", n, r)
	}
	gocache := filepath.Join(e.dir, "gocache")
	git := "git -c user.name=t -c user.email=t@e -c init.defaultBranch=main"
	_, r := e.execOK(dir, "GOCACHE="+gocache+" GOFLAGS=-mod=mod go build -o "+filepath.Join(e.dir, "big.bin")+" . && "+
		git+" init -q && "+git+" add go.mod main.go && "+git+" status --porcelain | wc -l")
	if got := strings.TrimSpace(r.stdout); got != "3" { // two added files, one untracked directory
		t.Fatalf("git status under the mount printed %s lines, want 3\n%s", got, r)
	}
	if _, paths := e.baseReadInfo(); strings.Join(paths, " ") != "go.mod main.go" {
		t.Fatalf("a build and git status read %v of the directory; want only the two sources", paths)
	}
	e.unmount(dir)
	if _, err := os.Stat(filepath.Join(dir, ".git", "HEAD")); err != nil {
		t.Fatalf("the repository made under the mount is not in the directory: %v", err)
	}
	e.fsck()
}
