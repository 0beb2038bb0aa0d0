package gitmerge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/gitsafe"
	"github.com/acyclicfs/acyclicfs/store"
)

// repo is a private, throwaway bare git repository used to ask git what
// only git knows. Its objects are the union of the three sides, hard
// links to the store's blob files under src/ (an alternate object
// directory), so that every object git writes lands in repo/objects/ and
// is found by listing that directory alone.
type repo struct {
	m      *Merger
	ctx    context.Context
	dir    string // temp root, removed by close
	gitDir string // dir/repo
	src    string // dir/src: the linked objects
	env    []string
	hexLen int // length of an object name: 40, or 64 for sha256
	// later are objects not linked yet (blobs of the work trees); see
	// objectsMerge.linkList and linkLater.
	later []object
}

// linkLater links the objects left out so far; it reports false if there
// were none (a retry would fail the same way).
func (r *repo) linkLater() (bool, error) {
	if len(r.later) == 0 {
		return false, nil
	}
	objs := r.later
	r.later = nil
	return true, r.link(objs)
}

func (m *Merger) newRepo(ctx context.Context, objectFormat string) (*repo, error) {
	parent := m.TempDir
	if parent == "" {
		parent = os.TempDir()
	}
	dir, err := os.MkdirTemp(parent, "acyclicfs-gitmerge-")
	if err != nil {
		return nil, fmt.Errorf("gitmerge: make temp git dir: %w", err)
	}
	r := &repo{m: m, ctx: ctx, dir: dir, gitDir: filepath.Join(dir, "repo"), src: filepath.Join(dir, "src"), hexLen: 40}
	if objectFormat == "sha256" {
		r.hexLen = 64
	}
	version := "0"
	ext := ""
	if objectFormat != "" && objectFormat != "sha1" {
		version = "1"
		ext = "[extensions]\n\tobjectformat = " + objectFormat + "\n"
	}
	config := "[core]\n\trepositoryformatversion = " + version + "\n\tbare = true\n\tfsyncMethod = writeout-only\n" +
		"[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n[commit]\n\tgpgSign = false\n" + ext
	for _, d := range []string{"repo/objects/info", "repo/objects/pack", "repo/refs", "src/pack"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			r.close()
			return nil, fmt.Errorf("gitmerge: make temp git dir: %w", err)
		}
	}
	files := map[string]string{
		"repo/HEAD":                    "ref: refs/heads/acyclicfs-merge\n",
		"repo/config":                  config,
		"repo/objects/info/alternates": r.src + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			r.close()
			return nil, fmt.Errorf("gitmerge: write temp %s: %w", name, err)
		}
	}
	r.env = gitEnv(r.gitDir, dir)
	return r, nil
}

// gitEnv is the environment of every git run: nothing of the caller's
// GIT_* variables or configuration leaks in (no hooks, no signing, no
// replace refs, no fsmonitor), so a merge depends only on its inputs.
func gitEnv(gitDir, home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") ||
			strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env,
		"GIT_DIR="+gitDir,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+os.DevNull,
		"HOME="+home,
		"XDG_CONFIG_HOME="+home,
		"LC_ALL=C",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_LITERAL_PATHSPECS=1",
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_AUTO_GC=0",
	), gitsafe.Env()...)
}

