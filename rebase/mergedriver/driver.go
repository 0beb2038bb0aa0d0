// Package mergedriver runs git custom merge drivers (merge.NAME.driver in
// git config) for rebase.Merge3, which runs no processes itself.
//
// # Wiring
//
// A caller sets rebase.Options.Driver to a Runner's Merge method:
//
//	run := &mergedriver.Runner{Config: mergedriver.TreeConfig(reader, ours, global), Warn: warn}
//	res, err := rebase.Merge3(reader, writer, base, ours, theirs, rebase.Options{Driver: run.Merge, ...})
//
// where ours is the root the .gitattributes are read from (the workspace's
// own tree, see rebase's attrs.go) and global the store owner's own git
// config content (~/.gitconfig; nil for none).
//
// # Trust
//
// Only the trusted configuration — RepoConfig.Files, which TreeConfig fills
// with global alone — defines drivers. A workspace's own .git/config is
// written by whoever writes the workspace (an agent), and a driver there
// would run as the store's owner: TreeConfig reads it (from the innermost
// directory D on the path whose D/.git is a directory) into
// RepoConfig.Repository only to tell, through Runner.Warn, that a driver
// it defines was ignored, and for %P (the path relative to D), never for a
// command. docs/security.md "Merge drivers".
//
// Merge3 calls Merge only for a regular file both sides changed whose
// merge attribute names a driver ("merge=NAME"); a NAME without a
// merge.NAME section in the trusted configuration returns ok false and
// Merge3 falls back as git does (the built-in driver of that name, else
// the text merge).
package mergedriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Runner's fields.
const (
	DefaultTimeout   = 30 * time.Second
	DefaultShell     = "/bin/sh"
	DefaultMaxOutput = 256 << 20
	// MarkerSize is what %L expands to: git's default conflict marker
	// size (the conflict-marker-size attribute is not read).
	MarkerSize = 7
)

// Labels %S, %X and %Y expand to (shell-quoted): the names rebase's
// conflict markers use for the three sides.
const (
	LabelBase   = "base"
	LabelOurs   = "ours"
	LabelTheirs = "theirs"
)

// RepoConfig is the git configuration that applies to one path.
type RepoConfig struct {
	// Files are the trusted git config file contents, lowest precedence
	// first (the store owner's config files); a later file's value wins,
	// as within a file a later line's does. Only they define drivers.
	Files [][]byte
	// Repository is the config of the repository holding the path, as
	// the workspace has it (nil for none). It is not trusted: a driver it
	// defines never runs; Merge reports it through Runner.Warn.
	Repository []byte
	// Path is the path %P expands to: git gives the path relative to the
	// repository top. Empty means the path Merge was given.
	Path string
}

// Runner runs git custom merge drivers. Its Merge method is a
// rebase.MergeDriver. The zero value with Config set is ready to use.
type Runner struct {
	// Config returns the configuration for the file at path (a path from
	// the merge root). Nil means no drivers are configured.
	Config func(path string) (RepoConfig, error)
	// Timeout bounds one driver run; zero means DefaultTimeout. A driver
	// still running then is killed with its whole process group and the
	// path is a conflict.
	Timeout time.Duration
	// Shell runs the driver command line as Shell -c CMD; empty means
	// DefaultShell.
	Shell string
	// TempDir is where private temporary directories are made; empty
	// means os.TempDir().
	TempDir string
	// MaxOutput bounds the result a driver leaves in %A; a larger result
	// is a conflict. Zero means DefaultMaxOutput.
	MaxOutput int64
	// Output receives the driver's standard output and error; nil
	// discards them.
	Output io.Writer
	// Warn, when set, receives one line per driver name the repository's
	// own config defines but the trusted configuration does not (the
	// driver that did not run), once per name.
	Warn func(msg string)

	mu     sync.Mutex
	warned map[string]bool
}

// driverCommand finds merge.NAME.driver for name in cfg. ok is false when
// no merge.NAME section exists (git then has no such driver); a section
// without a driver line is an error, as git dies on it.
func driverCommand(name string, cfg RepoConfig, path string) (cmd string, ok bool, err error) {
	for i, f := range cfg.Files {
		entries, err := parseConfig(f)
		if err != nil {
			return "", false, fmt.Errorf("mergedriver: config file %d for %q: %w", i, path, err)
		}
		for _, e := range entries {
			// git makes a driver of any merge.NAME.* key; name and
			// recursive are not used here.
			if e.section != "merge" || e.subsection != name || e.subsection == "" {
				continue
			}
			ok = true
			if e.key == "driver" {
				if !e.hasValue {
					return "", false, fmt.Errorf("mergedriver: merge.%s.driver for %q has no value", name, path)
				}
				cmd = e.value
			}
		}
	}
	if ok && cmd == "" {
		return "", false, fmt.Errorf("mergedriver: custom merge driver %q for %q lacks a command line (merge.%s.driver)", name, path, name)
	}
	return cmd, ok, nil
}

