package workspace

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/internal/gitrepo"
	"github.com/acyclicfs/acyclicfs/store"
)

// Resolving git object references.
//
// `create --from-git` names every file by a git object reference (a blob
// of the repository, by object name) instead of reading it. Until the
// reference is resolved, every read of the file takes its content from
// the repository through the daemon; once resolved (store.ResolveMany:
// reference → stored blob, the baseref-resolved records), reads use the
// stored blob like any other, passthrough included. ResolveGitRefs does
// it for a whole tree, in chunks: each chunk's blobs are read by cat-file
// into one BlobBatch, committed (one sync for the chunk), and only then
// its resolutions recorded in one metadata transaction. A chunk is the
// unit of progress: cancelled or killed mid-chunk, nothing is recorded
// of it (its blobs are unreferenced files GC sweeps, or the next run
// finds and reuses); what was recorded stays resolved, and the next run
// starts from what is left.

// GitResolveProgress is how far a ResolveGitRefs got.
type GitResolveProgress struct {
	Total    int   // distinct unresolved git object references found at the start
	Resolved int   // of them, resolved so far
	Missing  int   // of them, left unresolved: their repository lacks the object
	Bytes    int64 // bytes read from the repositories so far
}

// GitResolveOptions tune ResolveGitRefs.
type GitResolveOptions struct {
	// Streams is how many cat-file processes read at once (0: one per
	// CPU, as the eager import). The daemon's background resolution
	// uses one, leaving the other cores to the tools in the mount.
	Streams int
	// Background runs git at the lowest CPU priority (nice 19): the
	// daemon's resolution yields to the tools in the mount.
	Background bool
	// Wait, when set, is called before each chunk and returns when the
	// chunk may start (the daemon holds its background work while it
	// reconciles), or an error (the context's) to stop.
	Wait func(ctx context.Context) error
	// Progress, when set, is called once the references are counted and
	// after every chunk recorded.
	Progress func(GitResolveProgress)
}

// A chunk of ResolveGitRefs is bounded by references and by bytes: the
// first holds gitResolveFirst references, each next one twice as many up
// to gitResolveChunk, so that the first files are served from the store
// soon after the mount, while the sync a chunk costs is paid rarely (the
// Go tree, about 12,000 files: 8 chunks); small enough that a cancelled
// chunk loses little.
const (
	gitResolveFirst      = 64
	gitResolveChunk      = 4096
	gitResolveChunkBytes = 64 << 20
)

// UnresolvedGitRefs counts the distinct git object references in tree
// root that are not resolved yet.
func (m *Manager) UnresolvedGitRefs(root store.ID) (int, error) {
	refs, err := m.gn.unresolvedGitRefs(root)
	return len(refs), err
}

// ResolveGitRefs resolves every git object reference in tree root to a
// stored blob (see "Resolving git object references" above). A store
// whose blobs live on a remote has none to resolve (its imports are
// eager). An object its repository lost is left unresolved and the rest
// resolved; the error then wraps store.ErrBaseChanged and names it.
func (m *Manager) ResolveGitRefs(ctx context.Context, root store.ID, opt GitResolveOptions) (GitResolveProgress, error) {
	return m.gn.resolveGitRefs(ctx, root, opt)
}

