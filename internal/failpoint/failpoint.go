// Package failpoint lets crash tests stop a real acyclicfs process at a
// named durability step.
//
// A failpoint is armed only by the environment variable
// ACYCLICFS_FAILPOINT=name[,name...] together with ACYCLICFS_FAILPOINT_ARMED=1
// (two variables so that a stray one in a user's shell does nothing). When
// the process reaches an armed point it kills itself with SIGKILL, which is
// what a power cut or an OOM kill looks like to the store: no deferred
// cleanup, no flushes. Hit costs one atomic load when nothing is armed.
package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

var (
	once  sync.Once
	armed atomic.Pointer[map[string]bool]
	// testHook, if set, is called instead of killing the process.
	testHook atomic.Pointer[func(name string)]
)

func load() {
	if os.Getenv("ACYCLICFS_FAILPOINT_ARMED") != "1" {
		return
	}
	set := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("ACYCLICFS_FAILPOINT"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			set[n] = true
		}
	}
	if len(set) > 0 {
		armed.Store(&set)
	}
}

// Hit crashes the process if the failpoint name is armed.
func Hit(name string) {
	once.Do(load)
	set := armed.Load()
	if set == nil || !(*set)[name] {
		return
	}
	if h := testHook.Load(); h != nil {
		(*h)(name)
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not deliverable late; never return past the point
}

// Armed reports whether the failpoint name is armed, for a point whose
// check itself costs something (one atomic load when nothing is armed).
func Armed(name string) bool {
	once.Do(load)
	set := armed.Load()
	return set != nil && (*set)[name]
}

// ErrInjected is what Fail returns at a point armed as NAME=error.
var ErrInjected = errors.New("failpoint: injected error")

// Fail is Hit for steps that can fail without crashing: a point armed as
// "NAME=error" returns an error wrapping ErrInjected (so that the caller's
// error path — a rollback — runs); a point armed as plain "NAME" kills the
// process as Hit does. It returns nil when nothing is armed.
func Fail(name string) error {
	once.Do(load)
	set := armed.Load()
	if set == nil {
		return nil
	}
	if (*set)[name+"=error"] {
		return fmt.Errorf("%w at %s", ErrInjected, name)
	}
	Hit(name)
	return nil
}

// ArmForTest arms names in this process and calls hook instead of killing
// it. It returns a function that disarms everything. Tests only.
func ArmForTest(hook func(name string), names ...string) (disarm func()) {
	once.Do(load)
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	armed.Store(&set)
	testHook.Store(&hook)
	return func() {
		armed.Store(nil)
		testHook.Store(nil)
	}
}
