package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/acyclicfs/acyclicfs/daemon"
	"github.com/acyclicfs/acyclicfs/fusefs/sessions"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// statusLease is one open lease.
type statusLease struct {
	ID      string `json:"id"`
	Owner   string `json:"owner"`
	Expires string `json:"expires"`
	// IdleMS is how long ago the lease's session last made a request of
	// the mount (to the session sweep's 200 ms), absent when unknown.
	IdleMS *int64 `json:"idle_ms,omitempty"`
	// Processes are the live processes of a session lease (an implicit
	// one, or exec's), with what of the mount each uses.
	Processes []daemon.Proc `json:"processes,omitempty"`
}

// statusRow is one workspace in `status`.
type statusRow struct {
	Workspace  string `json:"workspace"`
	State      string `json:"state"`
	Mountpoint string `json:"mountpoint,omitempty"`
	// Node is the node whose daemon mounts the workspace, on a store on
	// etcd (its claim); absent when no node mounts it.
	Node          string                   `json:"node,omitempty"`
	Window        string                   `json:"window"`
	Leases        []statusLease            `json:"leases,omitempty"`
	PendingParent store.ID                 `json:"pending_parent,omitzero"`
	Behind        bool                     `json:"behind_parent"`
	Conflicts     []workspace.ConflictInfo `json:"conflicts,omitempty"`
	LastOutcome   string                   `json:"last_outcome,omitempty"`
	// LastReconcile: where the mount's last final close spent its time.
	LastReconcile *daemon.ReconcileTiming `json:"last_reconcile,omitempty"`
	// InPlace is the directory of an in-place workspace; Materialized the
	// generation that directory holds (behind the head while a
	// materialization is pending).
	InPlace      string   `json:"in_place,omitempty"`
	Materialized store.ID `json:"materialized,omitzero"`
	// Warmed counts the names the mount's metadata warm-up listed so far;
	// Warming is true while it runs (mount --warm-entries).
	Warmed  int64 `json:"warmed,omitempty"`
	Warming bool  `json:"warming,omitempty"`
	// Transport is how a mounted workspace's requests reach the daemon:
	// io_uring or dev-fuse (mount --transport). UringRequests counts the
	// requests answered over io_uring.
	Transport     string `json:"transport,omitempty"`
	UringRequests int64  `json:"uring_requests,omitempty"`
	// WatchedDirs counts the directories of an in-place workspace's
	// directory that the daemon watches for changes (inotify) while it is
	// mounted; absent when detection lists them instead (not mounted, not
	// reconciled yet, or a file system inotify does not fully report).
	WatchedDirs int `json:"watched_dirs,omitempty"`
	// Capture is a mounted workspace's capture trouble: a capture that
	// failed (its changes kept in the mount, retried) or one a retry
	// stored since (until the next final close).
	Capture *daemon.CaptureStatus `json:"capture,omitempty"`
	// Running is what the mount is busy with now (a final close, a
	// rebase onto its parent, an unmount, a capture retry) and how far
	// its capture got.
	Running *statusRunning `json:"running,omitempty"`
	// Fenced: another node claimed the workspace while this node had
	// lost its claim; this mount is read-only and publishes nothing, and
	// its unpublished changes are the workspace Fenced.Fork.
	Fenced *daemon.FencedStatus `json:"fenced,omitempty"`
	// GitRefs is a mounted git workspace's background resolution of its
	// git object references (files still read from the repository until
	// stored); absent when the tree had none unresolved at mount.
	GitRefs *statusGitRefs `json:"git_refs,omitempty"`
}

// statusGitRefs is the background resolution of a mount's git object
// references: Total found unresolved at mount, Resolved of them so far,
// Remaining = Total-Resolved, Bytes read from the repository; Finished
// (RFC 3339) once all are; Error when it stopped short.
type statusGitRefs struct {
	Total     int64  `json:"total"`
	Resolved  int64  `json:"resolved"`
	Remaining int64  `json:"remaining"`
	Bytes     int64  `json:"bytes"`
	Running   bool   `json:"running"`
	Started   string `json:"started"`
	Finished  string `json:"finished,omitempty"`
	// DurationMS: from Started to Finished.
	DurationMS int64  `json:"duration_ms,omitempty"`
	Error      string `json:"error,omitempty"`
}