// unresolvedGitRefs walks tree root and returns its unresolved git object
// references, in the order first met (depth first, entries sorted: files
// of a directory together, as the import listed them).
func (m *gitNative) unresolvedGitRefs(root store.ID) ([]gitRefTodo, error) {
	var ids []store.ID
	seen := map[store.ID]bool{}
	var walk func(tree store.ID) error
	walk = func(tree store.ID) error {
		t, err := m.st.GetTree(tree)
		if err != nil {
			return fmt.Errorf("tree %s: %w", tree.Short(), err)
		}
		for _, e := range t.Entries {
			switch e.Kind {
			case store.KindDir:
				if !seen[e.ID] {
					seen[e.ID] = true
					if err := walk(e.ID); err != nil {
						return err
					}
				}
			case store.KindFile, store.KindExec, store.KindSymlink:
				if !seen[e.ID] {
					seen[e.ID] = true
					ids = append(ids, e.ID)
				}
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}
	refs, err := m.st.UnresolvedGitRefs(ids)
	if err != nil {
		return nil, err
	}
	out := make([]gitRefTodo, 0, len(refs))
	for _, id := range ids {
		if r, ok := refs[id]; ok {
			out = append(out, gitRefTodo{id: id, ref: r})
		}
	}
	return out, nil
}

// gitRefTodo is an unresolved git object reference.
type gitRefTodo struct {
	id  store.ID
	ref store.BaseRef
}

func (m *gitNative) resolveGitRefs(ctx context.Context, root store.ID, opt GitResolveOptions) (GitResolveProgress, error) {
	var p GitResolveProgress
	todo, err := m.unresolvedGitRefs(root)
	if err != nil {
		return p, fmt.Errorf("resolve git refs: %w", err)
	}
	p.Total = len(todo)
	if opt.Progress != nil {
		opt.Progress(p)
	}
	// By repository, then in tree order within each.
	slices.SortStableFunc(todo, func(a, b gitRefTodo) int { return bytes.Compare(a.ref.Base[:], b.ref.Base[:]) })
	streams := opt.Streams
	if streams <= 0 {
		streams = catStreams
	}
	repos := map[store.ID]*gitrepo.Repo{}
	var firstLost string
	limit := gitResolveFirst
	for lo := 0; lo < len(todo); {
		hi, size := lo, int64(0)
		for hi < len(todo) && hi-lo < limit && (hi == lo || size+todo[hi].ref.Size <= gitResolveChunkBytes) &&
			todo[hi].ref.Base == todo[lo].ref.Base {
			size += todo[hi].ref.Size
			hi++
		}
		if opt.Wait != nil {
			if err := opt.Wait(ctx); err != nil {
				return p, err
			}
		}
		if err := ctx.Err(); err != nil {
			return p, err
		}
		base := todo[lo].ref.Base
		repo, ok := repos[base]
		if !ok {
			dir, err := m.st.BaseDirPath(base)
			if err != nil {
				return p, fmt.Errorf("resolve git refs: %w", err)
			}
			if repo, err = gitrepo.At(dir); err != nil {
				return p, fmt.Errorf("resolve git refs: %w: %w", store.ErrBaseChanged, err)
			}
			repo.Background = opt.Background
			repos[base] = repo
		}
		n, lost, err := m.resolveGitChunk(ctx, repo, todo[lo:hi], streams)
		if err != nil {
			return p, err
		}
		if len(lost) > 0 && firstLost == "" {
			firstLost = lost[0]
		}
		p.Missing += len(lost)
		p.Resolved += hi - lo - len(lost)
		p.Bytes += n
		if opt.Progress != nil {
			opt.Progress(p)
		}
		failpoint.Hit("gitresolve.after-chunk")
		lo, limit = hi, min(2*limit, gitResolveChunk)
	}
	if p.Missing > 0 {
		return p, fmt.Errorf("resolve git refs: %w: %d objects are missing from their repository (%s first); those files stay unresolved", store.ErrBaseChanged, p.Missing, firstLost)
	}
	return p, nil
}

// resolveGitChunk reads chunk's objects from repo into one batch,
// commits it (one sync) and records the resolutions (one transaction).
func (m *gitNative) resolveGitChunk(ctx context.Context, repo *gitrepo.Repo, chunk []gitRefTodo, streams int) (int64, []string, error) {
	defer m.st.HoldGC()() // the blobs are unreferenced until their resolutions are recorded
	oids := make([]string, 0, len(chunk))
	for _, t := range chunk {
		oids = append(oids, t.ref.Git)
	}
	// An object the repository lost must not keep the rest of its chunk
	// from being resolved: it is left out (and stays unresolved, failing
	// its reads and fsck as before).
	lost, err := repo.Missing(ctx, oids)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		return 0, nil, fmt.Errorf("resolve git refs of %s: %w", repo.GitDir, err)
	}
	if len(lost) > 0 {
		gone := make(map[string]bool, len(lost))
		for _, o := range lost {
			gone[o] = true
		}
		oids = slices.DeleteFunc(oids, func(o string) bool { return gone[o] })
		chunk = slices.DeleteFunc(slices.Clone(chunk), func(t gitRefTodo) bool { return gone[t.ref.Git] })
	}
	batch := m.st.NewBlobBatch()
	if len(oids) == 0 {
		return 0, lost, nil
	}
	ids, n, err := m.readGitBlobs(ctx, repo, batch, oids, streams, 2, true)
	if err != nil {
		batch.Abort()
		if ctx.Err() != nil {
			return n, nil, ctx.Err()
		}
		return n, nil, fmt.Errorf("resolve git refs of %s: %w: %w", repo.GitDir, store.ErrBaseChanged, err)
	}
	if err := batch.Commit(); err != nil {
		return n, nil, fmt.Errorf("resolve git refs: store blobs: %w", err)
	}
	failpoint.Hit("gitresolve.before-record")
	rs := make([]store.Resolution, 0, len(chunk))
	for _, t := range chunk {
		id, ok := ids[t.ref.Git]
		if !ok {
			return n, nil, fmt.Errorf("resolve git refs: blob %s of %s not read", t.ref.Git, repo.GitDir)
		}
		rs = append(rs, store.Resolution{Ref: t.id, Target: id})
	}
	if err := m.st.ResolveMany(nil, rs); err != nil {
		return n, nil, fmt.Errorf("resolve git refs: %w", err)
	}
	return n, lost, nil
}
