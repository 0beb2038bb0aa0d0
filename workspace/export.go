package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/internal/osfile"
	"github.com/acyclicfs/acyclicfs/store"
)

// Export materializes a generation into a real directory under a journal
// (corestate family "export"), so that a crash at any step is rolled back
// or forward by the next command:
//
//   - The tree is first written into a staging directory: a sibling of a
//     target that does not exist yet, or DIR/.acyclicfs-export-OP when DIR
//     exists (same filesystem, so every later step is a rename).
//   - Phase "prepared": staging complete and synced. Before it, recovery
//     deletes the staging directory (roll back; the target is untouched).
//   - Phase "moving-pre": each existing entry of DIR is renamed into the
//     staging "pre" directory (the preimages) — only with --force.
//   - Phase "placing-new": each new entry is renamed into DIR.
//   - Done: the journal and staging (with the preimages) are removed.
//
// Recovery from "prepared" or later rolls forward: the new tree is complete,
// and the preimages are kept until it is in place.
const familyExport = "export"

type exportJournal struct {
	Op       string   `json:"op"`
	Target   string   `json:"target"`
	Gen      store.ID `json:"gen"`
	Phase    string   `json:"phase"` // staging, prepared, moving-pre, placing-new
	Staging  string   `json:"staging"`
	InTarget bool     `json:"in_target"` // staging lives inside the existing target
	PreNames []string `json:"pre_names,omitempty"`
	NewNames []string `json:"new_names,omitempty"`
}

const stagingPrefix = ".acyclicfs-export-"

// Export writes generation gen into dir and returns the number of files
// (non-directories) written. A non-empty dir is refused unless force, in
// which case dir ends up holding exactly the tree. A cancelled ctx stops
// the export between files: the staging directory is removed and dir is as
// it was.
func (m *Manager) Export(ctx context.Context, gen store.ID, dir string, force bool) (int, error) {
	target, err := filepath.Abs(dir)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrInvalidInput, dir, err)
	}
	root, err := m.rootOf(gen)
	if err != nil {
		return 0, err
	}
	j := exportJournal{Op: newOperationID(), Target: target, Gen: gen, Phase: "staging"}
	li, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		parent := filepath.Dir(target)
		if pi, err := os.Stat(parent); err != nil || !pi.IsDir() {
			return 0, fmt.Errorf("%w: parent directory %s does not exist", ErrInvalidInput, parent)
		}
		j.Staging = filepath.Join(parent, "."+filepath.Base(target)+stagingPrefix+j.Op)
	case err != nil:
		return 0, fmt.Errorf("export target %s: %w", target, err)
	case li.Mode()&fs.ModeSymlink != 0:
		return 0, fmt.Errorf("%w: export target %s is a symlink; refusing to write through it", ErrInvalidInput, target)
	case !li.IsDir():
		return 0, fmt.Errorf("%w: export target %s exists and is not a directory", ErrInvalidInput, target)
	default:
		names, err := dirNames(target)
		if err != nil {
			return 0, err
		}
		if len(names) > 0 && !force {
			return 0, fmt.Errorf("%w: %s has %d entries; use --force to replace them", ErrNotEmpty, target, len(names))
		}
		j.InTarget = true
		j.Staging = filepath.Join(target, stagingPrefix+j.Op)
		j.PreNames = names
	}
	if err := m.saveExport(&j); err != nil {
		return 0, err
	}
	newDir := j.Staging
	if j.InTarget {
		newDir = filepath.Join(j.Staging, "new")
	}
	if err := os.MkdirAll(newDir, 0o755); err != nil {
		return 0, m.abortExport(&j, fmt.Errorf("create staging %s: %w", newDir, err))
	}
	total := -1 // unknown: the tree is not walked twice
	count, err := m.materialize(ctx, root, newDir, target, func(done int) { m.opt.Progress("export", done, total) })
	if err != nil {
		return 0, m.abortExport(&j, err)
	}
	links, err := m.linksOf(gen)
	if err != nil {
		return 0, m.abortExport(&j, err)
	}
	if err := relink(newDir, target, links); err != nil {
		return 0, m.abortExport(&j, err)
	}
	if err := syncFS(newDir); err != nil {
		return 0, m.abortExport(&j, err)
	}
	if j.InTarget {
		if j.NewNames, err = dirNames(newDir); err != nil {
			return 0, m.abortExport(&j, err)
		}
	}
	failpoint.Hit("export.before-prepared")
	j.Phase = "prepared"
	if err := m.saveExport(&j); err != nil {
		return 0, err
	}
	failpoint.Hit("export.after-prepared")
	if err := m.finishExport(&j); err != nil {
		return 0, err
	}
	return count, nil
}

