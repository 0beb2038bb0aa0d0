package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/rebase/gitmerge"
	"github.com/acyclicfs/acyclicfs/rebase/mergedriver"
	"github.com/acyclicfs/acyclicfs/store"
)

// Outcome is the result of a reconcile, rebase or land, as SPEC.md names it.
type Outcome string

// Outcomes.
const (
	OutcomeCurrent     Outcome = "current"
	OutcomeRebased     Outcome = "rebased"
	OutcomeConflicted  Outcome = "conflicted"
	OutcomeStillActive Outcome = "still-active"
)

// RebaseOptions steer a rebase.
type RebaseOptions struct {
	Prefer  rebase.Prefer
	Markers bool
	// Key is the idempotency key (e.g. a window's reconcile ticket): a retry
	// with the same key returns the recorded outcome instead of rebasing again.
	Key string
	// Permit, if set, is checked in the head append's transaction.
	Permit *store.Permit
}

// ConflictInfo is one recorded conflict: its path, why, and the three
// versions kept for it (nil: absent on that side). Ours is the
// workspace's own version, theirs its parent's.
type ConflictInfo struct {
	Path   string      `json:"path"`
	Kind   string      `json:"kind"`
	Base   *store.Side `json:"base,omitempty"`
	Ours   *store.Side `json:"ours,omitempty"`
	Theirs *store.Side `json:"theirs,omitempty"`
}

// Result describes what a rebase or land did.
type Result struct {
	Workspace string         `json:"workspace"`
	Outcome   Outcome        `json:"outcome"`
	Head      store.ID       `json:"head"`
	Base      store.ID       `json:"base"`
	Parent    string         `json:"parent,omitempty"`
	Conflicts []ConflictInfo `json:"conflicts,omitempty"`
	// Markers lists paths where conflict markers were written (or, for
	// binary files, ours was kept); they stay recorded conflicts.
	Markers []ConflictInfo `json:"markers,omitempty"`
	// Sync is where an in-place reconciliation (SyncInPlace) spent its
	// time; nil for other operations.
	Sync *SyncTiming `json:"-"`
}

// SyncTiming splits an in-place reconciliation: Detect is the comparison
// of DIR with what it should hold (and the merge of what changed there),
// Materialize writing the head into DIR under its journal (planning,
// preimages, the edits and their fsyncs, completion); Edits counts the
// journal's edits (files written or removed, directories made or
// removed).
type SyncTiming struct {
	Detect      time.Duration
	Materialize time.Duration
	Edits       int
}

// conflictRecord is stored under meta namespace "conflicts", key workspace.
// It is valid while the workspace's head is still the one it was computed
// for. Merge conflicts live in generations (conflicts.go); this record
// keeps only notices that are not merges' (an in-place directory's lost
// content) and what older stores recorded.
type conflictRecord struct {
	Head       store.ID       `json:"head"`
	ParentHead store.ID       `json:"parent_head"`
	Key        string         `json:"key,omitempty"`
	Time       int64          `json:"time"`
	Conflicts  []ConflictInfo `json:"conflicts"`
}

const metaConflicts = "conflicts"

// merger adapts the store to rebase's reader/writer interfaces.
type merger struct{ st *store.Store }

