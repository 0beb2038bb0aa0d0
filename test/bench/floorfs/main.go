// Command floorfs is the benchmark harness's floor: the cheapest FUSE
// server that is still correct for the harness's workloads. Every file and
// directory lives in memory (the tree given by -from is copied in at
// start); nothing is persisted, hashed or captured; requests are answered
// and nothing else. It mounts with the kernel options acyclicfs uses
// (fusefs/mount.go: 1 h entry, attribute and negative timeouts, READDIRPLUS,
// 1 MiB writes and read-ahead, no xattrs, symlink caching, and for a mount
// only root reaches no default_permissions and handle_killpriv_v2) and over
// the same transports, io_uring or /dev/fuse, through fusefs.MountRaw. What
// it does differently: passthrough, for a file open for writing (and every
// later open of it), is on an in-memory file (memfd) where acyclicfs has an
// upper file on disk (beyond 8,192 such files the content goes back into
// memory at the last release); other reads are answered from memory. What it does not do:
// byte-range locks (the kernel keeps them locally) and FLUSH (ENOSYS once,
// then the kernel stops asking, as acyclicfs's handles answer). Listings
// are served without OPENDIR and cached by the kernel, through the same
// wrapper acyclicfs uses (fusefs.WithoutOpendir).
//
//	floorfs [-from DIR] [-transport auto|io_uring|dev-fuse] [-passthrough=false] [-no-open] [-persist DIR] [-debug] MOUNTPOINT
//
// -no-open answers OPEN with ENOSYS, the kernel's no_open mode: no OPEN or
// RELEASE per open from then on (for created files neither: their memfds
// are kept), every open of an existing file a cached one with handle 0;
// -passthrough=false serves writers through the daemon too. The harness
// measures the two as floor-noopen and floor-nopt (issue #30).
//
// -persist DIR puts that content in a new file in DIR per file (created
// at the first passthrough open, deleted with the memfd it replaces):
// what a server that persists every created file as a real file, as
// acyclicfs does its upper files, pays at least; nothing is synced or
// recovered.
//
// It serves in the foreground until the mount is unmounted. -debug logs
// every request in go-fuse's format ("rx N: OPCODE"), which the harness's
// request census counts as it does loopback's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/acyclicfs/acyclicfs/fusefs"
)

// passthrough is the -passthrough flag.
var passthrough = func() *bool { b := true; return &b }()

// noOpen is the -no-open flag: OPEN is answered with ENOSYS, the kernel's
// no_open mode.
var noOpen = new(bool)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "floorfs:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("floorfs", flag.ContinueOnError)
	from := fl.String("from", "", "directory whose tree the mount starts with (copied into memory)")
	transport := fl.String("transport", "auto", "auto (io_uring where the kernel offers it), io_uring or dev-fuse")
	debug := fl.Bool("debug", false, "log every request (go-fuse debug format)")
	fl.BoolVar(passthrough, "passthrough", true, "serve writers by kernel passthrough on an in-memory file (memfd), as acyclicfs serves dirty files")
	fl.BoolVar(noOpen, "no-open", false, "answer OPEN with ENOSYS (the kernel's no_open: no OPEN or RELEASE per open; every open of an existing file is served from the page cache with handle 0, reads and writes through the daemon; created files keep passthrough, up to 8,192 memfds, and are never released)")
	fl.StringVar(&persistDir, "persist", "", "keep passthrough content in a new real file per file in this directory instead of a memfd (deleted with it): the floor of a server whose created files are files on disk")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 1 {
		return errors.New("usage: floorfs [-from DIR] [-transport auto|io_uring|dev-fuse] [-debug] MOUNTPOINT")
	}
	m, err := mount(fl.Arg(0), *from, *transport, *debug)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "floorfs: serving %s over %s\n", fl.Arg(0), m.Transport())
	m.Wait()
	return nil
}

// mount builds the in-memory tree and mounts it at mp.
func mount(mp, from, transport string, debug bool) (*fusefs.RawMount, error) {
	var uring bool
	switch transport {
	case "auto":
		uring = fusefs.UringAvailable() == nil
	case "io_uring":
		uring = true
	case "dev-fuse":
	default:
		return nil, fmt.Errorf("unknown -transport %q (auto, io_uring or dev-fuse)", transport)
	}
	root := newNode(0o40755, uint32(os.Geteuid()), uint32(os.Getegid()))
	hour := time.Hour
	opts := &gofs.Options{
		EntryTimeout:    &hour,
		AttrTimeout:     &hour,
		NegativeTimeout: &hour,
		NullPermissions: true,
		MountOptions:    mountOptions(debug),
	}
	// Listings as acyclicfs serves them: no OPENDIR, cached by the kernel.
	raw := fusefs.WithoutOpendir(gofs.NewNodeFS(root, opts))
	if from != "" {
		if err := load(context.Background(), root, from); err != nil {
			return nil, fmt.Errorf("load %s: %w", from, err)
		}
	}
	return fusefs.MountRaw(raw, mp, &opts.MountOptions, uring)
}

// mountOptions are acyclicfs's (fusefs/mount.go) for a mount only its
// owner reaches, less locks (served by the kernel here) and passthrough.
func mountOptions(debug bool) fuse.MountOptions {
	o := fuse.MountOptions{
		Debug:                debug,
		FsName:               "floorfs",
		Name:                 "floorfs",
		DirectMount:          true,
		MaxWrite:             1 << 20,
		MaxReadAhead:         1 << 20,
		DisableXAttrs:        true,
		EnableSymlinkCaching: true,
	}
	if os.Geteuid() == 0 {
		o.ExtraCapabilities = fuse.CAP_HANDLE_KILLPRIV_V2
	} else {
		o.Options = []string{"default_permissions"}
	}
	return o
}
