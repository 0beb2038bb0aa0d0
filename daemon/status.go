package daemon

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Proc is a process holding a lease.
type Proc struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	// CwdInside: its working directory is in the mount; OpenFiles counts
	// its descriptors open on files in the mount.
	CwdInside bool `json:"cwd_inside"`
	OpenFiles int  `json:"open_files"`
	// Mapped counts the files of the mount it maps (mmap).
	Mapped int `json:"mapped,omitempty"`
}

// MountStatus is what status shows of a served mount.
type MountStatus struct {
	Mountpoint    string
	Warmed        int64
	Warming       bool
	Transport     string
	UringRequests int64
	// Capture is the mount's capture trouble (nil: none to show).
	Capture *CaptureStatus
	// Activity is what the mount is busy with (nil: nothing);
	// Capturing, FilesHashed and BytesHashed how far its capture got.
	Activity                 *Activity
	Capturing                bool
	FilesHashed, BytesHashed int64
	// LastOutcome and LastReconcile are the last final close's, when
	// the mount's lock could be had within a moment (else empty).
	LastOutcome   workspace.Outcome
	LastReconcile *ReconcileTiming
	// Owners are the session tracker's owners, by owner.
	Owners map[sessions.Owner]sessions.OwnerInfo
	// Fenced: another node claimed the workspace while this node had lost
	// its claim; the mount is read-only and publishes nothing (fenced.go).
	Fenced *FencedStatus
	// GitRefs is the background resolution of the tree's git object
	// references (gitresolve.go; nil: it had none).
	GitRefs *GitRefStatus
}

// Status is a snapshot of the mount for status. It waits for the mount's
// lock at most lockWait (a final close holds it).
func (s *Mount) Status(lockWait time.Duration) MountStatus {
	st := MountStatus{Mountpoint: s.mp, Capture: s.captureState.Load(), Activity: s.activity.Load(),
		Owners: map[sessions.Owner]sessions.OwnerInfo{}, Fenced: s.fenced.Load()}
	for _, o := range s.tracker.Owners() {
		st.Owners[o.Owner] = o
	}
	st.Warmed, st.Warming = s.mnt.Warmed()
	st.GitRefs = s.gitRefStatus()
	st.Transport, st.UringRequests = s.mnt.Transport(), s.mnt.UringRequests()
	if st.Activity != nil {
		st.Capturing, st.FilesHashed, st.BytesHashed = s.mnt.CaptureProgress()
	}
	if s.acquire(lockWait) {
		st.LastOutcome = s.last.Outcome
		st.LastReconcile = s.timing
		s.release()
	}
	return st
}

// LeaseHolders lists the live processes of the session a lease label
// names ("sid:N", or exec's "exec sid:N"), with their use of the mount.
func (s *Mount) LeaseHolders(label string) []Proc {
	owner := sessions.Owner(strings.TrimPrefix(label, "exec "))
	procs, err := s.tracker.Processes(owner)
	if err != nil {
		return nil
	}
	out := make([]Proc, 0, len(procs))
	for _, p := range procs {
		sp := Proc{PID: p.PID, Command: p.Comm}
		sp.CwdInside, sp.OpenFiles, sp.Mapped = mountUse(p.PID, s.mnt.Dev(), s.mp)
		out = append(out, sp)
	}
	return out
}

// mountUse reports whether process pid's working directory is in the
// mount, how many of its descriptors are open on files in it, and how
// many files of it it maps. It compares device numbers (st_dev of the
// mount's file system), not paths: after a detach the mountpoint's path
// names the directory underneath, and the processes there do not use the
// mount. Nothing it does sends a request to the mount (AT_STATX_DONT_SYNC;
// mappings are compared by the device /proc/PID/maps shows).
func mountUse(pid int, dev uint64, mp string) (cwdInside bool, open, mapped int) {
	in := func(p string) bool {
		if dev == 0 { // identity unknown: by path
			t, err := os.Readlink(p)
			return err == nil && (t == mp || strings.HasPrefix(t, mp+"/"))
		}
		var st unix.Statx_t
		return unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_DONT_SYNC, unix.STATX_BASIC_STATS, &st) == nil &&
			unix.Mkdev(st.Dev_major, st.Dev_minor) == dev
	}
	cwdInside = in(fmt.Sprintf("/proc/%d/cwd", pid))
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if in(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())) {
			open++
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); err == nil {
		seen := map[string]bool{}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 6 || seen[f[4]+" "+f[3]] {
				continue
			}
			var maj, mnr uint32
			if _, err := fmt.Sscanf(f[3], "%x:%x", &maj, &mnr); err != nil {
				continue
			}
			hit := dev != 0 && unix.Mkdev(maj, mnr) == dev
			if dev == 0 {
				p := strings.Join(f[5:], " ")
				hit = p == mp || strings.HasPrefix(p, mp+"/")
			}
			if hit {
				seen[f[4]+" "+f[3]] = true
				mapped++
			}
		}
	}
	return cwdInside, open, mapped
}

// WindowLease is one open lease of a workspace's window, for status.
type WindowLease struct {
	ID, Owner string
	Expires   time.Time
}

// Window is what status shows of a workspace's operation window.
type Window struct {
	Phase         string // idle, active or reconciling
	PendingParent store.ID
	Leases        []WindowLease // by id
}

// InspectWindow reads ws's window (served or not: it reads the store).
func InspectWindow(ctx context.Context, m *workspace.Manager, ws string) (Window, error) {
	snap, err := m.Windows().Inspect(ctx, ws)
	if err != nil {
		return Window{}, err
	}
	w := Window{Phase: string(snap.Phase.Kind), PendingParent: snap.Phase.PendingParent}
	for _, l := range snap.Phase.Leases {
		w.Leases = append(w.Leases, WindowLease{ID: l.ID.String(), Owner: l.Owner, Expires: time.UnixMilli(l.ExpiresAtMillis)})
	}
	sort.Slice(w.Leases, func(i, j int) bool { return w.Leases[i].ID < w.Leases[j].ID })
	return w, nil
}