// Merge runs the merge driver name on the three contents of path, as git
// does: the contents are written to temporary files, the command line's
// %O, %A and %B become their paths (base, ours, theirs), %P the path,
// %L the marker size, %S, %X and %Y the side labels, %% a percent sign;
// it runs through Shell -c in the temporary directory; exit status 0 means
// clean, anything else a conflict; the result is what the driver left in
// %A. A driver that times out, or leaves no %A or an oversized one, is a
// conflict with ours' content as the stand-in. err is reserved for what
// the driver could not even be tried for: bad configuration, no temporary
// directory, a shell that cannot start.
func (r *Runner) Merge(name, path string, base, ours, theirs []byte) (merged []byte, clean, ok bool, err error) {
	if r.Config == nil {
		return nil, false, false, nil
	}
	cfg, err := r.Config(path)
	if err != nil {
		return nil, false, false, fmt.Errorf("mergedriver: config for %q: %w", path, err)
	}
	cmdline, ok, err := driverCommand(name, cfg, path)
	if err != nil {
		return nil, false, false, err
	}
	if !ok {
		if defines(cfg.Repository, name) {
			r.warn(name, path)
		}
		return nil, false, false, nil
	}
	rel := cfg.Path
	if rel == "" {
		rel = path
	}
	dir, err := os.MkdirTemp(r.TempDir, "acyclicfs-merge-")
	if err != nil {
		return nil, false, false, fmt.Errorf("mergedriver: temporary directory for %q: %w", path, err)
	}
	defer os.RemoveAll(dir)
	files := [3]string{filepath.Join(dir, "base"), filepath.Join(dir, "ours"), filepath.Join(dir, "theirs")}
	for i, data := range [][]byte{base, ours, theirs} {
		if err := os.WriteFile(files[i], data, 0o600); err != nil {
			return nil, false, false, fmt.Errorf("mergedriver: write %s side of %q: %w", filepath.Base(files[i]), path, err)
		}
	}
	expanded := expand(cmdline, map[byte]string{
		'O': quoteIfNeeded(files[0]),
		'A': quoteIfNeeded(files[1]),
		'B': quoteIfNeeded(files[2]),
		'L': fmt.Sprint(MarkerSize),
		'P': shellQuote(rel),
		'S': shellQuote(LabelBase),
		'X': shellQuote(LabelOurs),
		'Y': shellQuote(LabelTheirs),
	})
	exitOK, timedOut, err := r.run(dir, expanded)
	if err != nil {
		return nil, false, false, fmt.Errorf("mergedriver: run driver %q for %q: %w", name, path, err)
	}
	if timedOut {
		return ours, false, true, nil
	}
	out, err := r.readResult(files[1])
	if err != nil {
		return ours, false, true, nil
	}
	return out, exitOK, true, nil
}

// defines reports whether the config file data has a merge.NAME section
// (what makes a driver in git). A file that does not parse defines none.
func defines(data []byte, name string) bool {
	if data == nil || name == "" {
		return false
	}
	entries, err := parseConfig(data)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.section == "merge" && e.subsection == name {
			return true
		}
	}
	return false
}

// warn reports, once per name, a driver that did not run.
func (r *Runner) warn(name, path string) {
	if r.Warn == nil {
		return
	}
	r.mu.Lock()
	seen := r.warned[name]
	if r.warned == nil {
		r.warned = map[string]bool{}
	}
	r.warned[name] = true
	r.mu.Unlock()
	if !seen {
		r.Warn(fmt.Sprintf("merge driver %q (merge=%s for %s) is defined only in the workspace's own git config: it did not run, "+
			"git's built-in merge took its place; drivers run only from the store owner's git config (define merge.%s.driver in ~/.gitconfig to use it)",
			name, name, path, name))
	}
}

func (r *Runner) run(dir, cmdline string) (exitOK, timedOut bool, err error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	shell := r.Shell
	if shell == "" {
		shell = DefaultShell
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, shell, "-c", cmdline)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = r.Output, r.Output
	// Its own process group, so a timeout kills what the driver started
	// too. The group is killed only before Wait reaps the driver, while
	// its ID cannot have been reused.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		return false, true, nil
	}
	var exit *exec.ExitError
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay):
		return true, false, nil
	case errors.As(err, &exit):
		return false, false, nil
	}
	return false, false, err
}

func (r *Runner) readResult(file string) ([]byte, error) {
	limit := r.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("result larger than %d bytes", limit)
	}
	return data, nil
}

// expand substitutes %c placeholders as git's strbuf_expand does: a known
// one is replaced, "%%" is "%", any other is left as it is.
func expand(s string, dict map[byte]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		c := s[i+1]
		if v, ok := dict[c]; ok {
			b.WriteString(v)
			i++
		} else if c == '%' {
			b.WriteByte('%')
			i++
		} else {
			b.WriteByte('%')
		}
	}
	return b.String()
}

// shellQuote quotes s for sh as git's sq_quote does.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// quoteIfNeeded quotes a temporary file's path only when it needs it: git
// substitutes plain names there, so command lines that quote %A themselves
// ("\"%A\"") keep working for ordinary temporary directories.
func quoteIfNeeded(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isKeyChar(c) || c == '_' || c == '.' || c == '/' || c == '+' || c == ',' || c == ':' || c == '@') {
			return shellQuote(s)
		}
	}
	return s
}