// relink makes each link group's paths below dir one file again: every
// path after the first written one is replaced by a hard link to it
// (link(2), which links a symlink itself). A path the export left out (a
// device node without CAP_MKNOD) stays out. shown is dir's path for
// messages.
func relink(dir, shown string, groups [][]string) error {
	for _, g := range groups {
		var first, firstRel string
		for _, p := range g {
			at := filepath.Join(dir, filepath.FromSlash(p))
			if _, err := os.Lstat(at); errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				return fmt.Errorf("export %s: %w", filepath.Join(shown, p), err)
			}
			if first == "" {
				first, firstRel = at, p
				continue
			}
			tmp := at + stagingPrefix + "link"
			if err := os.Link(first, tmp); err != nil {
				return fmt.Errorf("export %s: link to %s: %w", filepath.Join(shown, p), firstRel, err)
			}
			if err := os.Rename(tmp, at); err != nil {
				_ = os.Remove(tmp)
				return fmt.Errorf("export %s: %w", filepath.Join(shown, p), err)
			}
		}
	}
	return nil
}

func (m *Manager) saveExport(j *exportJournal) error {
	var cur exportJournal
	rev, _, err := m.cs.Load(familyExport, j.Op, &cur)
	if err != nil {
		return err
	}
	if _, err := m.cs.CompareAndSwap(familyExport, j.Op, rev, j); err != nil {
		return fmt.Errorf("export journal: %w", err)
	}
	return nil
}

func (m *Manager) dropExport(op string) error {
	var cur exportJournal
	rev, found, err := m.cs.Load(familyExport, op, &cur)
	if err != nil || !found {
		return err
	}
	return m.cs.CompareAndDelete(familyExport, op, rev)
}

// abortExport rolls back an export that never reached "prepared".
func (m *Manager) abortExport(j *exportJournal, cause error) error {
	if err := os.RemoveAll(j.Staging); err != nil {
		return fmt.Errorf("%w (and removing staging %s failed: %v)", cause, j.Staging, err)
	}
	if err := m.dropExport(j.Op); err != nil {
		return fmt.Errorf("%w (and dropping its journal failed: %v)", cause, err)
	}
	return cause
}

// finishExport rolls a prepared export forward; it is idempotent so that
// recovery can run it from any later phase.
func (m *Manager) finishExport(j *exportJournal) error {
	if !j.InTarget {
		if _, err := os.Lstat(j.Staging); err == nil {
			if err := os.Rename(j.Staging, j.Target); err != nil {
				return fmt.Errorf("place export at %s: %w", j.Target, err)
			}
		}
		if err := osfile.Sync(filepath.Dir(j.Target)); err != nil {
			return err
		}
		return m.dropExport(j.Op)
	}
	pre := filepath.Join(j.Staging, "pre")
	newDir := filepath.Join(j.Staging, "new")
	if j.Phase == "prepared" {
		j.Phase = "moving-pre"
		if err := m.saveExport(j); err != nil {
			return err
		}
	}
	if j.Phase == "moving-pre" {
		if err := os.MkdirAll(pre, 0o700); err != nil {
			return fmt.Errorf("export preimages: %w", err)
		}
		for i, name := range j.PreNames {
			src := filepath.Join(j.Target, name)
			if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
				continue // already moved
			}
			if err := os.Rename(src, filepath.Join(pre, name)); err != nil {
				return fmt.Errorf("move preimage %s: %w", src, err)
			}
			if i == 0 {
				failpoint.Hit("export.moving-pre")
			}
		}
		if err := osfile.Sync(j.Target); err != nil {
			return err
		}
		j.Phase = "placing-new"
		if err := m.saveExport(j); err != nil {
			return err
		}
	}
	for i, name := range j.NewNames {
		src := filepath.Join(newDir, name)
		if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
			continue // already placed
		}
		if err := os.Rename(src, filepath.Join(j.Target, name)); err != nil {
			return fmt.Errorf("place %s: %w", name, err)
		}
		if i == 0 {
			failpoint.Hit("export.placing-new")
		}
	}
	if err := osfile.Sync(j.Target); err != nil {
		return err
	}
	if err := os.RemoveAll(j.Staging); err != nil {
		return fmt.Errorf("remove export staging %s: %w", j.Staging, err)
	}
	return m.dropExport(j.Op)
}

// recoverExports finishes or rolls back every journaled export.
func (m *Manager) recoverExports() ([]string, error) {
	ops, err := m.cs.Keys(familyExport)
	if err != nil {
		return nil, err
	}
	var done []string
	for _, op := range ops {
		var j exportJournal
		_, found, err := m.cs.Load(familyExport, op, &j)
		if err != nil {
			return done, err
		}
		if !found {
			continue
		}
		if j.Phase == "staging" {
			if err := os.RemoveAll(j.Staging); err != nil {
				return done, fmt.Errorf("roll back export to %s: %w", j.Target, err)
			}
			if err := m.dropExport(op); err != nil {
				return done, err
			}
			done = append(done, "export to "+j.Target+": rolled back")
			continue
		}
		if err := m.finishExport(&j); err != nil {
			return done, fmt.Errorf("roll forward export to %s: %w", j.Target, err)
		}
		done = append(done, "export to "+j.Target+": rolled forward")
	}
	return done, nil
}

