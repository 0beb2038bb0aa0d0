package store

import "sync/atomic"

// failpointFn is the crash-test hook: when set, durable-write steps call it
// with the step's name and abort with its error. Names in use:
//
//	blob.before-fsync     temp blob written, not yet synced
//	blob.before-rename    temp blob synced, not yet renamed into objects/
//	blob.before-dirsync   renamed, fan-out directory not yet synced
//	batch.before-sync     batch commit: before the syncfs
//	batch.before-rename   batch commit: after the syncfs, before renames
//	tree.put              inside the tree transaction, before commit
//	generation.put        inside the generation transaction, before commit
//	head.append           inside the head-append transaction, before commit
//	gc.before-sweep       marks computed, nothing deleted yet
type failpointFn func(name string) error

var failpoint atomic.Pointer[failpointFn]

// SetFailpoint installs fn as the crash-test hook for every Store in the
// process (nil removes it) and returns the previous hook. Test-only: it
// exists so tests in other packages can stop a durable write between its
// steps and check what survives.
func SetFailpoint(fn func(name string) error) (previous func(name string) error) {
	var p *failpointFn
	if fn != nil {
		f := failpointFn(fn)
		p = &f
	}
	old := failpoint.Swap(p)
	if old == nil {
		return nil
	}
	return *old
}

// fail returns the hook's verdict for step name.
func fail(name string) error {
	if p := failpoint.Load(); p != nil {
		return (*p)(name)
	}
	return nil
}
