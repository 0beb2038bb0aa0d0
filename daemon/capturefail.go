package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acyclicfs/acyclicfs/window"
	"github.com/acyclicfs/acyclicfs/workspace"
)

// A capture that cannot be stored (the store's disk is full, typically)
// must neither wedge the window nor lose the mount's changes. The final
// close that failed still ends its lease (and completes the window's
// reconcile without switching the view), the overlay keeps every change
// (a later capture takes them all), `status` shows the failure, and the
// capture is retried: at the next final close, at unmount, and in the
// background every captureRetryInterval once the store's disk has more
// free space than at the failed attempt (or enough for the estimate).

// captureRetryInterval is how often the background retry looks at the
// store's free space; there is no event for space coming back.
const captureRetryInterval = 2 * time.Second

// maxRetryBackoff bounds the wait between background retries of a
// capture that failed for another reason than space (one more attempt
// per captureRetryInterval waited, up to this).
const maxRetryBackoff = time.Minute

// noSpaceError is a capture that failed for space: it says how much to
// free on which device and what to run then, and names the store and what
// the capture may need. It unwraps to the write's error (ENOSPC).
type noSpaceError struct {
	ws, store    string
	needed, free int64 // needed: an upper bound (the mount's written bytes)
	// then is what to run once space is freed.
	then string
	err  error
}

func (e *noSpaceError) Error() string {
	return fmt.Sprintf("capture %s: store disk full: free %s on %s, then %s: no space left on the store's disk: %s has %s free, the capture needs up to %s (%v)",
		e.ws, toFree(e.needed, e.free), storeDevice(e.store), e.then, e.store, HumanBytes(e.free), HumanBytes(e.needed), e.err)
}

// captureThen is what to do once space is freed for a mount whose
// capture failed: the mount retries by itself; unmount and land retry
// too.
const captureThen = "retry (the mount also retries by itself within 2 s; 'acyclicfs gc' frees what nothing references)"

// toFree is how much to free so that needed bytes fit beside free ones,
// in MiB, rounded up, and one MiB more for the metadata a capture writes
// besides the contents (its trees, the overlay's snapshot).
func toFree(needed, free int64) string {
	n := max(needed-max(free, 0), 0)
	return fmt.Sprintf("%d MiB", (n+(1<<20)-1)>>20+1)
}

// storeDevice names the file system dir lies on, from the mount table:
// "SOURCE (mounted at DIR)", or dir's path when the table cannot be read.
func storeDevice(dir string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return dir
	}
	best, src := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPEROPTS
		f := strings.Fields(line)
		i := slices.Index(f, "-")
		if len(f) < 5 || i < 0 || i+2 >= len(f) {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if (mp == "/" || dir == mp || strings.HasPrefix(dir, mp+"/")) && len(mp) >= len(best) {
			best, src = mp, unescapeMountinfo(f[i+2])
		}
	}
	if best == "" {
		return dir
	}
	return fmt.Sprintf("%s (mounted at %s)", src, best)
}

// unescapeMountinfo undoes the octal escapes of mountinfo's fields.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (e *noSpaceError) Unwrap() error { return e.err }

// HumanBytes is n bytes, e.g. "41943040 bytes (40.0 MiB)".
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d bytes (%.1f GiB)", n, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d bytes (%.1f KiB)", n, float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// isNoSpace reports a write that failed for want of space (or quota).
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// freeBytes is the space an unprivileged writer may still use on dir's
// file system (-1 if unknown).
func freeBytes(dir string) int64 {
	var sf unix.Statfs_t
	if err := unix.Statfs(dir, &sf); err != nil {
		return -1
	}
	return int64(sf.Bavail) * sf.Bsize
}

// captureFailure is the state of a mount whose last capture failed.
type captureFailure struct {
	err      error
	noSpace  bool
	since    time.Time // first failure
	attempts int
	needed   int64
	free     int64     // at the latest attempt
	last     time.Time // the latest attempt
}

// CaptureStatus is status's view of a mount's capture trouble: "failed"
// (its changes are kept in the mount and retried) or "stored" (a retry
// stored them; shown until the next final close).
type CaptureStatus struct {
	State       string `json:"state"`
	Since       string `json:"since"`
	Error       string `json:"error,omitempty"`
	NoSpace     bool   `json:"no_space,omitempty"`
	Store       string `json:"store,omitempty"`
	NeededBytes int64  `json:"needed_bytes,omitempty"`
	FreeBytes   int64  `json:"free_bytes,omitempty"`
	Attempts    int    `json:"attempts"`
}

// noteCaptureFailure records a failed capture and returns the error to
// report (a *noSpaceError for space). The background retry is started.
// Called with s.lock held.
func (s *Mount) noteCaptureFailure(err error) error {
	f := s.failed
	if f == nil {
		f = &captureFailure{since: time.Now()}
		s.failed = f
	}
	f.err, f.noSpace = err, isNoSpace(err)
	f.attempts++
	f.last = time.Now()
	f.free = freeBytes(s.d.dir)
	f.needed = s.view.PendingBytes()
	st := &CaptureStatus{State: "failed", Since: f.since.UTC().Format(time.RFC3339), Error: err.Error(),
		NoSpace: f.noSpace, Store: s.d.dir, Attempts: f.attempts}
	if f.noSpace {
		st.NeededBytes, st.FreeBytes = f.needed, max(f.free, 0)
	}
	err = s.failedErr()
	s.captureState.Store(st)
	s.d.logger.Printf("%s: capture failed (attempt %d; the mount keeps its changes and retries): %v", s.ws, f.attempts, err)
	if !s.retrying {
		s.retrying = true
		go s.retryCaptures()
	}
	return err
}