// statusRunning is work a mount is doing.
type statusRunning struct {
	What  string `json:"what"`
	Since string `json:"since"`
	// ElapsedMS: since it began. Capturing: its capture stores contents
	// now; FilesHashed and BytesHashed count what the latest capture
	// stored so far.
	ElapsedMS   int64 `json:"elapsed_ms"`
	Capturing   bool  `json:"capturing"`
	FilesHashed int64 `json:"files_hashed"`
	BytesHashed int64 `json:"bytes_hashed"`
}

type statusReport struct {
	// Node and Meta name this node and the store's etcd, on a store on
	// etcd (absent for a local store).
	Node       string      `json:"node,omitempty"`
	Meta       string      `json:"meta,omitempty"`
	Blobs      string      `json:"blobs,omitempty"`
	Workspaces []statusRow `json:"workspaces"`
	Recovery   []string    `json:"recovery"`
	// BaseReads counts the files of in-place directories whose content
	// this process (the daemon, when one runs) has read: lazy reads show
	// as a small number.
	BaseReads int64 `json:"base_reads"`
	// BaseReadPaths are the distinct paths behind BaseReads (first 4096).
	BaseReadPaths []string `json:"base_read_paths"`
}

func (a *app) cmdStatus() *cobra.Command {
	return &cobra.Command{
		Use:   "status [NAME]",
		Short: "Windows, leases, pending parents, recorded conflicts, recovery work",
		Args:  rangeArgs(0, 1, "[NAME]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			var ws []store.Workspace
			if len(args) == 1 {
				w, err := m.Get(args[0])
				if err != nil {
					return fmt.Errorf("status %s: %w", args[0], err)
				}
				ws = []store.Workspace{w}
			} else if ws, err = m.List(); err != nil {
				return fmt.Errorf("status: %w", err)
			}
			rep := statusReport{Workspaces: []statusRow{}, Recovery: []string{}}
			held, self, err := claims(cmd.Context(), m)
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			if n := m.Node(); n != nil {
				rep.Node, rep.Meta, rep.Blobs = self, n.Config().MetaURL(), n.Config().Blobs
			}
			for _, w := range ws {
				row, err := a.statusOf(cmd.Context(), m, w)
				if err != nil {
					return fmt.Errorf("status %s: %w", w.Name, err)
				}
				c, ok := held[w.Name]
				row.State, row.Mountpoint, row.Node = claimedState(row.State, row.Mountpoint, self, c, ok)
				rep.Workspaces = append(rep.Workspaces, row)
			}
			work, err := m.RecoveryWork()
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			rep.Recovery = append(rep.Recovery, work...)
			if a.d != nil {
				rep.Recovery = append(rep.Recovery, a.d.Lost()...)
			}
			rep.BaseReads = m.Store().BaseReads()
			rep.BaseReadPaths = m.Store().BaseReadPaths()
			recs, err := m.MountRecords()
			if err != nil {
				return err
			}
			for _, r := range recs {
				if a.d == nil || !a.d.Serving(r.Workspace) {
					rep.Recovery = append(rep.Recovery, fmt.Sprintf("mount of %s at %s (daemon %d gone): recovered by the next mount or unmount", r.Workspace, r.Mountpoint, r.DaemonPID))
				}
			}
			return a.emit(rep, func(out io.Writer) { printStatus(out, rep) })
		},
	}
}

