package daemon

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// Background resolution of git object references.
//
// A workspace made by `create --from-git` names its files by git object
// references; until resolved, each read takes the content from the
// repository through the daemon (no passthrough on a stored file). When
// the daemon mounts a workspace whose tree has unresolved ones, it
// resolves them in the background (workspace.ResolveGitRefs), once the
// metadata warm-up has ended: one cat-file stream at nice 19, chunk by
// chunk, each chunk's blobs synced once and its resolutions recorded in
// one transaction. Reads meanwhile work
// from the repository as before; a file opened after its chunk is
// recorded is served from the stored blob (passthrough). The
// resolution waits while the daemon reconciles (holdBackground), stops
// at unmount (the chunk in flight is dropped, nothing of it recorded),
// and a crash loses at most that chunk: the next mount finds what is
// still unresolved and goes on.

// gitResolver is a Mount's background resolution.
type gitResolver struct {
	mu     sync.Mutex
	cond   *sync.Cond
	held   int // holdBackground calls not yet released: no new chunk starts
	cancel context.CancelFunc
	done   chan struct{} // closed when the resolution has ended (nil: never started)

	counted         atomic.Bool // the references were counted (the resolution began)
	total, resolved atomic.Int64
	bytes           atomic.Int64
	started         time.Time
	finished        atomic.Int64 // Unix ms when it ended with every reference resolved (0: not yet)
	failed          atomic.Pointer[string]
}

// GitRefStatus is status's view of a mount's background resolution.
type GitRefStatus struct {
	// Total counts the distinct unresolved git object references the
	// mount's tree had when the resolution began; Resolved how many of
	// them it resolved so far (Total-Resolved remain), Bytes the bytes
	// it read from the repository.
	Total, Resolved int64
	Bytes           int64
	Running         bool
	Started         time.Time
	// Finished is when every reference was resolved (zero: not yet).
	Finished time.Time
	// Error is why the resolution stopped short (a repository that lost
	// an object, a full store); unresolved files keep reading from git.
	Error string
}

// startGitResolve begins the background resolution of root's git object
// references. A store whose blobs live on a remote has none (its imports
// are eager); an in-place workspace has none either.
func (s *Mount) startGitResolve(root store.ID) {
	if s.inPlace || s.d.m.Store().HasRemote() || !hasGitDir(s.d.m.Store(), root) {
		return // references come from create --from-git: its trees have .git
	}
	r := &s.resolve
	ctx, cancel := context.WithCancel(context.Background())
	r.mu.Lock()
	r.cond = sync.NewCond(&r.mu)
	r.cancel = cancel
	r.done = make(chan struct{})
	r.started = time.Now()
	r.mu.Unlock()
	go func() {
		defer close(r.done)
		defer cancel()
		// After the metadata warm-up: it is what the first tool in the
		// mount (git status) waits for.
		if w, ok := s.view.(interface{ WaitWarm() }); ok {
			warmed := make(chan struct{})
			go func() { w.WaitWarm(); close(warmed) }() // returns at the warm-up's end or the unmount
			select {
			case <-warmed:
			case <-ctx.Done():
				return
			}
		}
		p, err := s.d.m.ResolveGitRefs(ctx, root, workspace.GitResolveOptions{
			Streams:    1, // one core for git's inflate, the other for the tools in the mount
			Background: true,
			Wait:       r.wait,
			Progress: func(p workspace.GitResolveProgress) {
				r.total.Store(int64(p.Total))
				r.resolved.Store(int64(p.Resolved))
				r.bytes.Store(p.Bytes)
				r.counted.Store(true)
			},
		})
		switch {
		case err == nil:
			r.finished.Store(time.Now().UnixMilli())
			if p.Total > 0 {
				s.d.logger.Printf("%s: resolved %d git object references (%d bytes) in %v", s.ws, p.Total, p.Bytes, time.Since(r.started).Round(time.Millisecond))
			}
		case errors.Is(err, context.Canceled):
			s.d.logger.Printf("%s: git object references: stopped after %d of %d (the next mount goes on)", s.ws, p.Resolved, p.Total)
		default:
			msg := err.Error()
			r.failed.Store(&msg)
			s.d.logger.Printf("%s: git object references: %d of %d resolved: %v", s.ws, p.Resolved, p.Total, err)
		}
	}()
}

// wait returns when no hold is in place (or ctx is done).
func (r *gitResolver) wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.held > 0 && ctx.Err() == nil {
		r.cond.Wait()
	}
	return ctx.Err()
}

// hold keeps new chunks from starting until release.
func (r *gitResolver) hold() (release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cond == nil {
		return func() {}
	}
	r.held++
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.held--
			r.cond.Broadcast()
			r.mu.Unlock()
		})
	}
}

// stopGitResolve cancels the background resolution and waits for it.
func (s *Mount) stopGitResolve() {
	r := &s.resolve
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// holdBackground pauses the mount's background work (the metadata
// warm-up, the resolution of git object references) until release: the
// daemon holds it while it reconciles, so that they do not compete with
// a lease's end for the CPU and the overlay.
func (s *Mount) holdBackground() (release func()) {
	w := s.view.HoldWarm()
	g := s.resolve.hold()
	return func() { g(); w() }
}

// gitRefStatus is the resolution's status (nil: none ran).
func (s *Mount) gitRefStatus() *GitRefStatus {
	r := &s.resolve
	r.mu.Lock()
	done, started := r.done, r.started
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	st := &GitRefStatus{Total: r.total.Load(), Resolved: r.resolved.Load(), Bytes: r.bytes.Load(), Started: started}
	select {
	case <-done:
	default:
		st.Running = true
	}
	if r.failed.Load() == nil && (!r.counted.Load() || st.Total == 0) {
		return nil // not counted yet (the warm-up runs), or nothing was unresolved
	}
	if ms := r.finished.Load(); ms != 0 {
		st.Finished = time.UnixMilli(ms)
	}
	if e := r.failed.Load(); e != nil {
		st.Error = *e
	}
	return st
}