func (g merger) GetTree(id store.ID) (*store.Tree, error)  { return g.st.GetTree(id) }
func (g merger) ReadBlob(id store.ID) ([]byte, error)      { return g.st.ReadBlob(id) }
func (g merger) PutTree(t *store.Tree) (store.ID, error)   { return g.st.PutTree(t) }
func (g merger) WriteBlobBytes(b []byte) (store.ID, error) { return g.st.WriteBlobBytes(b) }
func toInfos(cs []rebase.Conflict) []ConflictInfo {
	out := infosOf(storeConflicts(cs))
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Rebase moves name onto its parent's current head with a 3-way merge.
// Paths the merge cannot settle (unless Prefer settles them) keep ours (or
// conflict markers, with Markers) and are recorded as conflicts in the new
// head: the outcome is then conflicted, and name cannot land until they
// are resolved.
//
// A cancelled ctx stops it before the merge, or, once name moved, between
// the children that follow it (the rest follow at the next open: the
// propagation is recorded).
func (m *Manager) Rebase(ctx context.Context, name string, opt RebaseOptions) (Result, error) {
	before, err := m.Get(name)
	if err != nil {
		return Result{}, err
	}
	res, err := m.rebaseOnce(ctx, name, opt)
	if err != nil {
		return res, err
	}
	if res.Head != before.Head {
		m.propagate(ctx, name, true)
	}
	return res, nil
}

func (m *Manager) rebaseOnce(ctx context.Context, name string, opt RebaseOptions) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{Workspace: name}, fmt.Errorf("rebase %s: %w", name, err)
	}
	release := m.st.HoldGC() // merged objects must not be swept before the append
	defer release()
	w, err := m.Get(name)
	if err != nil {
		return Result{}, err
	}
	res := Result{Workspace: name, Head: w.Head, Base: w.Base, Parent: w.Parent}
	if w.Parent == "" {
		if w.InPlace != "" {
			return m.SyncInPlace(ctx, name)
		}
		return res, fmt.Errorf("%w: %s is a root workspace", ErrNoParent, name)
	}
	if opt.Key != "" {
		if e, ok, err := m.st.FindOperation(name, opt.Key); err != nil {
			return res, err
		} else if ok {
			res.Outcome, res.Head, res.Base = OutcomeRebased, e.Gen, e.Base
			return res, m.settleOutcome(name, &res)
		}
	}
	p, err := m.st.GetWorkspace(w.Parent)
	if err != nil {
		return res, fmt.Errorf("parent %s of %s: %w", w.Parent, name, err)
	}
	if w.Base == p.Head {
		res.Outcome = OutcomeCurrent
		if opt.Markers {
			// Already rebased with conflicts: write markers where the
			// recorded stand-in is still ours.
			if res.Head, res.Markers, err = m.markConflicts(w, opt.Permit); err != nil {
				return res, err
			}
		}
		return res, m.settleOutcome(name, &res)
	}
	key := opt.Key
	if key == "" {
		key = "rebase " + newOperationID()
	}
	var newGen store.ID
	if w.Head == w.Base {
		// No changes of its own: follow the parent exactly.
		newGen = p.Head
	} else {
		if newGen, res.Markers, err = m.mergeOnto(w, p, key, opt); err != nil {
			return res, err
		}
	}
	failpoint.Hit("rebase.before-publish") // merged (git directories too), not yet the head
	nw, err := m.st.CompareAndAppend(name, w.Head, store.HeadEntry{Gen: newGen, Base: p.Head, Kind: store.GenRebase, Operation: key, Time: m.now()}, opt.Permit)
	if err != nil {
		return res, fmt.Errorf("publish rebase of %s: %w", name, err)
	}
	res.Head, res.Base = nw.Head, nw.Base
	res.Outcome = OutcomeRebased
	return res, m.settleOutcome(name, &res)
}

// mergeOnto stores the generation that rebases w onto its parent p's head:
// the 3-way merge of w's head and p's head against w's base, with the
// conflicts of both heads carried and the merge's own recorded. markers
// lists the paths given conflict markers.
func (m *Manager) mergeOnto(w, p store.Workspace, key string, opt RebaseOptions) (gen store.ID, markers []ConflictInfo, err error) {
	baseRoot, err := m.rootOf(w.Base)
	if err != nil {
		return gen, nil, err
	}
	oursRoot, err := m.rootOf(w.Head)
	if err != nil {
		return gen, nil, err
	}
	theirsRoot, err := m.rootOf(p.Head)
	if err != nil {
		return gen, nil, err
	}
	mr, err := m.merge3(baseRoot, oursRoot, theirsRoot, rebase.Options{Prefer: opt.Prefer, Markers: opt.Markers, KeepConflicts: true})
	if err != nil {
		return gen, nil, fmt.Errorf("merge %s onto %s: %w", w.Name, w.Parent, err)
	}
	fresh := storeConflicts(mr.Conflicts)
	if opt.Markers {
		// Markers stand in for a conflict; they settle nothing.
		fresh = append(fresh, storeConflicts(mr.Resolved)...)
		markers = toInfos(mr.Resolved)
	}
	ours, err := m.conflictsOf(w.Head)
	if err != nil {
		return gen, nil, err
	}
	if ours, err = m.withTheirs(ours, theirsRoot); err != nil {
		return gen, nil, err
	}
	theirs, err := m.conflictsOf(p.Head)
	if err != nil {
		return gen, nil, err
	}
	root := mr.Tree
	if root.IsZero() {
		root = store.EmptyTreeID()
	}
	links, err := m.mergedLinks(w.Base, w.Head, p.Head, root)
	if err != nil {
		return gen, nil, fmt.Errorf("merge %s onto %s: %w", w.Name, w.Parent, err)
	}
	gen, err = m.st.PutGeneration(&store.Generation{Root: root, Parents: []store.ID{w.Head, p.Head}, Workspace: w.Name, Kind: store.GenRebase, Operation: key, Time: m.now(),
		Conflicts: unionConflicts(fresh, ours, theirs), Links: links})
	if err != nil {
		return gen, nil, fmt.Errorf("store generation: %w", err)
	}
	return gen, markers, nil
}

