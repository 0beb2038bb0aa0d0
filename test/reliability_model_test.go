package test

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A model-based filesystem test through the real binary (issue 6, part 4):
// a seeded random sequence of POSIX operations is applied in lockstep to a
// mounted workspace and to a native directory, comparing every result and
// errno; then the trees are compared after a capture (unmount), after a
// remount, and after a no-op rebase.

// relModelPool are the paths operations pick from besides existing ones.
var relModelPool = []string{"a", "b", "c", "d", "e", "f", "d/a", "d/g", "e/a", "e/h", "d/h", "d/h/a", "d/h/i", "e/h/j"}

// relFS applies one operation under a root.
type relOp struct {
	desc string
	do   func(root string) (string, error)
}

func relErrno(err error) string {
	if err == nil {
		return "ok"
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return err.Error()
}

// relGenOp makes a random operation on paths of the native tree (files,
// dirs: the regular files and directories among them) or of the pool.
func relGenOp(r *rand.Rand, existing, files, dirs []string) relOp {
	from := func(l []string, pct int) string {
		if len(l) > 0 && r.Intn(100) < pct {
			return l[r.Intn(len(l))]
		}
		return relModelPool[r.Intn(len(relModelPool))]
	}
	pick := func(pExisting int) string { return from(existing, pExisting) }
	pickFile := func() string { return from(files, 85) }
	pickDir := func() string { return from(dirs, 70) }
	data := func() []byte {
		b := make([]byte, r.Intn(120))
		for i := range b {
			b[i] = byte('a' + r.Intn(26))
		}
		return b
	}
	switch r.Intn(13) {
	case 0, 1:
		p, b := pick(30), data()
		return relOp{fmt.Sprintf("create %s (%d bytes)", p, len(b)), func(root string) (string, error) {
			fd, err := syscall.Open(filepath.Join(root, p), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
			if err != nil {
				return "", err
			}
			defer syscall.Close(fd)
			n, err := syscall.Write(fd, b)
			return strconv.Itoa(n), err
		}}
	case 2, 3:
		p, b, off := pickFile(), data(), int64(r.Intn(200))
		return relOp{fmt.Sprintf("write %s at %d (%d bytes)", p, off, len(b)), func(root string) (string, error) {
			fd, err := syscall.Open(filepath.Join(root, p), syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				return "", err
			}
			defer syscall.Close(fd)
			n, err := syscall.Pwrite(fd, b, off)
			return strconv.Itoa(n), err
		}}
	case 4:
		p, n := pickFile(), int64(r.Intn(150))
		return relOp{fmt.Sprintf("truncate %s %d", p, n), func(root string) (string, error) {
			return "", syscall.Truncate(filepath.Join(root, p), n)
		}}
	case 5, 6:
		p, q := pick(80), pick(40)
		return relOp{fmt.Sprintf("rename %s %s", p, q), func(root string) (string, error) {
			return "", syscall.Rename(filepath.Join(root, p), filepath.Join(root, q))
		}}
	case 7:
		p := pick(80)
		return relOp{"unlink " + p, func(root string) (string, error) {
			return "", syscall.Unlink(filepath.Join(root, p))
		}}
	case 8:
		p := pick(20)
		return relOp{"mkdir " + p, func(root string) (string, error) {
			return "", syscall.Mkdir(filepath.Join(root, p), 0o755)
		}}
	case 9:
		p := pickDir()
		return relOp{"rmdir " + p, func(root string) (string, error) {
			return "", syscall.Rmdir(filepath.Join(root, p))
		}}
	case 10:
		p, q := pick(80), pick(20)
		if r.Intn(2) == 0 {
			return relOp{fmt.Sprintf("link %s %s", p, q), func(root string) (string, error) {
				return "", syscall.Link(filepath.Join(root, p), filepath.Join(root, q))
			}}
		}
		// Targets never contain ".." nor start with "/": resolving a link
		// stays inside the root on both sides.
		target := relModelPool[r.Intn(len(relModelPool))]
		return relOp{fmt.Sprintf("symlink %s -> %s", q, target), func(root string) (string, error) {
			return "", syscall.Symlink(target, filepath.Join(root, q))
		}}
	case 11:
		p, mode := pickFile(), uint32(0o644)
		if r.Intn(2) == 0 {
			mode = 0o755
		}
		return relOp{fmt.Sprintf("chmod %s %o", p, mode), func(root string) (string, error) {
			return "", syscall.Chmod(filepath.Join(root, p), mode)
		}}
	default:
		p := pick(80)
		return relOp{"fsync " + p, func(root string) (string, error) {
			fd, err := syscall.Open(filepath.Join(root, p), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				return "", err
			}
			defer syscall.Close(fd)
			return "", syscall.Fsync(fd)
		}}
	}
}

func TestReliabilityModelFS(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	if s := os.Getenv("ACYCLICFS_TEST_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (rerun with ACYCLICFS_TEST_SEED=%d)", seed, seed)
	defer func() {
		if t.Failed() {
			t.Logf("failed with seed %d", seed)
		}
	}()
	r := rand.New(rand.NewSource(seed))
	const ops = 200
	e := newMountEnv(t)
	initial := map[string]string{"a": "hello\n", "d/b": "world\n", "d/h/": "", "e/": "", "big": strings.Repeat("0123456789", 500)}
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, initial)
	e.ok("create", "main", "--from", src)
	e.ok("fork", "main", "child")
	native := filepath.Join(e.dir, "native")
	writeTree(t, native, initial)
	mp := e.mountAt("child")
	// The test process's own session holds the lease until unmount.

	var history []string
	compare := func(what string, wantRoot, gotRoot string) {
		t.Helper()
		if d := relDiffTrees(relTree(t, wantRoot), relTree(t, gotRoot)); len(d) > 0 {
			t.Fatalf("%s: the mount differs from the native directory:\n%s\nops:\n%s", what, strings.Join(d, "\n"), strings.Join(history, "\n"))
		}
	}
	counts := map[string]int{}
	errnos := 0
	for i := range ops {
		var existing, files, dirs []string
		tree := relTree(t, native)
		for p := range tree {
			existing = append(existing, p)
		}
		sort.Strings(existing) // map order is random: keep the run a function of the seed
		for _, p := range existing {
			switch tree[p].kind {
			case "file":
				files = append(files, p)
			case "dir":
				dirs = append(dirs, p)
			}
		}
		op := relGenOp(r, existing, files, dirs)
		wantOut, wantErr := op.do(native)
		gotOut, gotErr := op.do(mp)
		w, g := relErrno(wantErr)+" "+wantOut, relErrno(gotErr)+" "+gotOut
		history = append(history, fmt.Sprintf("%3d %s: %s", i, op.desc, w))
		counts[strings.Fields(op.desc)[0]]++
		if wantErr != nil {
			errnos++
		}
		if w != g {
			t.Fatalf("op %d %s: native gives %q, the mount %q\nops:\n%s", i, op.desc, w, g, strings.Join(history, "\n"))
		}
		if i%10 == 9 {
			compare(fmt.Sprintf("after op %d", i), native, mp)
		}
	}
	compare("after all ops", native, mp)
	if o, _ := e.unmount(mp); o != "current" {
		t.Fatalf("unmount: %q", o)
	}
	compare("export after unmount", native, e.exportTo("child", "out1"))
	if r := e.run("mount", "child", mp); r.code != 0 {
		t.Fatalf("remount: %s", r)
	}
	compare("after remount", native, mp)
	e.unmount(mp)
	if got := e.ok("rebase", "child"); got != "current" {
		t.Fatalf("no-op rebase: %q", got)
	}
	compare("export after a no-op rebase", native, e.exportTo("child", "out2"))
	if r := e.run("mount", "child", mp); r.code != 0 {
		t.Fatalf("remount after rebase: %s", r)
	}
	compare("mount after a no-op rebase", native, mp)
	e.unmount(mp)
	e.fsck()
	t.Logf("%d ops (%d failing alike on both sides) %v; trees equal after the ops, the capture, a remount and a no-op rebase", ops, errnos, counts)
}
