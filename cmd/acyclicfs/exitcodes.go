package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/corestate"
	"github.com/acyclicfs/acyclicfs/daemon"
	"github.com/acyclicfs/acyclicfs/fusefs"
	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/internal/gitrepo"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Exit codes (SPEC.md "Exit codes").
const (
	exitOK       = 0
	exitError    = 1 // operational: I/O, corrupt store, daemon unreachable
	exitUsage    = 2 // usage error or invalid input
	exitConflict = 3
	exitBusy     = 4
)

// usageError marks errors in how the command was called.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// errConflictExit makes a command exit 3 after it printed its outcome.
var errConflictExit = errors.New("conflict")

// errSilent1 makes a command exit 1 without another message (fsck).
var errSilent1 = errors.New("problems found")

// exitCode maps an error to the process exit code: the one switch.
func exitCode(err error) int {
	var u usageError
	var ec exitCodeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ec):
		return int(ec)
	case errors.Is(err, errConflictExit), errors.Is(err, workspace.ErrConflict), errors.Is(err, workspace.ErrUnresolved),
		errors.Is(err, workspace.ErrAlreadyBound), errors.Is(err, workspace.ErrNotFastForward),
		errors.Is(err, workspace.ErrRefMoved), errors.Is(err, workspace.ErrBindingMoved):
		return exitConflict
	case errors.As(err, &u),
		errors.Is(err, workspace.ErrInvalidName),
		errors.Is(err, workspace.ErrUnknownWorkspace),
		errors.Is(err, workspace.ErrExists),
		errors.Is(err, workspace.ErrInvalidInput),
		errors.Is(err, workspace.ErrHasChildren),
		errors.Is(err, workspace.ErrNotEmpty),
		errors.Is(err, workspace.ErrNoHistory),
		errors.Is(err, workspace.ErrNoParent),
		errors.Is(err, workspace.ErrNoConflicts),
		errors.Is(err, workspace.ErrNoSuchPath),
		errors.Is(err, workspace.ErrNotAStore),
		errors.Is(err, workspace.ErrUnsafeTarget),
		errors.Is(err, workspace.ErrNotBound),
		errors.Is(err, workspace.ErrBadGitTree),
		errors.Is(err, gitrepo.ErrNotRepo),
		errors.Is(err, gitrepo.ErrNoRef),
		errors.Is(err, gitrepo.ErrUnsupported),
		errors.Is(err, sessions.ErrInvalidHarness),
		errors.Is(err, sessions.ErrNoProcess),
		errors.Is(err, store.ErrInvalidID),
		errors.Is(err, store.ErrAmbiguous),
		errors.Is(err, cluster.ErrBadConfig),
		errors.Is(err, cluster.ErrConfigDiffers):
		return exitUsage
	case errors.Is(err, workspace.ErrBusy),
		errors.Is(err, cluster.ErrClaimed),
		errors.Is(err, store.ErrLocked),
		errors.Is(err, corestate.ErrLockTimeout):
		return exitBusy
	}
	return exitError
}

