package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// freshFS makes a new ext4 file system of the given size (truncate's
// syntax: 24G) in a sparse image under $TMPDIR, with a journal and its
// inode tables written out up front (no lazy initialisation running
// during the measurements), mounts it over a loop device and returns the
// mountpoint and a function that unmounts it and deletes the image.
//
// Every system's files then live on a fresh file system of the kind most
// hosts have. The host's own root file system may not be one: on the
// machine these benchmarks were first run on it is ext4 without a
// journal, where inode allocation after deletions, or beside a large
// fresh copy, made native untar vary from 0.4 to 3 s (docs/benchmarks.md).
func freshFS(ctx context.Context, size string) (string, func() error, error) {
	for _, tool := range []string{"mkfs.ext4", "losetup", "mount", "umount", "truncate"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", nil, fmt.Errorf("-fresh-fs needs %s: %w", tool, err)
		}
	}
	base, err := os.MkdirTemp("", "acyclicfs-bench-fs-")
	if err != nil {
		return "", nil, err
	}
	img := filepath.Join(base, "fs.img")
	mp := filepath.Join(base, "mnt")
	remove := func() error { return os.RemoveAll(base) }
	if err := os.Mkdir(mp, 0o755); err != nil {
		remove()
		return "", nil, err
	}
	steps := [][]string{
		{"truncate", "-s", size, img},
		{"mkfs.ext4", "-q", "-F", "-O", "has_journal", "-E", "lazy_itable_init=0,lazy_journal_init=0", img},
	}
	for _, argv := range steps {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			remove()
			return "", nil, fmt.Errorf("-fresh-fs: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
	}
	// Direct I/O on the image: the loop device's writes skip the host's
	// page cache (no second cached copy of everything written, no second
	// writeback competing for the two CPUs).
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", "--direct-io=on", img).CombinedOutput()
	if err != nil {
		remove()
		return "", nil, fmt.Errorf("-fresh-fs: losetup %s: %w: %s", img, err, strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	detach := func() { _ = exec.Command("losetup", "-d", dev).Run() }
	if out, err := exec.CommandContext(ctx, "mount", dev, mp).CombinedOutput(); err != nil {
		detach()
		remove()
		return "", nil, fmt.Errorf("-fresh-fs: mount %s %s: %w: %s", dev, mp, err, strings.TrimSpace(string(out)))
	}
	logf("work directory on a fresh %s ext4 (journaled) at %s", size, mp)
	return mp, func() error {
		if out, err := exec.Command("umount", mp).CombinedOutput(); err != nil {
			// Something still holds it (a leftover mount beneath, say):
			// detach it so the image can go.
			if out2, err2 := exec.Command("umount", "-l", mp).CombinedOutput(); err2 != nil {
				return fmt.Errorf("umount %s: %v: %s; %v: %s", mp, err, out, err2, out2)
			}
		}
		detach()
		return remove()
	}, nil
}
