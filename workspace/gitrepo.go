package workspace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/acyclicfs/acyclicfs/internal/gitsafe"
)

// gitRepo runs git on a user's repository (a bound workspace's REPO). It
// takes the user's configuration (author and committer come from REPO's
// git config or the environment) but none of the variables that would
// point git at another repository, index or work tree.
type gitRepo struct {
	dir string   // the git directory (common dir)
	env []string // the environment git runs with
}

// gitRepoVars are cleared from the environment: they would redirect git.
var gitRepoVars = []string{
	"GIT_DIR=", "GIT_WORK_TREE=", "GIT_INDEX_FILE=", "GIT_OBJECT_DIRECTORY=",
	"GIT_ALTERNATE_OBJECT_DIRECTORIES=", "GIT_COMMON_DIR=", "GIT_NAMESPACE=",
	"GIT_CEILING_DIRECTORIES=", "GIT_PREFIX=", "GIT_QUARANTINE_PATH=",
}

// newGitRepo returns a runner for the git directory dir. extra are
// variables the client set (GIT_AUTHOR_NAME…) that win over the process's.
func newGitRepo(dir string, extra []string) *gitRepo {
	g := newGitAt(dir, extra)
	g.env = append(g.env, "GIT_DIR="+dir)
	return g
}

// newGitAt runs git in the directory dir, letting git find the
// repository there (a work tree, a linked worktree, a bare repository).
func newGitAt(dir string, extra []string) *gitRepo {
	var env []string
	for _, kv := range os.Environ() {
		drop := strings.HasPrefix(kv, "LC_ALL=")
		for _, v := range gitRepoVars {
			if strings.HasPrefix(kv, v) {
				drop = true
			}
		}
		if !drop {
			env = append(env, kv)
		}
	}
	env = append(env, extra...)
	env = append(env, "GIT_TERMINAL_PROMPT=0", "LC_ALL=C", "GIT_OPTIONAL_LOCKS=0")
	env = append(env, gitsafe.Env()...)
	return &gitRepo{dir: dir, env: env}
}

// errGit is git's own failure: its exit status and what it said.
type errGit struct {
	args   []string
	code   int
	stderr string
}

func (e *errGit) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if msg == "" {
		msg = fmt.Sprintf("exit status %d", e.code)
	}
	return fmt.Sprintf("git %s: %s", strings.Join(e.args, " "), msg)
}

// run runs git with args and stdin, returning stdout.
func (g *gitRepo) run(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command("git", gitsafe.Command(args...)...)
	cmd.Env = g.env
	cmd.Dir = g.dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.Bytes(), &errGit{args: args, code: ee.ExitCode(), stderr: errb.String()}
		}
		return nil, fmt.Errorf("run git %s: %w", strings.Join(args, " "), err)
	}
	return out.Bytes(), nil
}

// line runs git and returns its output's first line, trimmed.
func (g *gitRepo) line(args ...string) (string, error) {
	out, err := g.run(nil, args...)
	if err != nil {
		return "", err
	}
	s, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(s), nil
}

// exitedWith reports whether err is git exiting with status code.
func exitedWith(err error, code int) bool {
	var ge *errGit
	return errors.As(err, &ge) && ge.code == code
}

// resolve returns the commit ref names, or "" when ref does not exist.
func (g *gitRepo) resolve(ref string) (string, error) {
	s, err := g.line("rev-parse", "--verify", "-q", ref+"^{commit}")
	if exitedWith(err, 1) {
		return "", nil
	}
	return s, err
}

// isAncestor reports whether a is an ancestor of (or equal to) b.
func (g *gitRepo) isAncestor(a, b string) (bool, error) {
	_, err := g.run(nil, "merge-base", "--is-ancestor", a, b)
	if exitedWith(err, 1) {
		return false, nil
	}
	return err == nil, err
}

// connected reports whether every object reachable from tip and not from
// stop (when set) is in the repository.
func (g *gitRepo) connected(tip, stop string) bool {
	args := []string{"rev-list", "--objects", "--missing=error", "--quiet", tip}
	if stop != "" {
		args = append(args, "^"+stop)
	}
	_, err := g.run(nil, args...)
	return err == nil
}

// catFile is a long-running `git cat-file --batch` (trees to read) or
// `--batch-check` (objects to look for).
type catFile struct {
	cmd *exec.Cmd
	in  *bufio.Writer
	w   io.WriteCloser
	out *bufio.Reader
}

func (g *gitRepo) catFile(mode string) (*catFile, error) {
	cmd := exec.Command("git", gitsafe.Command("cat-file", mode)...)
	cmd.Env, cmd.Dir = g.env, g.dir
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("git cat-file: %w", err)
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("git cat-file: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("git cat-file: %w", err)
	}
	return &catFile{cmd: cmd, in: bufio.NewWriter(w), w: w, out: bufio.NewReaderSize(r, 1<<16)}, nil
}

func (c *catFile) close() {
	c.w.Close()
	_ = c.cmd.Wait()
}

// header asks for name and parses "<oid> <type> <size>"; found is false
// for "<name> missing".
func (c *catFile) header(name string) (typ string, size int, found bool, err error) {
	if _, err := c.in.WriteString(name + "\n"); err != nil {
		return "", 0, false, fmt.Errorf("git cat-file: %w", err)
	}
	if err := c.in.Flush(); err != nil {
		return "", 0, false, fmt.Errorf("git cat-file: %w", err)
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		return "", 0, false, fmt.Errorf("git cat-file: %w", err)
	}
	f := strings.Fields(line)
	if len(f) == 2 && f[1] == "missing" {
		return "", 0, false, nil
	}
	if len(f) != 3 {
		return "", 0, false, fmt.Errorf("git cat-file: unexpected %q", line)
	}
	if _, err := fmt.Sscan(f[2], &size); err != nil {
		return "", 0, false, fmt.Errorf("git cat-file: unexpected %q", line)
	}
	return f[1], size, true, nil
}

// name resolves rev (e.g. "C^{tree}") to an object name through a
// --batch process, skipping the content.
func (c *catFile) name(rev string) (string, error) {
	if _, err := c.in.WriteString(rev + "\n"); err != nil {
		return "", fmt.Errorf("git cat-file: %w", err)
	}
	if err := c.in.Flush(); err != nil {
		return "", fmt.Errorf("git cat-file: %w", err)
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("git cat-file: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		return "", fmt.Errorf("git cat-file %s: %q", rev, strings.TrimSpace(line))
	}
	var size int64
	if _, err := fmt.Sscan(f[2], &size); err != nil {
		return "", fmt.Errorf("git cat-file: unexpected %q", line)
	}
	if _, err := c.out.Discard(int(size) + 1); err != nil {
		return "", fmt.Errorf("git cat-file %s: %w", rev, err)
	}
	return f[0], nil
}

// read returns the object name's content (with --batch) and its type.
func (c *catFile) read(name string) (string, []byte, error) {
	typ, size, found, err := c.header(name)
	if err != nil || !found {
		if err == nil {
			err = fmt.Errorf("git object %s is missing", name)
		}
		return "", nil, err
	}
	buf := make([]byte, size+1)
	if _, err := io.ReadFull(c.out, buf); err != nil {
		return "", nil, fmt.Errorf("git cat-file %s: %w", name, err)
	}
	return typ, buf[:size], nil
}