// hint suggests what to do about err, or "".
func hint(err error) string {
	var ol *daemon.OpenLeasesError
	switch {
	case errors.As(err, &ol):
		return "those leases' processes are in the mount or made a request within --idle-close (sessions that ended were waited for): let them finish or end them, then retry; an explicit lease ends with 'acyclicfs lease end MOUNTPOINT LEASE'"
	case errors.Is(err, cluster.ErrClaimed):
		return "unmount it on that node first ('acyclicfs status' shows which node holds which mount); a node that died or stopped loses its claims when its lease expires (--claim-ttl at init)"
	case errors.Is(err, cluster.ErrUnreachable), errors.Is(err, meta.ErrUnavailable):
		return "check that etcd runs and that the endpoints are right ('etcdctl --endpoints HOST:PORT endpoint health')"
	case errors.Is(err, cluster.ErrAuth):
		return "check the user and its password ($ACYCLICFS_ETCD_PASSWORD or ?password-file=), the client certificate (?cert=, ?key=) and the CA (?ca=) of the --meta URL (docs/scale-out.md \"TLS and authentication\")"
	case errors.Is(err, store.ErrMissing):
		return "the store's keys are gone from etcd: restore them (etcdctl snapshot restore), or run 'acyclicfs init STORE --meta URL' to start a new, empty store there"
	case errors.Is(err, cluster.ErrConfigDiffers):
		return "a store directory is one node of one store: use a new directory for another node or another store"
	case errors.Is(err, workspace.ErrInvalidName):
		return "names are 1-128 bytes of letters, digits, '.', '_' and '-', not starting with '.' or '-'"
	case errors.Is(err, workspace.ErrUnknownWorkspace):
		return "run 'acyclicfs list' to see the workspaces"
	case errors.Is(err, workspace.ErrNotAStore):
		return "--store (or $ACYCLICFS_STORE) names the store's directory: a new or empty one makes a new store"
	case errors.Is(err, workspace.ErrUnsafeTarget):
		return "name a directory of its own (a new one, or one whose contents may go)"
	case errors.Is(err, workspace.ErrNotEmpty):
		return "pass --force to replace the directory's contents"
	case errors.Is(err, workspace.ErrUnresolved):
		return "edit the file, or run 'acyclicfs resolve WS PATH --ours|--theirs|--base'; 'acyclicfs cat WS PATH --conflict ours|theirs|base' shows a side"
	case errors.Is(err, workspace.ErrNotFastForward):
		return "'acyclicfs git pull WS' takes in what the branch received, then publish again"
	case errors.Is(err, workspace.ErrRefMoved), errors.Is(err, workspace.ErrBindingMoved):
		return "someone else moved it meanwhile; 'acyclicfs git show WS' shows where it is, then retry"
	case errors.Is(err, workspace.ErrAlreadyBound):
		return "'acyclicfs git show WS' shows the binding; pass --force to replace it"
	case errors.Is(err, workspace.ErrNotBound):
		return "bind it first: 'acyclicfs git bind WS REPO [--branch B]'"
	case errors.Is(err, workspace.ErrNoConflicts):
		return "'acyclicfs status WS' lists the recorded conflicts"
	case errors.Is(err, workspace.ErrHasChildren):
		return "remove the children first, or pass --recursive"
	case errors.Is(err, store.ErrAmbiguous):
		return "give more characters of the generation id"
	case errors.Is(err, errNotAMount):
		return "mount a workspace there first: 'acyclicfs mount NAME MOUNTPOINT'"
	case errors.Is(err, errDaemonGone):
		return "'acyclicfs mount WORKSPACE' mounts it again and recovers what the dead daemon left; 'acyclicfs unmount MOUNTPOINT' captures it and detaches"
	case errors.Is(err, fusefs.ErrInUse):
		return "leave the directory (cd out) and end those processes, then unmount again; or pass --lazy to detach it now (their later writes are not captured)"
	case errors.Is(err, store.ErrLocked):
		return "another acyclicfs command holds the store; retry, or check 'acyclicfs status'"
	case errors.Is(err, store.ErrCorrupt):
		return "run 'acyclicfs fsck' to list damaged objects"
	case errors.Is(err, syscall.ENOSPC):
		return "free space on the store's disk, then retry; 'acyclicfs gc' removes unreachable objects"
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return "check that the store directory is writable (--store DIR or $ACYCLICFS_STORE)"
	}
	return ""
}

// reportError prints the one-line error and an optional hint.
func reportError(w io.Writer, err error) {
	var ec exitCodeError
	if errors.Is(err, errConflictExit) || errors.Is(err, errSilent1) || errors.As(err, &ec) {
		return
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	fmt.Fprintf(w, "acyclicfs: %s\n", msg)
	if h := hint(err); h != "" {
		fmt.Fprintf(w, "hint: %s\n", h)
	}
}
