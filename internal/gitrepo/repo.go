// Package gitrepo reads a git repository through the git binary's
// plumbing (rev-parse, ls-tree, cat-file --batch, for-each-ref) and
// writes git index files. It is what `create --from-git` stands on: a
// commit's tree read from a repository's objects with no checkout. It
// never writes to the repository it reads.
//
// git itself is used rather than a reimplementation (go-git) because the
// repositories are the user's own: whatever git can read (packs, commit
// graphs, alternates, partial clones, future formats) this reads too, and
// cat-file --batch streams objects faster than go-git inflates deltas.
package gitrepo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/acyclicfs/acyclicfs/internal/gitsafe"
)

// Sentinel errors.
var (
	// ErrNotRepo: the path is not in a git repository.
	ErrNotRepo = errors.New("not a git repository")
	// ErrNoRef: the revision names no commit of the repository.
	ErrNoRef = errors.New("no such revision")
	// ErrUnsupported: the repository uses something this package does
	// not handle (a sha256 object format).
	ErrUnsupported = errors.New("unsupported repository")
	// ErrNoGit: no git binary on PATH.
	ErrNoGit = errors.New("git is not installed")
	// ErrMissingObject: the repository does not hold the object (gc'd
	// after its branch was deleted, say).
	ErrMissingObject = errors.New("object missing from the repository")
)

// Repo is an opened repository.
type Repo struct {
	// GitDir is the absolute path of the repository's common git
	// directory (the one holding objects/ and refs/).
	GitDir string
	bin    string
	// Background: git runs at the lowest CPU priority (nice 19), so that
	// work nobody waits for (a background resolution) yields to the
	// tools the user runs.
	Background bool
}

// Open finds the repository at or above path (a work tree, a bare
// repository or a .git directory).
func Open(ctx context.Context, path string) (*Repo, error) {
	bin, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoGit, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", path, err)
	}
	if fi, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotRepo, path, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNotRepo, path)
	}
	cmd := exec.CommandContext(ctx, bin, gitsafe.Command("-C", abs, "rev-parse", "--path-format=absolute", "--git-common-dir")...)
	cmd.Env = env("")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotRepo, path)
	}
	r := &Repo{GitDir: strings.TrimSpace(string(out)), bin: bin}
	format, err := r.output(ctx, nil, "rev-parse", "--show-object-format")
	if err != nil {
		return nil, err
	}
	if f := strings.TrimSpace(string(format)); f != "sha1" {
		return nil, fmt.Errorf("%w: %s uses the %s object format", ErrUnsupported, r.GitDir, f)
	}
	return r, nil
}

// At returns the repository whose git directory is gitDir, as Open
// found it before, without running git.
func At(gitDir string) (*Repo, error) {
	bin, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoGit, err)
	}
	return &Repo{GitDir: gitDir, bin: bin}, nil
}

// env is the environment of every git run: the caller's GIT_*
// variables and configuration do not leak in (no replace refs, no
// fsmonitor, no lazy fetch of a partial clone's missing objects), and
// with gitsafe's settings (on every command line) nothing the
// repository's own config names runs.
func env(gitDir string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_TERMINAL_PROMPT=0", "GIT_NO_REPLACE_OBJECTS=1", "GIT_OPTIONAL_LOCKS=0", "GIT_NO_LAZY_FETCH=1")
	out = append(out, gitsafe.Env()...)
	if gitDir != "" {
		out = append(out, "GIT_DIR="+gitDir)
	}
	return out
}

func (r *Repo) command(ctx context.Context, args ...string) *exec.Cmd {
	args = gitsafe.Command(args...)
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.Env = env(r.GitDir)
	if r.Background {
		if nice, err := exec.LookPath("nice"); err == nil {
			// nice execs git: the pid, and so the context's kill, is git's.
			cmd = exec.CommandContext(ctx, nice, append([]string{"-n", "19", r.bin}, args...)...)
			cmd.Env = env(r.GitDir)
		}
	}
	return cmd
}

