package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// A node fenced out of a workspace (docs/scale-out.md "Failure model").
//
// A node that was stopped or cut off from etcd past its claim TTL may
// find, when it runs again, that another node claimed a workspace it
// still serves (and its lease gates gone with its session, so that every
// head append it tries is fenced). What it had not published must not
// reach the workspace (the other node's view is the last published head
// and moves on from there), and must not be lost either. So the node:
//
//   - publishes nothing to the workspace: before any publish of a mount's
//     capture, and before a recovery publishes a dead mount's overlay,
//     it checks that it holds the workspace's claim (claiming it again
//     if nobody does);
//   - stores the unpublished changes as a new workspace, WS.fenced-NODE-N,
//     forked from the generation the mount's view was pinned to, which
//     `list` and `status` show and `land` lands like any fork;
//   - makes the mount read-only (every change fails with EROFS) and stops
//     following the workspace: no lease, window or reconcile of WS is
//     touched by this mount again; `unmount` detaches it.
//
// The claim check is a read before the publish; the head append itself
// compares the claim inside its etcd Txn (cluster.Node.HeadGuard), so a
// node that pauses past its TTL between the two publishes nothing: the
// append is store.ErrFenced, and the next capture's check fences the
// mount. A recovery also looks through the claim's history since the
// revision its mount record kept (cluster.Claims.MovedSince).

// errFencedOut: the mount's node lost the workspace's claim to another
// node; its changes went to a fork (Mount.fencedAs) and nothing was
// published to the workspace.
var errFencedOut = errors.New("fenced out: another node holds the workspace's claim")

// claimLost reports whether another node holds ws's claim. A claim held
// by nobody (this node's lease expired and nobody took it) is taken again
// on this node's session. On a local store it is always false.
func (d *Daemon) claimLost(ws, mp string) (cluster.Claim, bool, error) {
	if d.claims == nil {
		return cluster.Claim{}, false, nil
	}
	err := d.claims.Claim(context.Background(), ws, mp)
	var held *cluster.ClaimedError
	switch {
	case err == nil:
		return cluster.Claim{}, false, nil
	case errors.As(err, &held):
		return held.Held, true, nil
	default:
		return cluster.Claim{}, false, fmt.Errorf("check the claim on %s before publishing: %w", ws, err)
	}
}

// claimRev is the revision of this node's claim of ws, for its mount
// record (0 on a local store).
func (d *Daemon) claimRev(ws string) int64 {
	if d.claims == nil {
		return 0
	}
	return d.claims.Rev(ws)
}

