package workspace

import (
	"fmt"
)

const familyMounts = "mounts"

// MountRecord says that a workspace is (or was, until recovery) served by a
// mount. It persists across daemon crashes: a record whose daemon is gone
// marks overlay state that the next mount of the workspace must recover.
type MountRecord struct {
	Workspace  string `json:"workspace"`
	Mountpoint string `json:"mountpoint"`
	StateDir   string `json:"state_dir"`
	// Pinned is the generation the mount's view was pinned at when its
	// overlay was last reset (the base of any unpublished changes).
	Pinned    string `json:"pinned"`
	DaemonPID int    `json:"daemon_pid"`
	Since     int64  `json:"since"`
	InPlace   bool   `json:"in_place,omitempty"`
	// ClaimRev is, on etcd, the revision of the node's claim of the
	// workspace when the record was written (0: a local store, or a
	// record from before claims were recorded). A recovery looks through
	// the claim's history since it for another node's claim.
	ClaimRev int64 `json:"claim_rev,omitempty"`
}

// MountRecord returns the mount record of ws, if any.
func (m *Manager) MountRecord(ws string) (MountRecord, bool, error) {
	var rec MountRecord
	_, found, err := m.cs.Load(familyMounts, ws, &rec)
	if err != nil {
		return rec, false, fmt.Errorf("mount record of %s: %w", ws, err)
	}
	return rec, found, nil
}

// PutMountRecord creates or replaces ws's mount record.
func (m *Manager) PutMountRecord(rec MountRecord) error {
	var cur MountRecord
	rev, _, err := m.cs.Load(familyMounts, rec.Workspace, &cur)
	if err != nil {
		return err
	}
	_, err = m.cs.CompareAndSwap(familyMounts, rec.Workspace, rev, rec)
	return err
}

// ClearMountRecord removes ws's mount record (after a clean unmount).
func (m *Manager) ClearMountRecord(ws string) error {
	var cur MountRecord
	rev, found, err := m.cs.Load(familyMounts, ws, &cur)
	if err != nil || !found {
		return err
	}
	return m.cs.CompareAndDelete(familyMounts, ws, rev)
}

// MountRecords lists every mount record.
func (m *Manager) MountRecords() ([]MountRecord, error) {
	keys, err := m.cs.Keys(familyMounts)
	if err != nil {
		return nil, err
	}
	var out []MountRecord
	for _, k := range keys {
		rec, ok, err := m.MountRecord(k)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out, nil
}