// mergeOptions completes opt with what every merge of workspace trees
// uses: the manager's limits, the merge drivers that .gitattributes name
// (defined in the store owner's own git config only: a driver the
// workspace's .git/config defines does not run, and is reported through
// Options.Warn), and the git-aware merge of git directories, all reading
// and writing through buf.
func (m *Manager) mergeOptions(opt rebase.Options, ours store.ID, buf *treeBuffer) rebase.Options {
	opt.Limits = m.limit
	opt.Driver = (&mergedriver.Runner{Config: mergedriver.TreeConfig(buf, ours, userGitConfig()), Warn: m.opt.Warn}).Merge
	if m.hasGit() {
		// Its scratch git directories live in the store's tmp/, on the
		// store's file system (objects are hard-linked, not copied), and
		// are swept with tmp/ by the next open after a crash.
		opt.Subtree = &gitmerge.Merger{Store: buf, TempDir: filepath.Join(m.st.Dir(), "tmp")}
	}
	return opt
}

// hasGit reports whether git is on PATH (looked up once). Without it git
// directories merge path by path, which records conflicts on refs but
// never publishes a marker.
func (m *Manager) hasGit() bool {
	m.gitOnce.Do(func() {
		_, err := exec.LookPath("git")
		m.git = err == nil
	})
	return m.git
}

// userGitConfig returns the content of the store owner's global git
// config (nil if there is none): $XDG_CONFIG_HOME/git/config (or
// ~/.config/git/config), then ~/.gitconfig, of the user the process runs
// as. It is the only configuration merge drivers come from.
func userGitConfig() []byte {
	var paths []string
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		paths = append(paths, filepath.Join(x, "git", "config"))
	}
	if h, err := os.UserHomeDir(); err == nil {
		paths = append(paths, filepath.Join(h, ".config", "git", "config"), filepath.Join(h, ".gitconfig"))
	}
	var out []byte
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			out = append(append(out, b...), '\n')
		}
	}
	return out
}

// Land publishes name's changes into its parent: rebase first if the parent
// moved, then fast-forward the parent's head to name's head (one atomic
// append on both). Siblings follow. A workspace whose head holds conflicts
// its parent's does not share lands nothing: the outcome is conflicted.
//
// A cancelled ctx stops it before the rebase, before the landing append,
// or after it between the siblings that follow (recorded: the rest follow
// at the next open); a landing made is written into an in-place parent's
// directory whatever ctx says.
func (m *Manager) Land(ctx context.Context, name string, opt RebaseOptions) (Result, error) {
	w, err := m.Get(name)
	if err != nil {
		return Result{}, err
	}
	if w.Parent == "" {
		return Result{Workspace: name}, fmt.Errorf("%w: %s is a root workspace; nothing to land into", ErrNoParent, name)
	}
	res, err := m.Rebase(ctx, name, RebaseOptions{Prefer: opt.Prefer})
	if err != nil || res.Outcome == OutcomeConflicted {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("land %s: %w", name, err)
	}
	w, err = m.Get(name)
	if err != nil {
		return res, err
	}
	p, err := m.st.GetWorkspace(w.Parent)
	if err != nil {
		return res, err
	}
	res = Result{Workspace: name, Parent: w.Parent, Head: p.Head, Base: w.Base}
	if w.Base != p.Head {
		return res, fmt.Errorf("land %s: %w: parent moved during land; retry", name, ErrBusy)
	}
	if w.Head == p.Head {
		res.Outcome = OutcomeCurrent
		return res, nil
	}
	op := "land " + name + " " + newOperationID()
	_, err = m.st.CompareAndAppendMany([]store.Append{
		{Workspace: w.Parent, ExpectHead: p.Head, Entry: store.HeadEntry{Gen: w.Head, Base: p.Base, Kind: store.GenLand, Operation: op, Time: m.now()}},
		{Workspace: name, ExpectHead: w.Head, Entry: store.HeadEntry{Gen: w.Head, Base: w.Head, Kind: store.GenLand, Operation: "landed into " + w.Parent + " " + newOperationID(), Time: m.now()}},
	}, opt.Permit)
	if errors.Is(err, store.ErrHeadMoved) {
		return res, fmt.Errorf("land %s: %w: %w", name, ErrBusy, err)
	}
	if err != nil {
		return res, fmt.Errorf("land %s: %w", name, err)
	}
	res.Outcome = OutcomeRebased
	res.Head, res.Base = w.Head, w.Head
	m.clearConflicts(name)
	if err := m.afterInPlaceMoved(context.WithoutCancel(ctx), w.Parent); err != nil {
		return res, fmt.Errorf("land %s: landed, but writing it into %s's directory failed: %w", name, w.Parent, err)
	}
	m.propagate(ctx, w.Parent, true)
	return res, nil
}

