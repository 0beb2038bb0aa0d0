package corestate

import (
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkAcquireRelease is the uncontended cost of one record lock:
// what every Commit pays per record it writes.
func BenchmarkAcquireRelease(b *testing.B) {
	p := filepath.Join(b.TempDir(), "r.lock")
	for b.Loop() {
		l, err := acquireLock(p, time.Second, time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		l.release(false)
	}
}
