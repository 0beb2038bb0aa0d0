package workspace

import (
	"context"

	"github.com/acyclicfs/acyclicfs/store"
)

// inPlaces is the in-place part of a Manager (inplace*.go, materialize.go,
// detect_*.go): detection of what other programs changed in an in-place
// workspace's directory, the merge of it, the journaled materialization of
// the head into the directory, base references and lost content. It works
// over the core's operations (the embedded Manager) and owns its own
// state: a lock per in-place workspace and the detection memo. The core
// reaches it through Manager.ip and the exported methods below.
type inPlaces struct {
	*Manager
	// locks serialize the creation, syncs and materializations of each
	// in-place workspace (one DIR, one writer), keyed by workspace name;
	// different directories sync concurrently.
	locks  dirLocks
	detect detectMemo // detection's per-directory verdicts
}

// CreateInPlace makes name a root workspace whose base is the directory
// dir, read lazily: nothing under dir is read or hashed here.
func (m *Manager) CreateInPlace(name, dir string) (store.ID, error) {
	return m.ip.CreateInPlace(name, dir)
}

// InPlace returns what an in-place workspace is over; ok is false for
// other workspaces.
func (m *Manager) InPlace(name string) (InPlaceInfo, bool, error) { return m.ip.InPlace(name) }

// SyncInPlace reconciles an in-place workspace with its directory: changes
// other programs made to DIR are detected from fingerprints and merged like
// a parent advance (3-way; overlapping edits keep both versions with
// conflict markers and are reported), then the head is materialized into
// DIR under a journal. Outcome: current (nothing came from DIR), rebased
// (external changes merged) or conflicted.
//
// Syncs of one workspace are serialized; those of different workspaces run
// concurrently. A cancelled ctx stops the sync between its steps (before
// detection, before the materialization): each step is atomic, and a head
// not yet written into DIR is written by the next sync.
func (m *Manager) SyncInPlace(ctx context.Context, name string) (Result, error) {
	return m.ip.SyncInPlace(ctx, name)
}

// PendingMaterializations lists materializations with journals (status).
func (m *Manager) PendingMaterializations() ([]string, error) { return m.ip.PendingMaterializations() }

// DerivesFromInPlace reports whether ws or one of its ancestors is an
// in-place workspace, so that its trees may name base references.
func (m *Manager) DerivesFromInPlace(ws string) bool { return m.ip.derivesFromInPlace(ws) }
