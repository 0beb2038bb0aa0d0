package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A mounted workspace with a git repository at its root gets git's
// fsmonitor hook configured in that repository's .git/config: the
// workspace's own copy, captured like any file (docs/git.md "fsmonitor").
// The lines live in a marked block so that mount --no-fsmonitor (and the
// next mount, with a new binary or store path) can replace or remove
// exactly them; git rewriting the file (git config) keeps the block.
const (
	fsmBlockBegin = "# acyclicfs fsmonitor: added by `acyclicfs mount`, removed by `acyclicfs mount --no-fsmonitor`"
	fsmBlockEnd   = "# acyclicfs fsmonitor end"
)

// shellQuote quotes s for sh: git runs core.fsmonitor through the shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// gitConfigQuote quotes v as a git config value (so '#' and ';' are not
// comments).
func gitConfigQuote(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	return `"` + strings.ReplaceAll(v, `"`, `\"`) + `"`
}

// HookName is the small hook binary (cmd/acyclicfs-fsmonitor) a mount
// points git at when it lies beside the acyclicfs binary: git starts the
// hook for every status, and it starts in a fraction of the time the full
// CLI takes. Without it the hook is `acyclicfs fsmonitor`.
const HookName = "acyclicfs-fsmonitor"

// fsmonitorCommand is the hook command for the store storeDir: exe's
// small sibling if there is one, else exe itself.
func fsmonitorCommand(exe, storeDir string) string {
	hook := filepath.Join(filepath.Dir(exe), HookName)
	if st, err := os.Stat(hook); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return shellQuote(hook) + " " + shellQuote(filepath.Join(storeDir, SocketName))
	}
	return shellQuote(exe) + " --store " + shellQuote(storeDir) + " fsmonitor"
}

// fsmonitorBlock is the config block that points git at exe's hook for
// the store storeDir.
func fsmonitorBlock(exe, storeDir string) string {
	cmd := fsmonitorCommand(exe, storeDir)
	return fsmBlockBegin + "\n[core]\n\tfsmonitor = " + gitConfigQuote(cmd) + "\n\tuntrackedCache = true\n" + fsmBlockEnd + "\n"
}

// withoutFSMonitorBlock removes the marked block (every copy of it): the
// markers and the two settings it holds. git may have added other keys
// inside it (`git config` appends a key to the last section of its name,
// which is often the block's [core]): those stay, under their [core].
func withoutFSMonitorBlock(cfg []byte) []byte {
	var out, block bytes.Buffer
	in, kept := false, false
	for _, line := range bytes.SplitAfter(cfg, []byte("\n")) {
		t := string(bytes.TrimSpace(line))
		switch {
		case t == fsmBlockBegin:
			in, kept = true, false
			block.Reset()
		case in && t == fsmBlockEnd:
			in = false
			if kept {
				out.Write(block.Bytes())
			}
		case !in:
			out.Write(line)
		case isOwnSetting(t):
		default:
			block.Write(line)
			if t != "[core]" && t != "" {
				kept = true
			}
		}
	}
	if in && kept { // a block git cut short: keep what is not ours
		out.Write(block.Bytes())
	}
	return out.Bytes()
}

// isOwnSetting: a line of the block that sets one of the two keys it
// holds (git keys are case-insensitive).
func isOwnSetting(line string) bool {
	key, _, _ := strings.Cut(line, "=")
	key = strings.ToLower(strings.TrimSpace(key))
	return key == "fsmonitor" || key == "untrackedcache"
}

// configureFSMonitor adds (on) or removes (off) the block in
// root/.git/config, writing only if that changes the file; on, it also
// moves the index's untracked cache to root (fsmonitor_index.go). A root
// without a .git directory is left alone.
func configureFSMonitor(root, exe, storeDir string, on bool) error {
	gitDir := filepath.Join(root, ".git")
	if st, err := os.Lstat(gitDir); err != nil || !st.IsDir() {
		return nil
	}
	path := filepath.Join(gitDir, "config")
	old, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !on {
			return nil
		}
	} else if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if on {
		// Before the config names the hook: a git that starts meanwhile
		// uses neither the hook nor the cache yet.
		if err := retargetUntrackedCache(root); err != nil {
			return err
		}
	}
	next := withoutFSMonitorBlock(old)
	if on {
		if strings.ContainsAny(exe+storeDir, "\n\x00") {
			return fmt.Errorf("fsmonitor: the path of %s or of the store %s has a newline", exe, storeDir)
		}
		if len(next) > 0 && next[len(next)-1] != '\n' {
			next = append(next, '\n')
		}
		next = append(next, fsmonitorBlock(exe, storeDir)...)
	}
	if bytes.Equal(next, old) {
		return nil
	}
	// A new file renamed over the old one, as git writes it: a crash
	// leaves one or the other.
	tmp := path + ".acyclicfs.tmp"
	if err := os.WriteFile(tmp, next, 0o644); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// fsmonitorWarm is the metadata warm-up (names, threads) of a mount whose
// root is a git work tree served by the hook. git status there looks
// nothing up, and the warm-up only competed with it for the daemon and
// the CPUs: on the Go tree (2 cores, loaded; docs/benchmarks.md) the
// first status after a remount was 1.09x native with the warm-up against
// 0.69x without it (00:00 run), and 1.34x against 0.52x in the 03:52 run.
// So the default is none when the work tree's index has an untracked
// cache (git then reads no directory either). Without one — a workspace
// fresh from an import, before any git status wrote the cache — git reads
// every directory, and the warm-up is what makes that fast (the first
// status of a fresh import: 3.46x native with it, 5.69x without, make
// bench of 2026-12-05), so it runs as asked for or by default. A warm-up
// runs with few threads: 2 walkers made the first status 55 ms against
// 120 ms with 16.
func fsmonitorWarm(opt MountOptions, untrackedCache bool) (entries, walkers int) {
	if opt.WarmDefault && untrackedCache {
		return 0, 0
	}
	return opt.WarmEntries, fsmonitorWarmWalkers
}

// fsmonitorWarmWalkers is the thread count of a warm-up asked for in a
// mount the hook serves.
const fsmonitorWarmWalkers = 2