func (a *app) statusOf(ctx context.Context, m *workspace.Manager, w store.Workspace) (statusRow, error) {
	state, mp := a.workspaceState(m, w)
	row := statusRow{Workspace: w.Name, State: state, Mountpoint: mp}
	var srv *daemon.Mount
	var ms daemon.MountStatus
	if a.d != nil {
		srv = a.d.Get(w.Name)
	}
	if srv != nil {
		ms = srv.Status(100 * time.Millisecond)
	}
	win, err := daemon.InspectWindow(ctx, m, w.Name)
	if err != nil {
		row.Window = "unreadable: " + err.Error()
	} else {
		row.Window = win.Phase
		row.PendingParent = win.PendingParent
		for _, l := range win.Leases {
			sl := statusLease{ID: l.ID, Owner: l.Owner, Expires: l.Expires.UTC().Format(time.RFC3339)}
			if srv != nil {
				sl.Processes = srv.LeaseHolders(l.Owner)
				if o, ok := ms.Owners[sessions.Owner(strings.TrimPrefix(l.Owner, "exec "))]; ok && !o.LastRequest.IsZero() {
					idle := max(time.Since(o.LastRequest).Milliseconds(), 0)
					sl.IdleMS = &idle
				}
			}
			row.Leases = append(row.Leases, sl)
		}
	}
	if w.Parent != "" {
		if p, err := m.Store().GetWorkspace(w.Parent); err == nil {
			row.Behind = p.Head != w.Base
		}
	}
	cs, err := m.Conflicts(w.Name)
	if err != nil {
		return row, err
	}
	row.Conflicts = cs
	if info, ok, err := m.InPlace(w.Name); err == nil && ok {
		row.InPlace, row.Materialized = info.Dir, info.Materialized
		if a.d != nil {
			row.WatchedDirs, _ = m.Store().BaseWatching(info.Base)
		}
	}
	if srv != nil {
		row.Warmed, row.Warming = ms.Warmed, ms.Warming
		row.Transport, row.UringRequests = ms.Transport, ms.UringRequests
		row.Capture = ms.Capture
		row.Fenced = ms.Fenced
		if g := ms.GitRefs; g != nil {
			row.GitRefs = &statusGitRefs{Total: g.Total, Resolved: g.Resolved, Remaining: g.Total - g.Resolved, Bytes: g.Bytes,
				Running: g.Running, Started: g.Started.UTC().Format(time.RFC3339Nano), Error: g.Error}
			if !g.Finished.IsZero() {
				row.GitRefs.Finished = g.Finished.UTC().Format(time.RFC3339Nano)
				row.GitRefs.DurationMS = g.Finished.Sub(g.Started).Milliseconds()
			}
		}
		if act := ms.Activity; act != nil {
			row.Running = &statusRunning{What: act.What, Since: act.Since.UTC().Format(time.RFC3339),
				ElapsedMS: time.Since(act.Since).Milliseconds(), Capturing: ms.Capturing,
				FilesHashed: ms.FilesHashed, BytesHashed: ms.BytesHashed}
		}
		row.LastOutcome = string(ms.LastOutcome)
		row.LastReconcile = ms.LastReconcile
	}
	return row, nil
}

