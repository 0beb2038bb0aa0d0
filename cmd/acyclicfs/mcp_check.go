package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// The MCP tools' arguments come from a model, not from a user at a shell:
// each is checked here before it reaches a command line (docs/mcp.md
// "What the tools accept"), and reaches it only after "--" (cliArgs) or
// inside a "--flag=value", never where the CLI reads flags.

// Bounds of the MCP tools' string arguments.
const (
	mcpMaxPath = 4096     // PATH_MAX
	mcpMaxText = 64 << 10 // a command, a commit message (an argument may be 128 KiB)
)

// mcpBad is a tool's refusal of an argument, worded as the CLI's errors
// are (cliError): "acyclicfs TOOL: exit 2 (bad input): FIELD: why".
func mcpBad(tool, field string, err error) error {
	return fmt.Errorf("acyclicfs %s: exit %d (%s): %s: %w", tool, exitUsage, exitName(exitUsage), field, err)
}

// mcpName checks a workspace name by the CLI's rule (workspace.ValidateName).
func mcpName(tool, field, v string) error {
	if err := workspace.ValidateName(v); err != nil {
		return mcpBad(tool, field, err)
	}
	return nil
}

// mcpRef checks WS, GEN or WS@GEN.
func mcpRef(tool, field, v string) error {
	name, gen, hasAt := strings.Cut(v, "@")
	if err := mcpName(tool, field, name); err != nil {
		return err
	}
	if hasAt {
		return mcpGen(tool, field, gen)
	}
	return nil
}

// mcpGen checks a generation id or prefix: hex digits.
func mcpGen(tool, field, v string) error {
	if v == "" || len(v) > 64 || strings.Trim(strings.ToLower(v), "0123456789abcdef") != "" {
		return mcpBad(tool, field, fmt.Errorf("%w: %.80q is not a generation id (hex digits, or a unique prefix of at least 8)", workspace.ErrInvalidInput, v))
	}
	return nil
}

// mcpText checks free text: no NUL byte (no command line holds one), at
// most max bytes.
func mcpText(tool, field, v string, max int) error {
	switch {
	case strings.IndexByte(v, 0) >= 0:
		return mcpBad(tool, field, fmt.Errorf("%w: holds a NUL byte", workspace.ErrInvalidInput))
	case len(v) > max:
		return mcpBad(tool, field, fmt.Errorf("%w: %d bytes, at most %d", workspace.ErrInvalidInput, len(v), max))
	}
	return nil
}

// mcpPath checks a path: not empty (the CLI would take the working
// directory), no NUL byte, at most PATH_MAX.
func mcpPath(tool, field, v string) error {
	if v == "" {
		return mcpBad(tool, field, fmt.Errorf("%w: empty", workspace.ErrInvalidInput))
	}
	return mcpText(tool, field, v, mcpMaxPath)
}

// mcpCount checks a count (n): not negative.
func mcpCount(tool string, n int) error {
	if n < 0 {
		return mcpBad(tool, "n", fmt.Errorf("%w: %d is negative", workspace.ErrInvalidInput, n))
	}
	return nil
}

// importable is p (from the server's working directory), with symlinks
// resolved, when it lies inside a directory the server may import from
// (mcp --allow-from).
func (r *mcpRunner) importable(tool, field, p string) (string, error) {
	if err := mcpPath(tool, field, p); err != nil {
		return "", err
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(r.cwd, abs)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", mcpBad(tool, field, fmt.Errorf("%w: %w", workspace.ErrInvalidInput, err))
	}
	for _, root := range r.allowFrom {
		if dirfd.Within(real, root) {
			return real, nil
		}
	}
	return "", mcpBad(tool, field, fmt.Errorf("%w: %s is outside the directories this server imports from (%s); start it with 'acyclicfs mcp --allow-from DIR' to allow another",
		workspace.ErrInvalidInput, real, strings.Join(r.allowFrom, ", ")))
}

// gitImportable is from_git (REPO or REPO@REF, as create --from-git reads
// it) with REPO importable.
func (r *mcpRunner) gitImportable(spec string) (string, error) {
	if err := mcpPath("create", "from_git", spec); err != nil {
		return "", err
	}
	repo, rev := spec, ""
	abs := spec
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(r.cwd, abs)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		if i := strings.LastIndexByte(spec, '@'); i > 0 {
			repo, rev = spec[:i], spec[i+1:]
			if rev == "" || rev[0] == '-' {
				return "", mcpBad("create", "from_git", fmt.Errorf("%w: revision %.80q: want a branch, tag or commit", workspace.ErrInvalidInput, rev))
			}
		}
	}
	real, err := r.importable("create", "from_git", repo)
	if err != nil {
		return "", err
	}
	if rev != "" {
		return real + "@" + rev, nil
	}
	return real, nil
}

// mountpoint checks the mount tool's mountpoint: an existing empty
// directory, reached without a symlink at its end. (The CLI also mounts
// over a directory's files, hiding them; the tool does not. The CLI
// refuses a mountpoint in a store or in a mount of the store.)
func (r *mcpRunner) mountpoint(p string) error {
	if err := mcpPath("mount", "mountpoint", p); err != nil {
		return err
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(r.cwd, abs)
	}
	fi, err := os.Lstat(abs)
	switch {
	case err != nil:
		return mcpBad("mount", "mountpoint", fmt.Errorf("%w: %w", workspace.ErrInvalidInput, err))
	case !fi.IsDir():
		return mcpBad("mount", "mountpoint", fmt.Errorf("%w: %s is not a directory", workspace.ErrInvalidInput, abs))
	}
	f, err := os.Open(abs)
	if err != nil {
		return mcpBad("mount", "mountpoint", fmt.Errorf("%w: %w", workspace.ErrInvalidInput, err))
	}
	defer f.Close()
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return mcpBad("mount", "mountpoint", fmt.Errorf("%w: %s is not empty: a mount would hide its files", workspace.ErrInvalidInput, abs))
	}
	return nil
}