func (r *repo) close() {
	if r != nil && r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

// gitResult is one git run: its output and exit status.
type gitResult struct {
	out  []byte
	err  []byte
	code int
}

// run runs git with args. It fails only when git could not run or timed
// out; a non-zero exit is the caller's to judge (res.code).
func (r *repo) run(stdin []byte, env []string, args ...string) (gitResult, error) {
	cmd := exec.CommandContext(r.ctx, r.m.gitBin(), gitsafe.Command(args...)...)
	cmd.Env = append(append([]string(nil), r.env...), env...)
	cmd.Dir = r.dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	res := gitResult{out: out.Bytes(), err: errb.Bytes()}
	if ctxErr := r.ctx.Err(); ctxErr != nil {
		return res, fmt.Errorf("%w: git %s: %w", ErrGitTimeout, strings.Join(args, " "), ctxErr)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
		if res.code < 0 {
			return res, fmt.Errorf("%w: git %s: %w", ErrGit, strings.Join(args, " "), err)
		}
	case err != nil:
		return res, fmt.Errorf("%w: git %s: %w", ErrGit, strings.Join(args, " "), err)
	}
	return res, nil
}

// ok runs git and fails on a non-zero exit.
func (r *repo) ok(stdin []byte, env []string, args ...string) ([]byte, error) {
	res, err := r.run(stdin, env, args...)
	if err != nil {
		return nil, err
	}
	if res.code != 0 {
		return nil, fmt.Errorf("%w: git %s: exit %d: %s", ErrGit, strings.Join(args, " "), res.code, strings.TrimSpace(string(res.err)))
	}
	return res.out, nil
}

// object is one object file to place in the temp repository: name is its
// path under objects/ ("ab/cdef…" or "pack/pack-….pack").
type object struct {
	name string
	id   store.ID
}

// link places objs under src/, hard links to the store's blob files where
// it can (a blob file is never written, so sharing its inode is safe) and
// copies otherwise (another filesystem, or a blob the store keeps
// elsewhere). Links are made by a few goroutines: a real project has tens
// of thousands of loose objects and a link is a system call.
func (r *repo) link(objs []object) error {
	dirs := map[string]bool{}
	for _, o := range objs {
		if d := filepath.Dir(o.name); !dirs[d] {
			dirs[d] = true
			if err := os.MkdirAll(filepath.Join(r.src, d), 0o755); err != nil {
				return fmt.Errorf("gitmerge: make temp object dir: %w", err)
			}
		}
	}
	workers := min(runtime.GOMAXPROCS(0), 8, len(objs)/256+1)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(objs); i += workers {
				if err := r.linkOne(objs[i]); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *repo) linkOne(o object) error {
	dst := filepath.Join(r.src, o.name)
	if bp, ok := r.m.Store.(BlobPather); ok {
		if err := os.Link(bp.BlobPath(o.id), dst); err == nil || errors.Is(err, os.ErrExist) {
			return nil
		}
	}
	rc, err := r.m.Store.OpenBlob(o.id)
	if err != nil {
		return fmt.Errorf("gitmerge: open object %s (blob %s): %w", o.name, o.id.Short(), err)
	}
	defer rc.Close()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return fmt.Errorf("gitmerge: copy object %s: %w", o.name, err)
	}
	_, err = io.Copy(f, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("gitmerge: copy object %s: %w", o.name, err)
	}
	return nil
}

// newObjects lists the loose objects git wrote: everything under
// repo/objects/xx/.
func (r *repo) newObjects() (map[string][]string, error) {
	root := filepath.Join(r.gitDir, "objects")
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("gitmerge: list new objects: %w", err)
	}
	out := map[string][]string{}
	for _, d := range ents {
		if !d.IsDir() || !isHex(d.Name(), 2) {
			continue
		}
		files, err := os.ReadDir(filepath.Join(root, d.Name()))
		if err != nil {
			return nil, fmt.Errorf("gitmerge: list new objects: %w", err)
		}
		for _, f := range files {
			if f.Type().IsRegular() && isHex(f.Name(), len(f.Name())) {
				out[d.Name()] = append(out[d.Name()], f.Name())
			}
		}
	}
	return out, nil
}

// splitPacks separates loose objects from pack files.
func splitPacks(objs []object) (loose, packs []object) {
	for _, o := range objs {
		if strings.HasPrefix(o.name, "pack/") {
			packs = append(packs, o)
		} else {
			loose = append(loose, o)
		}
	}
	return loose, packs
}

func isHex(s string, n int) bool {
	if len(s) != n || n == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// versions caches checkVersion's verdict per git binary (an error value,
// or nil), so that a Merger per merge costs no extra git run. A check that
// timed out is not cached.
var versions sync.Map

func checkVersionOnce(bin string) error {
	if v, ok := versions.Load(bin); ok {
		err, _ := v.(error)
		return err
	}
	err := checkVersion(context.Background(), bin)
	if !errors.Is(err, context.DeadlineExceeded) {
		versions.Store(bin, err)
	}
	return err
}

// checkVersion fails with ErrGitVersion when git predates 2.38.
func checkVersion(ctx context.Context, bin string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return fmt.Errorf("%w: %s version: %w", ErrGit, bin, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return fmt.Errorf("%w: %s version printed %q", ErrGit, bin, out)
	}
	parts := strings.SplitN(f[2], ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("%w: %s version printed %q", ErrGit, bin, out)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%w: %s version printed %q", ErrGit, bin, out)
	}
	if major < 2 || major == 2 && minor < 38 {
		return fmt.Errorf("%w: %s is %s", ErrGitVersion, bin, f[2])
	}
	return nil
}

func writeFile(p string, data []byte) error {
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return fmt.Errorf("gitmerge: write %s: %w", filepath.Base(p), err)
	}
	return nil
}
