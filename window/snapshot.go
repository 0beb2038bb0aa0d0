package window

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/acyclicfs/acyclicfs/store"
)

// StateVersion is the serialization contract version of Snapshot. A stored
// snapshot of any other version is ErrIncompatibleState.
const StateVersion uint32 = 1

// GenerationID names a generation; the zero ID means "none".
type GenerationID = store.ID

// PhaseKind names a window phase.
type PhaseKind string

// The three phases of a window (see the package documentation's diagram).
const (
	// PhaseIdle: no tool pins the mounted view.
	PhaseIdle PhaseKind = "idle"
	// PhaseActive: one or more leases share a pinned view.
	PhaseActive PhaseKind = "active"
	// PhaseReconciling: the last lease closed (or expired) and exactly one
	// ticket owner must reconcile before a new window may open.
	PhaseReconciling PhaseKind = "reconciling"
)

// LeaseRecord is one durable, active tool lease.
type LeaseRecord struct {
	// ID is the lease's stable identity; it equals its key in Phase.Leases.
	ID LeaseID `json:"id"`
	// Owner is adapter-defined, normally an agent and its tool session.
	Owner string `json:"owner"`
	// ExpiresAtMillis is the absolute Unix-millisecond expiry.
	ExpiresAtMillis int64 `json:"expires_at_ms"`
	// Permit is the publication permit of the lease's current epoch. Its
	// gate is unique to this lease incarnation; stores that keep gates
	// (MetaStore) open, renew and fence it in the same transaction as the
	// snapshot that adds, renews or removes the lease.
	Permit store.Permit `json:"permit"`
}

// Phase is the durable coordination phase of one workspace. Which fields
// may be set depends on Kind; Validate enforces it:
//
//	Idle:        nothing.
//	Active:      PinnedParent, Leases (non-empty), PendingParent.
//	Reconciling: Ticket (non-zero), PinnedParent, PendingParent, SubsequentParent.
//
// A zero GenerationID in PendingParent or SubsequentParent means "none".
type Phase struct {
	Kind PhaseKind `json:"kind"`
	// PinnedParent is the parent generation visible when the first lease
	// of the window opened (or, for an idle parent advance, that parent).
	PinnedParent GenerationID `json:"pinned_parent,omitzero"`
	// Leases are the active leases keyed by identity (Active only).
	Leases map[LeaseID]LeaseRecord `json:"leases,omitempty"`
	// PendingParent is the newest parent observed while pinned.
	PendingParent GenerationID `json:"pending_parent,omitzero"`
	// Ticket is the reconciliation retry identity (Reconciling only).
	Ticket Ticket `json:"ticket,omitzero"`
	// SubsequentParent is a parent observed after the ticket was claimed;
	// completing the ticket turns it into the next ticket's pending parent.
	SubsequentParent GenerationID `json:"subsequent_parent,omitzero"`
}

// Snapshot is the complete versioned durable state of one workspace's window.
type Snapshot struct {
	// Version is StateVersion.
	Version uint32 `json:"version"`
	// Revision is the optimistic-concurrency revision; 0 means "never
	// stored", every stored snapshot has Revision ≥ 1, and each successful
	// compare-and-swap increases it by exactly one.
	Revision uint64 `json:"revision"`
	// Workspace is the workspace name this state governs.
	Workspace string `json:"workspace"`
	// Phase is the current coordination phase.
	Phase Phase `json:"phase"`
}

// IdleSnapshot is the state of a workspace whose window was never stored.
// Store implementations return it from Load for an absent key.
func IdleSnapshot(workspace string) Snapshot {
	return Snapshot{Version: StateVersion, Workspace: workspace, Phase: Phase{Kind: PhaseIdle}}
}

// Clone returns a deep copy (the lease map is not shared).
func (s Snapshot) Clone() Snapshot {
	s.Phase = s.Phase.clone()
	return s
}

func (p Phase) clone() Phase {
	if p.Leases != nil {
		p.Leases = maps.Clone(p.Leases)
	}
	return p
}

func (p Phase) equal(q Phase) bool {
	return p.Kind == q.Kind && p.PinnedParent == q.PinnedParent &&
		p.PendingParent == q.PendingParent && p.Ticket == q.Ticket &&
		p.SubsequentParent == q.SubsequentParent && maps.Equal(p.Leases, q.Leases)
}

func validWorkspace(ws string) bool {
	return ws != "" && utf8.ValidString(ws)
}

// gatePrefix is the common prefix of every gate of one lease id; the suffix
// is the revision of the snapshot that opened it, so a deterministic lease id
// reused in a later window gets a fresh gate (and a predictable epoch 1).
func gatePrefix(workspace string, id LeaseID) string {
	return "window/" + workspace + "/" + id.String() + "/"
}

func gateName(workspace string, id LeaseID, openRevision uint64) string {
	return gatePrefix(workspace, id) + strconv.FormatUint(openRevision, 10)
}

