package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/acyclicfs/acyclicfs/blobs"
	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/corestate"
	"github.com/acyclicfs/acyclicfs/meta"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/window"
)

// Options configure a Manager.
type Options struct {
	// Clock returns the time in Unix milliseconds; nil is the wall clock.
	Clock func() int64
	// Init lets the store of a node on etcd be new there (init): any other
	// open of a node whose prefix holds no store fails with an error
	// wrapping store.ErrMissing rather than start an empty one.
	Init bool
	// Warn receives one line per skipped or odd input (special files in an
	// imported tree). nil discards them.
	Warn func(msg string)
	// Limits bound merges; zero value means rebase.DefaultLimits().
	Limits rebase.Limits
	// NoSync skips fsyncs (tests only).
	NoSync bool
	// Progress, if set, is told how far a long operation (import, export)
	// got: done of total items. It is called from worker goroutines, at
	// most a few times per item, and must be cheap.
	Progress func(what string, done, total int)
	// Meta, if set, is the metadata plane the store runs on instead of
	// its meta.db (store.Options.Meta; tests: meta.NewMemory()). The
	// caller owns it.
	Meta meta.Store
}

// Hooks connect the manager to live mounts (the daemon sets them). The zero
// value means no workspace is served by a live mount.
type Hooks struct {
	// ParentAdvanced tells a mounted workspace that its parent's head moved.
	// It returns true if the mount took over reconciliation of ws.
	ParentAdvanced func(ws string, parentHead store.ID) bool
}

// Manager orchestrates workspaces over the store and core state. It is safe
// for use by several goroutines; operations on one workspace are serialized
// by the store's compare-and-append, not by locks here.
type Manager struct {
	ip    *inPlaces // the in-place workspaces (inplace_type.go)
	st    *store.Store
	cs    *corestate.Store
	opt   Options
	dir   string
	limit rebase.Limits

	// shared holds the store-wide families (shared_state.go): cs for a
	// local store, the metadata plane for a store on etcd.
	shared *corestate.Store

	hooksMu sync.RWMutex // protects hooks
	hooks   Hooks

	winOnce sync.Once
	win     *window.Coordinator // set once by Windows

	gitOnce sync.Once
	git     bool // set once by hasGit

	gn *gitNative // the git-native workspaces (gitnative.go)

	node *cluster.Node // the store's node when dir has a cluster.json; nil for a local store
}

// Open opens (creating if needed) the store at dir and recovers any
// interrupted work (transactions, export journals, propagation). A
// directory with a cluster.json is a node of a store on etcd
// (package cluster): unless opt.Meta is set, the store runs on that etcd
// plane, and the Manager holds the node (its lock and etcd client) until
// Close.
func Open(dir string, opt Options) (*Manager, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("store path %q: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("store %s: %w: not a directory", abs, ErrInvalidInput)
	}
	if err := CheckStoreDir(abs); err != nil {
		return nil, err
	}
	var node *cluster.Node
	var remote blobs.Store
	var cacheBytes int64
	var headGuard func(meta.Tx, string) error
	if opt.Meta == nil {
		if node, err = cluster.Open(context.Background(), abs); err != nil {
			return nil, fmt.Errorf("open store %s: %w", abs, err)
		}
		if node != nil {
			opt.Meta = node.Meta()
			remote, cacheBytes = node.Remote(), node.Config().CacheBytes
			headGuard = node.HeadGuard // its claims, compared in each head append's Txn
		}
	}
	closeNode := func() {
		if node != nil {
			node.Close()
		}
	}
	st, err := store.Open(abs, store.Options{Clock: opt.Clock, NoSync: opt.NoSync, Warn: opt.Warn, Watchers: baseWatchers{}, Meta: opt.Meta,
		Remote: remote, CacheBytes: cacheBytes, HeadGuard: headGuard, MustExist: node != nil && !opt.Init})
	if err != nil {
		closeNode()
		if errors.Is(err, store.ErrMissing) && node != nil {
			return nil, fmt.Errorf("%w (%s holds none: its keys were deleted, or no init made it)", err, node.Config().MetaURL())
		}
		return nil, err // "open store DIR: …" already
	}
	cs, err := corestate.Open(filepath.Join(abs, "state"), corestate.Options{NoSync: opt.NoSync})
	if err != nil {
		st.Close()
		closeNode()
		return nil, fmt.Errorf("open core state: %w", err)
	}
	shared, err := openShared(node, opt.Meta, cs, opt.Warn)
	if err != nil {
		st.Close()
		closeNode()
		return nil, err
	}
	m := &Manager{st: st, cs: cs, shared: shared, opt: opt, dir: abs, limit: opt.Limits, node: node}
	m.ip = &inPlaces{Manager: m}
	m.gn = &gitNative{Manager: m}
	if m.limit == (rebase.Limits{}) {
		m.limit = rebase.DefaultLimits()
	}
	if m.opt.Warn == nil {
		m.opt.Warn = func(string) {}
	}
	if m.opt.Progress == nil {
		m.opt.Progress = func(string, int, int) {}
	}
	if m.opt.Clock == nil {
		m.opt.Clock = st.Now
	}
	if _, err := m.Recover(); err != nil {
		st.Close()
		closeNode()
		return nil, fmt.Errorf("recover: %w", err)
	}
	return m, nil
}