func printStatus(out io.Writer, rep statusReport) {
	if rep.Node != "" {
		blobs := ""
		if rep.Blobs != "" {
			blobs = ", blobs in " + rep.Blobs
		}
		fmt.Fprintf(out, "node %s of %s%s\n", rep.Node, rep.Meta, blobs)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKSPACE\tSTATE\tWINDOW\tLEASES\tPENDING-PARENT\tBEHIND\tCONFLICTS")
	for _, r := range rep.Workspaces {
		behind := "no"
		if r.Behind {
			behind = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\n", r.Workspace, r.State, r.Window, len(r.Leases), short(r.PendingParent), behind, len(r.Conflicts))
	}
	tw.Flush()
	for _, r := range rep.Workspaces {
		for _, l := range r.Leases {
			held := ""
			for i, p := range l.Processes {
				sep := ", "
				if i == 0 {
					sep = " held by "
				}
				var use []string
				if p.CwdInside {
					use = append(use, "cwd inside")
				}
				if p.OpenFiles > 0 {
					use = append(use, fmt.Sprintf("%d open", p.OpenFiles))
				}
				if p.Mapped > 0 {
					use = append(use, fmt.Sprintf("%d mapped", p.Mapped))
				}
				held += fmt.Sprintf("%spid %d %s", sep, p.PID, p.Command)
				if len(use) > 0 {
					held += " (" + strings.Join(use, ", ") + ")"
				}
			}
			idle := ""
			if l.IdleMS != nil {
				idle = " idle " + (time.Duration(*l.IdleMS) * time.Millisecond).Round(100*time.Millisecond).String()
			}
			fmt.Fprintf(out, "lease %s %s owner %s expires %s%s%s\n", r.Workspace, l.ID, l.Owner, l.Expires, idle, held)
		}
		for _, c := range r.Conflicts {
			fmt.Fprintf(out, "conflict %s %s (%s)\n", r.Workspace, quotePath(c.Path), c.Kind)
		}
		if r.Node != "" {
			fmt.Fprintf(out, "claim %s %s on node %s\n", r.Workspace, r.Mountpoint, r.Node)
		}
		if r.Mountpoint != "" && r.Transport != "" {
			// Mounted by the running daemon: how it is served.
			names := "names"
			if r.Warmed == 1 {
				names = "name"
			}
			warm := ""
			switch {
			case r.Warming:
				warm = fmt.Sprintf(", warm-up running (%d %s listed)", r.Warmed, names)
			case r.Warmed > 0:
				warm = fmt.Sprintf(", warm-up done (%d %s listed)", r.Warmed, names)
			}
			fmt.Fprintf(out, "mount %s %s over %s%s\n", r.Workspace, r.Mountpoint, r.Transport, warm)
		}
		if g := r.GitRefs; g != nil {
			switch {
			case g.Error != "":
				fmt.Fprintf(out, "git-refs %s: %d of %d files stored, %d still read from the repository: stopped: %s\n", r.Workspace, g.Resolved, g.Total, g.Remaining, g.Error)
			case g.Running:
				fmt.Fprintf(out, "git-refs %s: storing files in the background: %d of %d stored (%s), %d still read from the repository\n", r.Workspace, g.Resolved, g.Total, daemon.HumanBytes(g.Bytes), g.Remaining)
			case g.Finished != "":
				fmt.Fprintf(out, "git-refs %s: all %d files stored (%s) at %s, in %v\n", r.Workspace, g.Total, daemon.HumanBytes(g.Bytes), g.Finished, time.Duration(g.DurationMS)*time.Millisecond)
			default:
				fmt.Fprintf(out, "git-refs %s: %d of %d files stored, %d still read from the repository (stopped; the next mount goes on)\n", r.Workspace, g.Resolved, g.Total, g.Remaining)
			}
		}
		if r.Running != nil {
			progress := ""
			if r.Running.Capturing || r.Running.FilesHashed > 0 {
				progress = fmt.Sprintf(", capture stored %d files, %s", r.Running.FilesHashed, daemon.HumanBytes(r.Running.BytesHashed))
			}
			fmt.Fprintf(out, "running %s %s since %s (%v)%s\n", r.Workspace, r.Running.What, r.Running.Since,
				time.Duration(r.Running.ElapsedMS)*time.Millisecond, progress)
		}
		if f := r.Fenced; f != nil {
			kept := "it had no unpublished changes"
			if f.Fork != "" {
				kept = "its unpublished changes are workspace " + f.Fork
			}
			fmt.Fprintf(out, "fenced %s %s: node %s claimed %s (at %s) while this node had lost its claim; the mount is read-only and publishes nothing; %s\n",
				r.Workspace, r.Mountpoint, f.Node, r.Workspace, f.Mountpoint, kept)
		}
		if c := r.Capture; c != nil {
			switch c.State {
			case "failed":
				why := c.Error
				if c.NoSpace {
					why = fmt.Sprintf("no space left on the store's disk: %s has %s free, the capture needs up to %s", c.Store, daemon.HumanBytes(c.FreeBytes), daemon.HumanBytes(c.NeededBytes))
				}
				fmt.Fprintf(out, "capture %s failed since %s (%d attempts): %s; the mount keeps its changes and retries when space returns, at the next lease end and at unmount\n",
					r.Workspace, c.Since, c.Attempts, why)
			default:
				fmt.Fprintf(out, "capture %s stored at %s after %d failed attempts\n", r.Workspace, c.Since, c.Attempts)
			}
		}
		if r.InPlace != "" {
			watched := ""
			if r.WatchedDirs > 0 {
				watched = fmt.Sprintf(", %d directories watched", r.WatchedDirs)
			}
			fmt.Fprintf(out, "in-place %s %s (holds %s%s)\n", r.Workspace, r.InPlace, short(r.Materialized), watched)
		}
	}
	for _, w := range rep.Recovery {
		fmt.Fprintf(out, "recovery: %s\n", w)
	}
}