// failedErr is the error of the recorded failure, as noteCaptureFailure
// returned it. Called with s.lock held, s.failed set.
func (s *Mount) failedErr() error {
	f := s.failed
	if f.noSpace {
		return &noSpaceError{ws: s.ws, store: s.d.dir, needed: f.needed, free: max(f.free, 0), then: captureThen, err: f.err}
	}
	return f.err
}

// noteCaptureStored clears a recorded failure after a capture succeeded.
// Called with s.lock held.
func (s *Mount) noteCaptureStored() {
	f := s.failed
	if f == nil {
		return
	}
	s.failed = nil
	s.captureState.Store(&CaptureStatus{State: "stored", Since: time.Now().UTC().Format(time.RFC3339),
		Error: "stored after failing: " + f.err.Error(), NoSpace: f.noSpace, Store: s.d.dir, Attempts: f.attempts})
	s.d.logger.Printf("%s: capture stored after %d failed attempt(s)", s.ws, f.attempts)
}

// closeAfterFailedCapture is the final close whose capture failed with
// err: the lease ends all the same (its session is gone; keeping it
// would pin the window past its expiry), the window's reconcile is
// completed without switching the view (the overlay holds what the
// capture could not store), and err is returned. Called with s.lock held.
func (s *Mount) closeAfterFailedCapture(lease window.Lease, err error) (workspace.Result, error) {
	ctx := context.Background()
	fin, ferr := s.d.m.Windows().Finish(ctx, lease)
	if ferr != nil {
		// It expires by itself; the retry claims the window then.
		s.d.logger.Printf("%s: close lease %s after a failed capture: %v", s.ws, lease.ID, ferr)
		return workspace.Result{}, err
	}
	r, ok := fin.Reconcile, fin.Outcome == window.FinishReconcile
	if !ok {
		r, ok, ferr = s.d.m.Windows().ClaimReconcile(ctx, s.ws)
		if ferr != nil {
			s.d.logger.Printf("%s: %v", s.ws, ferr)
		}
	}
	if ok {
		// A rebase onto a moved parent moves the head; the capture, when
		// it is stored, merges with it (PublishCapture).
		if _, ferr := s.d.finishTicket(s.ws, r); ferr != nil {
			s.d.logger.Printf("%s: reconcile after a failed capture: %v", s.ws, ferr)
		}
	}
	return workspace.Result{}, err
}

// retryCaptures retries a failed capture in the background while the
// mount is idle, each time the store's disk has more free space than at
// the last attempt (or room for the estimate) — a failure for another
// reason with a growing back-off — until one succeeds or the mount is
// gone. A final close or unmount in between retries by itself.
func (s *Mount) retryCaptures() {
	t := time.NewTicker(captureRetryInterval)
	defer t.Stop()
	for {
		select {
		case <-s.gone:
			return
		case <-t.C:
		}
		if !s.acquire(10 * time.Millisecond) {
			continue // a final close or unmount runs, and captures
		}
		f := s.failed
		if f == nil {
			s.retrying = false
			s.release()
			return
		}
		free := freeBytes(s.d.dir)
		due := f.noSpace && (free > f.free || free >= f.needed) ||
			!f.noSpace && time.Since(f.last) >= min(time.Duration(f.attempts)*captureRetryInterval, maxRetryBackoff)
		if s.closing || len(s.leases) > 0 || !due {
			s.release()
			continue
		}
		s.retryLocked()
		s.release()
	}
}

// retryLocked stores the mount's changes and finishes what the failed
// close left: a window whose lease expired, a view behind the head.
// Called with s.lock held, no lease open.
func (s *Mount) retryLocked() {
	defer s.doing("capture retry")()
	if err := s.captureAndPublish(nil); err != nil {
		return // recorded by captureAndPublish
	}
	ctx := context.Background()
	if r, ok, err := s.d.m.Windows().ClaimReconcile(ctx, s.ws); err == nil && ok {
		if _, err := s.d.finishTicket(s.ws, r); err != nil {
			s.d.logger.Printf("%s: reconcile after the capture retry: %v", s.ws, err)
			return
		}
	}
	if s.inPlace {
		if _, err := s.syncInPlace(); err != nil {
			s.d.logger.Printf("%s: after the capture retry: %v", s.ws, err)
		}
		return
	}
	if w, err := s.d.m.Get(s.ws); err == nil && w.Head != s.pinned {
		if err := s.switchToHead(); err != nil {
			s.d.logger.Printf("%s: after the capture retry: %v", s.ws, err)
		}
	}
}

// Activity is what a mount is busy with, for status.
type Activity struct {
	What  string
	Since time.Time
}

// doing records that the mount is busy with what until the returned
// function is called.
func (s *Mount) doing(what string) func() {
	a := &Activity{What: what, Since: time.Now()}
	prev := s.activity.Swap(a)
	return func() { s.activity.CompareAndSwap(a, prev) }
}
