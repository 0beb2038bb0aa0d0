package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/internal/fusectl"
	"github.com/acyclicfs/acyclicfs/internal/lockfile"
)

// Recovery from a daemon killed while a thread of its own waits on its own
// mount (issue #38).
//
// The daemon makes requests on its own mounts by design: the metadata
// warm-up lists a fresh mount through the kernel (that is what fills the
// kernel's caches), the fsmonitor set-up writes the mount's .git/config,
// the background resolution of a --from-git workspace reads through it. A
// thread whose request the daemon has already read from /dev/fuse waits
// for the answer uninterruptibly, even with SIGKILL pending: killed then
// (kill -9, the OOM killer), the daemon's other threads exit but that one
// never does, so the process never finishes dying. Its file table stays
// open, with it /dev/fuse (the kernel never sees the server go, and every
// process touching the mount hangs) and the daemon lock (the next daemon
// would find the store served). Only aborting the connection through
// fusectl answers the request and lets the process die.
//
// So the daemon lists its mounts' FUSE connections in STORE/daemon.mounts
// (before each mount is made, with the connection number once it is
// known), and ReapDead, run by the CLI whenever no daemon answers and by a
// starting daemon whose lock is held, finds the lock holder dying (every
// thread it has left has SIGKILL pending, or is a zombie) and aborts the
// connections it listed. The aborted mounts then look exactly like those
// of a daemon that died at once (ENOTCONN), and the next mount recovers
// them as usual.

// MountsName is the daemon's list of its mounts' FUSE connections in the
// store directory (JSON, a []ConnRecord), rewritten at every mount and
// unmount.
const MountsName = "daemon.mounts"

// ConnRecord is one mount of the daemon in MountsName.
type ConnRecord struct {
	Workspace  string `json:"workspace"`
	Mountpoint string `json:"mountpoint"`
	// Conn is the FUSE connection number (the mount's device minor), ""
	// while the mount is being made.
	Conn string `json:"conn,omitempty"`
}

// dieGrace is how long a killed daemon may take to finish dying by itself
// before ReapDead aborts its connections.
const dieGrace = 2 * time.Second

// reapWait bounds how long ReapDead waits for a dying daemon to finish
// exiting once its connections are aborted.
const reapWait = 10 * time.Second

// ReapDead frees the store from a daemon that was killed but cannot exit
// (see above): if the daemon lock is held by a process that is dying, it
// aborts the FUSE connections the process listed in MountsName and waits,
// bounded, until the process is gone and the lock free. It returns one
// note per aborted connection, for the user; nothing when no daemon, or a
// live one, holds the lock. The error says what could not be freed.
func ReapDead(storeDir string) ([]string, error) {
	lock := lockfile.New(filepath.Join(storeDir, LockName), os.O_RDONLY)
	ok, err := lock.TryLock(lockfile.Exclusive)
	if err != nil {
		// No daemon ever ran here, or the lock is not ours to take: its
		// holder is not ours to judge either.
		return nil, nil
	}
	if ok {
		_ = lock.Unlock() // nobody serves the store
		return nil, nil
	}
	pid, err := readPID(filepath.Join(storeDir, PIDName))
	if err != nil || !dying(pid) {
		return nil, nil // a live daemon (or one just starting) holds it
	}
	// A killed process may take a moment to finish dying (a thread
	// completing a disk write): give it that before calling it stuck.
	ctx, cancel := context.WithTimeout(context.Background(), dieGrace)
	err = lock.Wait(ctx, lockfile.Exclusive, dieGrace, 20*time.Millisecond)
	cancel()
	if err == nil {
		_ = lock.Unlock()
		return nil, nil
	}
	stuck := stuckIn(pid)
	recs, err := readConns(filepath.Join(storeDir, MountsName))
	if err != nil {
		return nil, fmt.Errorf("the daemon (pid %d) was killed but cannot exit, and its mounts are unknown: %w", pid, err)
	}
	var notes []string
	var errs []error
	for _, r := range recs {
		conn, ok := connAt(r)
		if !ok {
			continue
		}
		if err := fusectl.Abort(conn); err != nil {
			errs = append(errs, fmt.Errorf("abort FUSE connection %s of %s at %s: %w", conn, r.Workspace, r.Mountpoint, err))
			continue
		}
		notes = append(notes, fmt.Sprintf("the daemon (pid %d) was killed but could not exit (threads waiting in the kernel: %s): aborted FUSE connection %s of %s at %s; its changes are recovered at the next mount",
			pid, stuck, conn, r.Workspace, r.Mountpoint))
	}
	if len(errs) > 0 {
		return notes, errors.Join(errs...)
	}
	ctx, cancel = context.WithTimeout(context.Background(), reapWait)
	defer cancel()
	if err := lock.Wait(ctx, lockfile.Exclusive, reapWait, 20*time.Millisecond); err != nil {
		if len(notes) > 0 {
			// Seen once in some fifty stuck daemons on Linux 6.18: the
			// abort ends no request and the threads stay.
			return notes, fmt.Errorf("%w: the daemon (pid %d) was killed and its FUSE connections aborted, but the kernel still holds its threads (in %s) and with them the store's locks: %w",
				ErrStuckDaemon, pid, stuckIn(pid), err)
		}
		return notes, fmt.Errorf("%w: the daemon (pid %d) was killed but has not exited (threads in the kernel: %s): %w", ErrStuckDaemon, pid, stuckIn(pid), err)
	}
	_ = lock.Unlock()
	return notes, nil
}