// Validate checks the snapshot's version, workspace and phase shape (the
// seed's snapshot_shape_is_valid, made stricter: fields that do not belong
// to the phase must be zero). Errors wrap ErrIncompatibleState.
func (s Snapshot) Validate() error {
	if s.Version != StateVersion {
		return fmt.Errorf("%w: version %d, this binary understands %d", ErrIncompatibleState, s.Version, StateVersion)
	}
	if !validWorkspace(s.Workspace) {
		return fmt.Errorf("%w: workspace %q is not a valid name", ErrIncompatibleState, s.Workspace)
	}
	if reason := s.Phase.shapeError(s.Workspace); reason != "" {
		return fmt.Errorf("%w: workspace %q: %s", ErrIncompatibleState, s.Workspace, reason)
	}
	return nil
}

func (p Phase) shapeError(workspace string) string {
	switch p.Kind {
	case PhaseIdle:
		if !p.PinnedParent.IsZero() || len(p.Leases) != 0 || !p.PendingParent.IsZero() ||
			!p.Ticket.IsZero() || !p.SubsequentParent.IsZero() {
			return "idle phase carries window fields"
		}
	case PhaseActive:
		if len(p.Leases) == 0 {
			return "active phase has no leases"
		}
		if !p.Ticket.IsZero() || !p.SubsequentParent.IsZero() {
			return "active phase carries reconciliation fields"
		}
		for id, l := range p.Leases {
			switch {
			case id.IsZero() || l.ID != id:
				return fmt.Sprintf("lease key %s does not match its record %s", id, l.ID)
			case strings.TrimSpace(l.Owner) == "" || !utf8.ValidString(l.Owner):
				return fmt.Sprintf("lease %s has no owner", id)
			case l.ExpiresAtMillis <= 0:
				return fmt.Sprintf("lease %s has no expiry", id)
			case l.Permit.Epoch == 0 || !strings.HasPrefix(l.Permit.Gate, gatePrefix(workspace, id)):
				return fmt.Sprintf("lease %s has a foreign or empty permit %q/%d", id, l.Permit.Gate, l.Permit.Epoch)
			}
		}
	case PhaseReconciling:
		if p.Ticket.IsZero() {
			return "reconciling phase has no ticket"
		}
		if len(p.Leases) != 0 {
			return "reconciling phase carries leases"
		}
	default:
		return fmt.Sprintf("unknown phase %q", p.Kind)
	}
	return ""
}

// checkReplacement is what every Store must verify before storing next in
// place of revision expect: right workspace and version, revision exactly
// one more, valid shape.
func checkReplacement(workspace string, expect uint64, next Snapshot) error {
	if next.Workspace != workspace {
		return fmt.Errorf("%w: replacement for %q stored under %q", ErrIncompatibleState, next.Workspace, workspace)
	}
	if next.Revision != expect+1 || expect == ^uint64(0) {
		return fmt.Errorf("%w: replacement revision %d does not follow %d", ErrIncompatibleState, next.Revision, expect)
	}
	return next.Validate()
}

// EncodeSnapshot validates s and returns its canonical JSON encoding (map
// keys sorted by encoding/json).
func EncodeSnapshot(s Snapshot) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %v", ErrIncompatibleState, err)
	}
	return b, nil
}

// DecodeSnapshot decodes and validates a stored snapshot. Torn or corrupt
// bytes, unknown fields, trailing data, a revision of 0 and any version
// other than StateVersion are ErrIncompatibleState; the version is checked
// first so a newer binary's state is reported as such.
func DecodeSnapshot(b []byte) (Snapshot, error) {
	var head struct {
		Version *uint32 `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return Snapshot{}, fmt.Errorf("%w: torn or corrupt snapshot: %v", ErrIncompatibleState, err)
	}
	if head.Version == nil {
		return Snapshot{}, fmt.Errorf("%w: snapshot has no version", ErrIncompatibleState)
	}
	if *head.Version != StateVersion {
		return Snapshot{}, fmt.Errorf("%w: snapshot version %d, this binary understands %d", ErrIncompatibleState, *head.Version, StateVersion)
	}
	var s Snapshot
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Snapshot{}, fmt.Errorf("%w: corrupt snapshot: %v", ErrIncompatibleState, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Snapshot{}, fmt.Errorf("%w: trailing data after snapshot", ErrIncompatibleState)
	}
	if s.Revision == 0 {
		return Snapshot{}, fmt.Errorf("%w: stored snapshot has revision 0", ErrIncompatibleState)
	}
	if err := s.Validate(); err != nil {
		return Snapshot{}, err
	}
	return s, nil
}

// PermitMatchesWorkspace reports whether p was issued for a lease of
// workspace's window. A head append must check it besides the gate itself,
// so a live lease of one workspace cannot publish into another.
func PermitMatchesWorkspace(p store.Permit, workspace string) bool {
	rest, ok := strings.CutPrefix(p.Gate, "window/"+workspace+"/")
	if !ok {
		return false
	}
	id, rev, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(rev, "/") {
		return false
	}
	if _, err := ParseLeaseID(id); err != nil {
		return false
	}
	_, err := strconv.ParseUint(rev, 10, 64)
	return err == nil
}
