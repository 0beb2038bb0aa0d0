package test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Helpers of the reliability_* tests (issue 6): trees read through a mount
// from a separate process session, head logs with sequence numbers, and
// known-bug classification for randomized trials.

// relNode is one path of a tree: its kind, exec bit and content or target.
type relNode struct {
	kind string // "file", "dir", "link"
	exec bool   // regular files only
	data string // file content or link target
}

func (n relNode) String() string {
	switch n.kind {
	case "file":
		d := n.data
		if len(d) > 40 {
			d = fmt.Sprintf("%s…(%d bytes)", d[:40], len(d))
		}
		return fmt.Sprintf("file x=%v %q", n.exec, d)
	case "link":
		return "link " + n.data
	}
	return n.kind
}

// relTree walks root directly from the test process (use it for exports
// and native directories, never inside a mount a window should not see).
func relTree(t *testing.T, root string) map[string]relNode {
	t.Helper()
	out := map[string]relNode{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = relNode{kind: "link", data: target}
		case fi.IsDir():
			out[rel] = relNode{kind: "dir"}
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = relNode{kind: "file", exec: fi.Mode()&0o111 != 0, data: string(b)}
		default:
			out[rel] = relNode{kind: "other " + fi.Mode().String()}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// relSessionTree reads the whole tree under mp with tar run in a new process
// session (a tool session of its own, which ends when tar exits).
func relSessionTree(mp string) (map[string]relNode, error) {
	cmd := exec.Command("tar", "-C", mp, "-cf", "-", ".")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("tar of %s: %v: %s", mp, err, errb.String())
	}
	tree := map[string]relNode{}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return tree, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse tar of %s: %w", mp, err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		if name == "" || name == "." {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			tree[name] = relNode{kind: "dir"}
		case tar.TypeSymlink:
			tree[name] = relNode{kind: "link", data: h.Linkname}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("read %s from tar: %w", name, err)
			}
			tree[name] = relNode{kind: "file", exec: h.Mode&0o111 != 0, data: string(b)}
		case tar.TypeLink:
			// A hard link to a file read earlier: same content.
			target := strings.TrimPrefix(h.Linkname, "./")
			tree[name] = tree[target]
		default:
			tree[name] = relNode{kind: fmt.Sprintf("other %c", h.Typeflag)}
		}
	}
}

// relDiffTrees lists the differences between want and got (empty: equal).
func relDiffTrees(want, got map[string]relNode) []string {
	var diffs []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diffs = append(diffs, "missing "+p+" ("+w.String()+")")
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: got %s, want %s", p, g, w))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, "extra "+p+" ("+g.String()+")")
		}
	}
	sort.Strings(diffs)
	return diffs
}

// relLogEntry is one entry of `log --json`.
type relLogEntry struct {
	Seq       int    `json:"seq"`
	Gen       string `json:"gen"`
	Base      string `json:"base"`
	Kind      string `json:"kind"`
	Operation string `json:"operation"`
}

// relLog returns name's head log, newest first, or an error.
func (e *env) relLog(name string) ([]relLogEntry, error) {
	r, err := runCmd(e.command(nil, "--json", "log", name))
	if err != nil {
		return nil, err
	}
	if r.code != 0 {
		return nil, fmt.Errorf("log %s: %s", name, r)
	}
	var l []relLogEntry
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		return nil, fmt.Errorf("log --json %s: %v\n%s", name, err, r.stdout)
	}
	return l, nil
}

// relCheckLog checks that a head log is contiguous (sequence numbers
// n, n-1, …, 1 newest first) and that before (an earlier reading of the
// same log) is still its tail: history is only ever appended to.
func relCheckLog(name string, before, now []relLogEntry) error {
	for i, en := range now {
		if want := len(now) - i; en.Seq != want {
			return fmt.Errorf("log %s is not contiguous: entry %d has seq %d, want %d", name, i, en.Seq, want)
		}
		if len(en.Gen) != 64 {
			return fmt.Errorf("log %s: entry seq %d has generation %q", name, en.Seq, en.Gen)
		}
	}
	if len(before) > len(now) {
		return fmt.Errorf("log %s shrank from %d to %d entries", name, len(before), len(now))
	}
	tail := now[len(now)-len(before):]
	for i := range before {
		if before[i].Gen != tail[i].Gen || before[i].Seq != tail[i].Seq || before[i].Kind != tail[i].Kind {
			return fmt.Errorf("log %s: entry seq %d changed from %+v to %+v", name, before[i].Seq, before[i], tail[i])
		}
	}
	return nil
}

// relMountedHere reports whether mp is a FUSE mountpoint now.
func relMountedHere(mp string) bool { return slices.Contains(fuseMounts(), mp) }

// relDetach lazily unmounts mp if it is still a mountpoint (cleanup after a
// trial that stopped early, so that the env's leak check stays meaningful
// for the other paths).
func relDetach(mp string) {
	if relMountedHere(mp) {
		syscall.Unmount(mp, syscall.MNT_DETACH)
	}
}

// relWaitDead waits (bounded) until the dead mount mp answers ENOTCONN or is
// no mountpoint at all; it returns false if it still answers.
func relWaitDead(mp string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		var st syscall.Statfs_t // statfs always reaches the connection; stat may be cached
		if !relMountedHere(mp) || errors.Is(syscall.Statfs(mp, &st), syscall.ENOTCONN) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // the kernel notices a dead FUSE server on its own: no event
	}
}

// relKnownBug classifies a failure message as a product bug already found
// and reported (so a randomized trial that hits it is skipped, not failed,
// unless ACYCLICFS_TEST_BUGS=1). It returns the bug's description or "".
func relKnownBug(msg string) string {
	switch {
	case strings.Contains(msg, "corrupt overlay snapshot"):
		return "after a capture the overlay snapshot still names upper files the capture removed; after kill -9 the next mount fails 'corrupt overlay snapshot' (see TestCrashWhileIdle)"
	}
	return ""
}

// relSkipKnown skips (or, with ACYCLICFS_TEST_BUGS=1, fails) t for a known
// product bug.
func relSkipKnown(t *testing.T, bug, detail string) {
	t.Helper()
	if os.Getenv("ACYCLICFS_TEST_BUGS") == "1" {
		t.Fatalf("BUG: %s\n%s", bug, detail)
	}
	t.Skipf("BUG: %s\n%s", bug, detail)
}

// relFuseConn returns the FUSE connection number (the device minor) of the
// mount at mp, or "" if mp is no FUSE mountpoint.
func relFuseConn(mp string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !ok || !strings.HasPrefix(post, "fuse") || len(f) < 5 || strings.ReplaceAll(f[4], `\040`, " ") != mp {
			continue
		}
		if _, minor, ok := strings.Cut(f[2], ":"); ok {
			return minor
		}
	}
	return ""
}

// relStuckIn returns the kernel wait channels of pid's threads that are in
// uninterruptible sleep (state D).
func relStuckIn(pid int) []string {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	var out []string
	for _, task := range tasks {
		st, err := os.ReadFile(filepath.Join(task, "stat"))
		if err != nil {
			continue
		}
		// The state follows the parenthesised command name.
		if i := bytes.LastIndexByte(st, ')'); i < 0 || i+2 >= len(st) || st[i+2] != 'D' {
			continue
		}
		w, _ := os.ReadFile(filepath.Join(task, "wchan"))
		out = append(out, string(w))
	}
	return out
}