// output runs git and returns its standard output; a failure carries its
// standard error.
func (r *Repo) output(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := r.command(ctx, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Resolved is a revision resolved to a commit.
type Resolved struct {
	Commit string // hex object name
	// Branch is the full ref (refs/heads/B) when the revision is a branch
	// (or HEAD on a branch); empty for a tag, a commit or a detached HEAD.
	Branch string
	// Time is the committer time of Commit, seconds since the epoch.
	Time int64
	// Tree is the hex object name of Commit's tree.
	Tree string
}

// Resolve resolves rev ("" for HEAD): a branch name, a full ref, a tag or
// anything rev-parse takes, as long as it names a commit.
func (r *Repo) Resolve(ctx context.Context, rev string) (Resolved, error) {
	var res Resolved
	switch {
	case rev == "" || rev == "HEAD":
		if out, err := r.output(ctx, nil, "symbolic-ref", "-q", "HEAD"); err == nil {
			res.Branch = strings.TrimSpace(string(out))
		}
		rev = "HEAD"
	case strings.HasPrefix(rev, "refs/heads/"):
		res.Branch = rev
	default:
		if _, err := r.output(ctx, nil, "rev-parse", "--verify", "-q", "refs/heads/"+rev); err == nil {
			res.Branch, rev = "refs/heads/"+rev, "refs/heads/"+rev
		}
	}
	if strings.HasPrefix(rev, "-") {
		return res, fmt.Errorf("%w: %q", ErrNoRef, rev)
	}
	out, err := r.output(ctx, nil, "rev-parse", "--verify", "-q", "--end-of-options", rev+"^{commit}")
	if err != nil {
		if rev == "HEAD" {
			return res, fmt.Errorf("%w: HEAD of %s (an empty repository?)", ErrNoRef, r.GitDir)
		}
		return res, fmt.Errorf("%w: %q in %s", ErrNoRef, rev, r.GitDir)
	}
	res.Commit = strings.TrimSpace(string(out))
	t, err := r.output(ctx, nil, "show", "-s", "--format=%ct %T", res.Commit)
	if err != nil {
		return res, err
	}
	ct, tree, _ := strings.Cut(strings.TrimSpace(string(t)), " ")
	res.Time, _ = strconv.ParseInt(ct, 10, 64)
	if len(tree) != 40 {
		return res, fmt.Errorf("%w: %s has no tree (%q)", ErrNoRef, res.Commit, t)
	}
	res.Tree = tree
	return res, nil
}

// TreeEntry is one entry of a recursive tree listing.
type TreeEntry struct {
	Path string // slash-separated, from the tree's root
	Mode uint32 // git mode: 040000, 0100644, 0100755, 0120000, 0160000
	OID  string // hex object name
	Size int64  // blob size (0 for trees and gitlinks)
}

// Git modes.
const (
	ModeTree    = 0o40000
	ModeFile    = 0o100644
	ModeExec    = 0o100755
	ModeSymlink = 0o120000
	ModeGitlink = 0o160000
)

// ListTree lists every entry below commit's tree, trees included, in
// git's tree order.
func (r *Repo) ListTree(ctx context.Context, commit string) ([]TreeEntry, error) {
	out, err := r.output(ctx, nil, "ls-tree", "-r", "-t", "-z", "-l", "--full-tree", commit)
	if err != nil {
		return nil, err
	}
	return parseLsTree(out)
}

// parseLsTree decodes `ls-tree -z -l` output: "MODE TYPE OID SIZE\tPATH\0".
func parseLsTree(out []byte) ([]TreeEntry, error) {
	var es []TreeEntry
	for len(out) > 0 {
		end := bytes.IndexByte(out, 0)
		if end < 0 {
			return nil, fmt.Errorf("ls-tree: unterminated entry %q", out)
		}
		rec := out[:end]
		out = out[end+1:]
		tab := bytes.IndexByte(rec, '\t')
		if tab < 0 {
			return nil, fmt.Errorf("ls-tree: no path in %q", rec)
		}
		f := strings.Fields(string(rec[:tab]))
		if len(f) != 4 {
			return nil, fmt.Errorf("ls-tree: bad entry %q", rec)
		}
		mode, err := strconv.ParseUint(f[0], 8, 32)
		if err != nil {
			return nil, fmt.Errorf("ls-tree: bad mode in %q", rec)
		}
		e := TreeEntry{Path: string(rec[tab+1:]), Mode: uint32(mode), OID: f[2]}
		if f[3] != "-" {
			if e.Size, err = strconv.ParseInt(f[3], 10, 64); err != nil || e.Size < 0 {
				return nil, fmt.Errorf("ls-tree: bad size in %q", rec)
			}
		}
		if len(e.OID) != 40 {
			return nil, fmt.Errorf("ls-tree: bad object name in %q", rec)
		}
		es = append(es, e)
	}
	return es, nil
}

// CatBlobs streams the content of each blob in oids, in order, to fn
// (which must consume r before it returns), through one
// `git cat-file --batch`.
func (r *Repo) CatBlobs(ctx context.Context, oids []string, fn func(i int, r io.Reader, size int64) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := r.command(ctx, "cat-file", "--batch")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("git cat-file: %w", err)
	}
	go func() {
		w := bufio.NewWriterSize(stdin, 64<<10)
		for _, o := range oids {
			if _, err := w.WriteString(o + "\n"); err != nil {
				break
			}
		}
		w.Flush()
		stdin.Close()
	}()
	br := bufio.NewReaderSize(stdout, 256<<10)
	ferr := func() error {
		for i, o := range oids {
			hdr, err := br.ReadString('\n')
			if err != nil {
				return fmt.Errorf("git cat-file: reading %s: %w", o, err)
			}
			f := strings.Fields(hdr)
			if len(f) == 2 && f[1] == "missing" {
				return fmt.Errorf("%w: %w: object %s is missing from %s", ErrNoRef, ErrMissingObject, o, r.GitDir)
			}
			if len(f) != 3 || f[0] != o || f[1] != "blob" {
				return fmt.Errorf("git cat-file: unexpected header %q for %s", hdr, o)
			}
			size, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || size < 0 {
				return fmt.Errorf("git cat-file: bad size in %q", hdr)
			}
			lr := &io.LimitedReader{R: br, N: size}
			if err := fn(i, lr, size); err != nil {
				return err
			}
			if lr.N != 0 {
				if _, err := io.Copy(io.Discard, lr); err != nil {
					return fmt.Errorf("git cat-file: %w", err)
				}
			}
			if lr.N != 0 {
				return fmt.Errorf("git cat-file: %s cut short", o)
			}
			if b, err := br.ReadByte(); err != nil || b != '\n' {
				return fmt.Errorf("git cat-file: no newline after %s", o)
			}
		}
		return nil
	}()
	if ferr != nil {
		cancel()
		_ = cmd.Wait()
		return ferr
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git cat-file: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Ref is one ref and, for an annotated tag, the object it peels to.
type Ref struct {
	Name, OID, Peeled string
}

// Refs lists the repository's branches and tags, sorted by name.
func (r *Repo) Refs(ctx context.Context) ([]Ref, error) {
	out, err := r.output(ctx, nil, "for-each-ref", "--sort=refname", "--format=%(objectname) %(refname) %(*objectname)", "refs/heads", "refs/tags")
	if err != nil {
		return nil, err
	}
	var refs []Ref
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		ref := Ref{OID: f[0], Name: f[1]}
		if len(f) > 2 {
			ref.Peeled = f[2]
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// PackedRefs is the packed-refs file listing refs (sorted by name).
func PackedRefs(refs []Ref) []byte {
	var b bytes.Buffer
	b.WriteString("# pack-refs with: peeled fully-peeled sorted \n")
	for _, r := range refs {
		fmt.Fprintf(&b, "%s %s\n", r.OID, r.Name)
		if r.Peeled != "" {
			fmt.Fprintf(&b, "^%s\n", r.Peeled)
		}
	}
	return b.Bytes()
}

// BlobReader reads blobs one at a time through one long-lived
// `git cat-file --batch`, started on the first Read and again after a
// failure. It is safe for concurrent use (reads are serialized).
type BlobReader struct {
	repo *Repo
	mu   sync.Mutex // guards the fields below
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
}

// NewBlobReader returns a reader of r's blobs; Close ends its process.
func (r *Repo) NewBlobReader() *BlobReader { return &BlobReader{repo: r} }

// Read returns blob oid's content, checked against its name and size as
// ReadBlob does: an error wrapping ErrMissingObject if the repository
// lacks it.
func (b *BlobReader) Read(oid string, size int64) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		cmd := b.repo.command(context.Background(), "cat-file", "--batch")
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("git cat-file: %w", err)
		}
		b.cmd, b.in, b.out = cmd, in, bufio.NewReaderSize(out, 64<<10)
	}
	data, err := b.read(oid, size)
	if err != nil && !errors.Is(err, ErrMissingObject) {
		b.stop() // the stream may be out of step: start afresh next time
	}
	return data, err
}

func (b *BlobReader) read(oid string, size int64) ([]byte, error) {
	if _, err := io.WriteString(b.in, oid+"\n"); err != nil {
		return nil, fmt.Errorf("git cat-file: %w", err)
	}
	hdr, err := b.out.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("git cat-file: reading %s: %w", oid, err)
	}
	f := strings.Fields(hdr)
	if len(f) == 2 && f[1] == "missing" {
		return nil, fmt.Errorf("%w: blob %s in %s", ErrMissingObject, oid, b.repo.GitDir)
	}
	if len(f) != 3 || f[0] != oid || f[1] != "blob" {
		return nil, fmt.Errorf("git cat-file: unexpected header %q for %s", hdr, oid)
	}
	if f[2] != strconv.FormatInt(size, 10) {
		return nil, fmt.Errorf("git object %s in %s: %s bytes, want %d", oid, b.repo.GitDir, f[2], size)
	}
	data := make([]byte, size+1)
	if _, err := io.ReadFull(b.out, data); err != nil {
		return nil, fmt.Errorf("git cat-file: %s: %w", oid, err)
	}
	if data[size] != '\n' {
		return nil, fmt.Errorf("git cat-file: no newline after %s", oid)
	}
	data = data[:size]
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	h.Write(data)
	if got := hex.EncodeToString(h.Sum(nil)); got != oid {
		return nil, fmt.Errorf("git object %s in %s: content hashes to %s", oid, b.repo.GitDir, got)
	}
	return data, nil
}

func (b *BlobReader) stop() {
	if b.cmd == nil {
		return
	}
	b.in.Close()
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
	b.cmd, b.in, b.out = nil, nil, nil
}

// Close ends the reader's process; a later Read starts another.
func (b *BlobReader) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stop()
}

// Missing returns the objects of oids the repository does not hold (one
// `git cat-file --batch-check`).
func (r *Repo) Missing(ctx context.Context, oids []string) ([]string, error) {
	var in bytes.Buffer
	for _, o := range oids {
		in.WriteString(o + "\n")
	}
	out, err := r.output(ctx, in.Bytes(), "cat-file", "--batch-check=%(objectname)")
	if err != nil {
		return nil, err
	}
	var missing []string
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) == 2 && f[1] == "missing" {
			missing = append(missing, f[0])
		}
	}
	return missing, nil
}