// fencedName is the first free name WS.fenced-NODE-N (N from 1).
func (d *Daemon) fencedName(ws string) (string, error) {
	node := "local"
	if n := d.m.Node(); n != nil {
		node = n.Name()
	}
	for i := 1; i < 1000; i++ {
		name := fmt.Sprintf("%s.fenced-%s-%d", ws, node, i)
		if len(name) > store.MaxWorkspaceName {
			name = fmt.Sprintf("fenced-%s-%d-%d", node, time.Now().Unix(), i)
		}
		if _, err := d.m.Get(name); errors.Is(err, workspace.ErrUnknownWorkspace) {
			return name, nil
		} else if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("no free name for the fenced changes of %s", ws)
}

// keepFenced stores a capture of ws made on pinned as a new fork of ws at
// pinned, and returns its name.
func (d *Daemon) keepFenced(ws string, pinned, root store.ID, links [][]string, trees ...*store.Tree) (string, error) {
	name, err := d.fencedName(ws)
	if err != nil {
		return "", err
	}
	if _, err := d.m.Fork(ws, name, pinned.String()); err != nil {
		return "", fmt.Errorf("keep the fenced changes of %s: %w", ws, err)
	}
	if _, _, err := d.m.PublishCapture(name, pinned, root, links, nil, trees...); err != nil {
		return name, fmt.Errorf("keep the fenced changes of %s in %s: %w", ws, name, err)
	}
	return name, nil
}

// fenceOut is a mount's answer to finding its workspace claimed by
// another node: read-only from now on, its unpublished changes kept in a
// fork (none: no fork). Called with s.lock held; once.
func (s *Mount) fenceOut(other cluster.Claim) error {
	if s.fenced.Load() != nil {
		return errFencedOut
	}
	s.setFencedReadOnly()
	release := s.d.m.HoldGC()
	defer release()
	s.takeWriters()
	root, links, changed, trees, done, err := s.view.CaptureDeferredLinks()
	if err != nil {
		return fmt.Errorf("capture %s after losing its claim to node %s: %w", s.ws, other.Node, err)
	}
	return s.fenceOutWith(other, root, links, changed, trees, done)
}

// setFencedReadOnly makes the mount read-only (every change EROFS).
func (s *Mount) setFencedReadOnly() {
	if !s.readOnly.Swap(true) && s.mnt != nil {
		s.mnt.SetReadOnly(true)
	}
}

// fenceOutWith is fenceOut with the capture made already. Called with
// s.lock held and the GC held.
func (s *Mount) fenceOutWith(other cluster.Claim, root store.ID, links [][]string, changed bool, trees []*store.Tree, done func()) error {
	if s.fenced.Load() != nil {
		return errFencedOut
	}
	s.setFencedReadOnly()
	st := &FencedStatus{Node: other.Node, Mountpoint: other.Mountpoint, Pinned: s.pinned.String()}
	if changed {
		name, err := s.d.keepFenced(s.ws, s.pinned, root, links, trees...)
		if err != nil {
			return err
		}
		st.Fork = name
	}
	done()
	s.attr.pending = nil
	s.failed = nil // a failed capture's changes are in the fork: its retry ends
	s.captureState.Store(nil)
	s.fenced.Store(st)
	if st.Fork != "" {
		s.d.logger.Printf("%s at %s: fenced: node %s claimed %s (mounted at %s) while this node had lost its claim; nothing is published to %s from here, the mount is read-only, and its unpublished changes are workspace %s (forked from %s): land or inspect it",
			s.ws, s.mp, other.Node, s.ws, other.Mountpoint, s.ws, st.Fork, s.pinned.Short())
	} else {
		s.d.logger.Printf("%s at %s: fenced: node %s claimed %s (mounted at %s) while this node had lost its claim; the mount had no unpublished changes and is read-only from here",
			s.ws, s.mp, other.Node, s.ws, other.Mountpoint)
	}
	return errFencedOut
}

// FencedStatus is what status shows of a fenced mount.
type FencedStatus struct {
	Node       string `json:"node"`           // the node that holds the claim
	Mountpoint string `json:"mountpoint"`     // where it mounts the workspace
	Pinned     string `json:"pinned"`         // the generation this mount's view was pinned to
	Fork       string `json:"fork,omitempty"` // the workspace holding its unpublished changes
}

// Fenced returns what fenced the mount, or nil.
func (s *Mount) Fenced() *FencedStatus { return s.fenced.Load() }

// claimLostElsewhere is the claims' report that another node claimed ws
// while this node had lost its lease: the mount is fenced out now, not at
// its next publish, so that its tools stop writing to a view nobody will
// publish.
func (d *Daemon) claimLostElsewhere(ws string, other cluster.Claim) {
	d.mu.Lock()
	s := d.mounts[ws]
	d.mu.Unlock()
	if s == nil {
		return
	}
	s.acquire(0)
	defer s.release()
	if err := s.fenceOut(other); err != nil && !errors.Is(err, errFencedOut) {
		s.d.logger.Printf("%s: %v", ws, err)
	}
}

// recoverFenced is a recovery's answer to another node holding rec's
// workspace: the dead mount's overlay becomes a fork, and nothing of the
// workspace (head, window, reconcile) is touched.
func (d *Daemon) recoverFenced(wsName string, pinned, root store.ID, links [][]string, changed bool, other cluster.Claim) ([]string, error) {
	if !changed {
		return []string{fmt.Sprintf("%s is mounted on node %s at %s: the dead mount had no unpublished changes", wsName, other.Node, other.Mountpoint)}, nil
	}
	name, err := d.keepFenced(wsName, pinned, root, links)
	if err != nil {
		return nil, err
	}
	d.logger.Printf("%s: recovery: node %s holds the claim (mounted at %s): the dead mount's unpublished changes are workspace %s (forked from %s); nothing is published to %s",
		wsName, other.Node, other.Mountpoint, name, pinned.Short(), wsName)
	return []string{fmt.Sprintf("%s is mounted on node %s at %s: kept the dead mount's unpublished changes as workspace %s (forked from %s), published nothing to %s",
		wsName, other.Node, other.Mountpoint, name, pinned.Short(), wsName)}, nil
}
