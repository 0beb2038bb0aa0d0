package workspace

import "sync"

// dirLocks is a mutex per in-place workspace: syncs and materializations
// of one directory are serialized (one DIR, one writer), and different
// directories proceed concurrently. An entry lives while someone holds or
// waits for it, so the map holds only directories in use.
type dirLocks struct {
	mu sync.Mutex // protects m
	m  map[string]*dirLock
}

type dirLock struct {
	mu    sync.Mutex
	users int // holders and waiters; guarded by dirLocks.mu
}

// lock locks key's mutex and returns its unlock.
func (l *dirLocks) lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*dirLock{}
	}
	e := l.m[key]
	if e == nil {
		e = &dirLock{}
		l.m[key] = e
	}
	e.users++
	l.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		l.mu.Lock()
		if e.users--; e.users == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}

// held reports whether key's mutex is held or waited for (tests).
func (l *dirLocks) held(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[key] != nil
}