// PendingExports lists exports with journals (for status).
func (m *Manager) PendingExports() ([]string, error) {
	ops, err := m.cs.Keys(familyExport)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, op := range ops {
		var j exportJournal
		if _, found, err := m.cs.Load(familyExport, op, &j); err == nil && found {
			out = append(out, fmt.Sprintf("export %s to %s (phase %s)", j.Gen.Short(), j.Target, j.Phase))
		}
	}
	return out, nil
}

// materialize writes tree root into the existing, empty directory dir;
// messages name paths under shown (the export's target, where dir is its
// staging directory). Entries are created with O_EXCL|O_NOFOLLOW: nothing
// is written through a symlink, not even one this export created. Every
// call is relative to its directory's descriptor, so a tree deeper than
// PATH_MAX exports too.
func (m *Manager) materialize(ctx context.Context, root store.ID, dir, shown string, progress func(done int)) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("export %s: %w", dir, err)
	}
	defer unix.Close(fd)
	count := 0
	err = m.materializeAt(ctx, root, fd, shown, &count, progress)
	return count, err
}

// materializeAt writes tree root into the directory open as dfd; dir is
// its path, for messages.
func (m *Manager) materializeAt(ctx context.Context, root store.ID, dfd int, dir string, count *int, progress func(done int)) error {
	t, err := m.st.GetTree(root)
	if err != nil {
		return fmt.Errorf("tree %s: %w", root.Short(), err)
	}
	for _, e := range t.Entries {
		p := filepath.Join(dir, e.Name)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("export %s: %w", p, err)
		}
		switch e.Kind {
		case store.KindDir:
			// Private while it is filled (a 0500 directory could not be),
			// then its recorded mode.
			if err := unix.Mkdirat(dfd, e.Name, 0o700); err != nil {
				return fmt.Errorf("export %s: %w", p, err)
			}
			sub, err := unix.Openat(dfd, e.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("export %s: %w", p, err)
			}
			err = m.materializeAt(ctx, e.ID, sub, p, count, progress)
			if err == nil {
				if err = unix.Fchmod(sub, e.Perm()); err != nil {
					err = fmt.Errorf("export %s: %w", p, err)
				}
			}
			unix.Close(sub)
			if err != nil {
				return err
			}
			continue
		case store.KindSymlink:
			target, err := m.st.ReadBlob(e.ID)
			if err != nil {
				return fmt.Errorf("export %s: %w", p, err)
			}
			if err := unix.Symlinkat(string(target), dfd, e.Name); err != nil {
				return fmt.Errorf("export %s: %w", p, err)
			}
		case store.KindFIFO, store.KindSocket, store.KindCharDev, store.KindBlockDev:
			made, err := m.mknodAt(dfd, e.Name, p, e)
			if err != nil {
				return err
			}
			if !made {
				continue
			}
		default:
			if err := m.writeFileAt(dfd, e.Name, p, e); err != nil {
				return err
			}
		}
		ts := []unix.Timespec{unix.NsecToTimespec(e.Mtime), unix.NsecToTimespec(e.Mtime)}
		_ = unix.UtimesNanoAt(dfd, e.Name, ts, unix.AT_SYMLINK_NOFOLLOW)
		*count++
		progress(*count)
	}
	return nil
}

// mknodAt recreates the special file e as name in the directory open as
// dfd (p is its path, for messages): a FIFO, a socket node (a name only:
// nothing listens on it until a server binds there anew) or a device
// node. A device the caller may not create (no CAP_MKNOD) is skipped with
// a warning and made is false; everything else is written or an error.
func (m *Manager) mknodAt(dfd int, name, p string, e store.Entry) (made bool, err error) {
	perm := e.Perm()
	if err := unix.Mknodat(dfd, name, store.SpecialMode(e.Kind)|perm&0o777, int(e.Rdev())); err != nil {
		if e.Kind.IsDevice() && errors.Is(err, unix.EPERM) {
			m.opt.Warn(fmt.Sprintf("skipped %s %s: creating a device node needs CAP_MKNOD", e.Kind, p))
			return false, nil
		}
		return false, fmt.Errorf("export %s: %w", p, err)
	}
	if err := unix.Fchmodat(dfd, name, perm, 0); err != nil { // umask may have narrowed it
		return false, fmt.Errorf("export %s: %w", p, err)
	}
	return true, nil
}

// writeFileAt writes e's content as name in the directory open as dfd (p
// is its path, for messages).
func (m *Manager) writeFileAt(dfd int, name, p string, e store.Entry) error {
	// Created private (a 0600 file is never readable by others, not even
	// while it is written), then given its recorded mode — set-uid,
	// set-gid and sticky included; umask does not apply to fchmod.
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("export %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	_, err = m.st.CopyBlob(e.ID, f) // keeps a sparse blob's holes
	if err == nil {
		err = unix.Fchmod(int(f.Fd()), e.Perm())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("export %s: %w", p, err)
	}
	return nil
}

func dirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	sort.Strings(names)
	return names, nil
}

// syncFS flushes the whole filesystem holding dir: one syncfs instead of an
// fsync per exported file.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
