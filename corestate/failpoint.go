package corestate

import (
	"fmt"
	"sync/atomic"
)

// failpoint, when set, is consulted between the durable steps of a write so
// tests can stop the sequence exactly there, as a crash would. Steps:
// "record.after-next", "record.after-rotate", "tx.after-prepare",
// "tx.after-apply-N" (N = writes applied so far, from 1) and
// "tx.after-commit". An atomic pointer keeps concurrent tests race-free.
var failpoint atomic.Pointer[func(step string) error]

// injectedCrash marks an error produced by a failpoint. Commit does not try
// to repair in place after one, because the point of the failpoint is to
// leave the disk exactly as a crash would.
type injectedCrash struct{ err error }

func (c injectedCrash) Error() string { return fmt.Sprintf("corestate: injected crash: %v", c.err) }
func (c injectedCrash) Unwrap() error { return c.err }

// SetFailpointForTest installs fn as the crash-point hook and returns a
// function restoring the previous hook. It is for tests only: production code
// must never call it. When fn returns a non-nil error at a step, the
// operation returns that error (wrapped) immediately, leaving files as a
// crash at that point would; reopen the store (or call Recover) to continue.
// The hook is process-global, so tests using it must not run in parallel.
func SetFailpointForTest(fn func(step string) error) (restore func()) {
	var p *func(string) error
	if fn != nil {
		p = &fn
	}
	old := failpoint.Swap(p)
	return func() { failpoint.Store(old) }
}

func hit(step string) error {
	p := failpoint.Load()
	if p == nil {
		return nil
	}
	if err := (*p)(step); err != nil {
		return injectedCrash{err: fmt.Errorf("at %s: %w", step, err)}
	}
	return nil
}