// afterInPlaceMoved writes an in-place workspace's moved head into its
// directory at once when it is not mounted (a mounted one does so at its
// next reconciliation).
func (m *Manager) afterInPlaceMoved(ctx context.Context, name string) error {
	w, err := m.st.GetWorkspace(name)
	if err != nil || w.InPlace == "" {
		return nil
	}
	if _, mounted, err := m.MountRecord(name); err != nil || mounted {
		return err
	}
	_, err = m.SyncInPlace(ctx, name)
	return err
}

// headChanged is called after a workspace's own content changed (commit,
// undo, capture): mounted children learn of it; unmounted children follow
// on their next rebase, land or mount.
func (m *Manager) headChanged(name string) { m.propagate(context.Background(), name, false) }

// propagate lets the children of name follow its new head. Mounted children
// are told (their window coalesces the parent or they rebase at once);
// with all, unmounted children are rebased now, recursively. A conflicted
// child is left as it was, with its conflicts recorded. A cancelled ctx
// stops it between children and keeps the record of the propagation, so
// that recovery finishes it.
func (m *Manager) propagate(ctx context.Context, name string, all bool) {
	kids, err := m.st.Children(name)
	if err != nil || len(kids) == 0 {
		return
	}
	w, err := m.st.GetWorkspace(name)
	if err != nil {
		return
	}
	if all {
		_ = m.putPending(name, w.Head)
	}
	h := m.getHooks()
	for _, k := range kids {
		if h.ParentAdvanced != nil && h.ParentAdvanced(k, w.Head) {
			continue
		}
		if !all {
			continue
		}
		if _, ok, _ := m.mountedAt(k); ok {
			// Served by a mount: this node's (its daemon is gone, so it
			// is recovered at remount) or another node's, whose daemon
			// follows the parent through the plane's watch.
			continue
		}
		if ctx.Err() != nil {
			return // the recorded propagation is finished by recovery
		}
		if _, err := m.Rebase(ctx, k, RebaseOptions{}); errors.Is(err, meta.ErrUnavailable) {
			return // no use trying the next: the recorded propagation is finished by recovery
		}
	}
	if all && ctx.Err() == nil {
		_ = m.shared.CompareAndDelete(familyPropagate, name, m.pendingRev(name))
	}
}

const familyPropagate = "propagate"

type pendingPropagation struct {
	Head store.ID `json:"head"`
}

func (m *Manager) putPending(name string, head store.ID) error {
	rev, _, err := m.shared.Load(familyPropagate, name, &pendingPropagation{})
	if err != nil {
		return err
	}
	_, err = m.shared.CompareAndSwap(familyPropagate, name, rev, pendingPropagation{Head: head})
	return err
}

func (m *Manager) pendingRev(name string) uint64 {
	rev, _, _ := m.shared.Load(familyPropagate, name, &pendingPropagation{})
	return rev
}

func (m *Manager) recordConflicts(name string, rec conflictRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := m.st.PutMeta(metaConflicts, name, b); err != nil {
		return fmt.Errorf("record conflicts of %s: %w", name, err)
	}
	return nil
}

func (m *Manager) clearConflicts(name string) { _ = m.st.DeleteMeta(metaConflicts, name) }

// Conflicts returns name's recorded conflicts: those of its head
// generation, then any notice recorded for the same head (an in-place
// directory's lost content) at another path.
func (m *Manager) Conflicts(name string) ([]ConflictInfo, error) {
	w, err := m.st.GetWorkspace(name)
	if err != nil {
		return nil, err
	}
	cs, err := m.conflictsOf(w.Head)
	if err != nil {
		return nil, err
	}
	out := infosOf(cs)
	b, err := m.st.GetMeta(metaConflicts, name)
	if errors.Is(err, store.ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	var rec conflictRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("conflict record of %s: %w", name, store.ErrCorrupt)
	}
	if w.Head != rec.Head {
		return out, nil // stale: the workspace moved on
	}
	for _, c := range rec.Conflicts {
		if !slices.ContainsFunc(out, func(o ConflictInfo) bool { return o.Path == c.Path }) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}