// connAt returns the FUSE connection of r's mount if its mountpoint still
// shows it: the recorded connection, or, for a mount being made when the
// daemon died, whatever acyclicfs mount is at the mountpoint.
func connAt(r ConnRecord) (string, bool) {
	minor, fstype, found := fusectl.Find(r.Mountpoint)
	if !found || minor == "" || !strings.HasPrefix(fstype, "fuse") {
		return "", false
	}
	if r.Conn != "" {
		return minor, minor == r.Conn
	}
	return minor, fstype == "fuse.acyclicfs"
}

// dying reports whether process pid is being killed: every thread it has
// left is a zombie or has SIGKILL pending. A live daemon has at least one
// thread with neither.
func dying(pid int) bool {
	// The common case, a live daemon, is settled by its main thread.
	if alive, known := threadAlive(fmt.Sprintf("/proc/%d", pid)); known && alive {
		return false
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false // gone, or not ours to see
	}
	seen := false
	for _, task := range tasks {
		alive, known := threadAlive(fmt.Sprintf("/proc/%d/task/%s", pid, task.Name()))
		if alive {
			return false
		}
		seen = seen || known
	}
	return seen
}

// threadAlive reports whether the thread whose /proc directory is dir is
// alive: neither a zombie nor with SIGKILL pending. known is false if the
// thread is gone (or unreadable).
func threadAlive(dir string) (alive, known bool) {
	st, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return false, false // exited meanwhile
	}
	if s := taskState(st); s == 'Z' || s == 'X' {
		return false, true
	}
	return !sigkillPending(st), true
}

// taskState is the state letter of a /proc/PID/task/TID/stat line (it
// follows the parenthesised command name, which may hold anything).
func taskState(stat []byte) byte {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}

// sigkillPending reports whether a /proc/PID/task/TID/stat line shows
// SIGKILL among the thread's pending signals (the kernel adds it to every
// thread of a process being killed): the 31st field, the thread's pending
// set in decimal (its low 31 bits).
func sigkillPending(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(stat[i+1:])) // from the 3rd field, the state
	const signalField = 31 - 3
	if len(f) <= signalField {
		return false
	}
	mask, err := strconv.ParseUint(f[signalField], 10, 64)
	return err == nil && mask&(1<<(unix.SIGKILL-1)) != 0
}

// stuckIn lists the kernel functions pid's remaining threads wait in.
func stuckIn(pid int) string {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []string
	for _, task := range tasks {
		w, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", pid, task.Name()))
		if err == nil {
			out = append(out, string(w))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s holds %q", path, b)
	}
	return pid, nil
}

func readConns(path string) ([]ConnRecord, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []ConnRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return recs, nil
}

// setConn records (conn != nil) or forgets (nil) ws's mount in
// MountsName. The file is replaced whole (write and rename), so a reader
// never sees half of it; it is not synced: it matters only while this
// daemon's process exists, and the kernel keeps it for that long.
func (d *Daemon) setConn(ws string, rec *ConnRecord) {
	d.connMu.Lock()
	defer d.connMu.Unlock()
	if d.conns == nil {
		d.conns = map[string]ConnRecord{}
	}
	if rec != nil {
		d.conns[ws] = *rec
	} else {
		delete(d.conns, ws)
	}
	recs := make([]ConnRecord, 0, len(d.conns))
	for _, r := range d.conns {
		recs = append(recs, r)
	}
	if err := writeConns(filepath.Join(d.dir, MountsName), recs); err != nil {
		d.logger.Printf("%v (a kill -9 while a thread waits on its own mount would then need the mount's FUSE connection aborted by hand)", err)
	}
}

func writeConns(path string, recs []ConnRecord) error {
	b, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