// Close releases the store (and the node, for a store on etcd).
func (m *Manager) Close() error {
	err := m.st.Close()
	if m.node != nil {
		if cerr := m.node.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// mountedAt says where ws is mounted: by this store's daemon (its mount
// record) or, on etcd, by another node (its claim, named in the answer).
func (m *Manager) mountedAt(ws string) (where string, ok bool, err error) {
	if rec, ok, err := m.MountRecord(ws); err != nil || ok {
		return rec.Mountpoint, ok, err
	}
	if m.node == nil {
		return "", false, nil
	}
	cl, ok, err := m.node.Holder(context.Background(), ws)
	if err != nil || !ok {
		return "", false, err
	}
	return cl.Mountpoint + " on node " + cl.Node, true, nil
}

// Node returns the store's node when it is on etcd (cluster.json), nil for
// a local store.
func (m *Manager) Node() *cluster.Node { return m.node }

// Dir returns the store directory.
func (m *Manager) Dir() string { return m.dir }

// Store exposes the object and head store (for the mount and tests).
func (m *Manager) Store() *store.Store { return m.st }

// CoreState exposes the journaled core state.
func (m *Manager) CoreState() *corestate.Store { return m.cs }

// SetHooks installs the live-mount hooks.
func (m *Manager) SetHooks(h Hooks) {
	m.hooksMu.Lock()
	m.hooks = h
	m.hooksMu.Unlock()
}

func (m *Manager) getHooks() Hooks {
	m.hooksMu.RLock()
	defer m.hooksMu.RUnlock()
	return m.hooks
}

func (m *Manager) now() int64 { return m.opt.Clock() }

// newOperationID returns a fresh random operation id (hex).
func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	return hex.EncodeToString(b[:])
}

// Get returns the workspace record called name.
func (m *Manager) Get(name string) (store.Workspace, error) {
	if err := ValidateName(name); err != nil {
		return store.Workspace{}, err
	}
	w, err := m.st.GetWorkspace(name)
	if errors.Is(err, store.ErrNotFound) {
		return w, fmt.Errorf("%w: %q", ErrUnknownWorkspace, name)
	}
	return w, err
}

// List returns every workspace sorted by name.
func (m *Manager) List() ([]store.Workspace, error) { return m.st.ListWorkspaces() }

// rootOf returns the root tree of a generation (the empty tree for zero).
func (m *Manager) rootOf(gen store.ID) (store.ID, error) {
	if gen.IsZero() {
		return store.EmptyTreeID(), nil
	}
	g, err := m.st.GetGeneration(gen)
	if err != nil {
		return store.ID{}, fmt.Errorf("generation %s: %w", gen.Short(), err)
	}
	return g.Root, nil
}

// ResolveGeneration accepts a full id or a unique prefix of >= 8 hex chars.
func (m *Manager) ResolveGeneration(s string) (store.ID, error) {
	id, err := m.st.ResolveGeneration(s)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) || errors.Is(err, store.ErrInvalidID) {
			return id, fmt.Errorf("%w: %w", ErrInvalidInput, err) // the store's error names the generation
		}
		return id, err
	}
	return id, nil
}

// ResolveRef resolves "NAME", "NAME@GEN" or a generation prefix to a
// generation. Workspace names win over generation prefixes.
func (m *Manager) ResolveRef(ref string) (store.ID, error) {
	name, gen, hasAt := cut(ref, '@')
	if hasAt {
		w, err := m.Get(name)
		if err != nil {
			return store.ID{}, err
		}
		id, err := m.ResolveGeneration(gen)
		if err != nil {
			return id, err
		}
		if ok, err := m.inHistory(w.Name, id); err != nil {
			return id, err
		} else if !ok {
			return id, fmt.Errorf("%w: generation %s is not in %s's history", ErrInvalidInput, id.Short(), w.Name)
		}
		return id, nil
	}
	if ValidateName(ref) == nil {
		w, err := m.st.GetWorkspace(ref)
		if err == nil {
			return w.Head, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return store.ID{}, err
		}
	}
	id, err := m.st.ResolveGeneration(ref)
	if err != nil {
		if errors.Is(err, store.ErrInvalidID) || errors.Is(err, store.ErrNotFound) {
			return id, fmt.Errorf("%w: %q is neither a workspace nor a generation", ErrUnknownWorkspace, ref)
		}
		if errors.Is(err, store.ErrAmbiguous) {
			return id, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		return id, err
	}
	return id, nil
}

func (m *Manager) inHistory(name string, gen store.ID) (bool, error) {
	log, err := m.st.HeadLog(name, 0)
	if err != nil {
		return false, err
	}
	for _, e := range log {
		if e.Gen == gen {
			return true, nil
		}
	}
	return false, nil
}

func cut(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
