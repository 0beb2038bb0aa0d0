package daemon

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// daemonGCSlack bounds how far the heap may grow past its live size
// before the collector runs, once the live heap is large enough that
// daemonGCPercent would allow more (above 8 MiB live): the percent is
// lowered to keep the growth at this many bytes, down to
// daemonGCMinPercent (100, Go's default) for a live heap above 32 MiB,
// where the growth is the live size. At daemonGCPercent alone the
// resident size followed five times the live heap: 8 mounts under load
// (untar, git commit, land, three rounds) grew the daemon from 56 to
// 682 MB.
const (
	daemonGCSlack      = 32 << 20
	daemonGCMinPercent = 100
)

// gcPercentFor is the GC percent the daemon uses for a live heap of
// live bytes: daemonGCPercent while the growth it allows stays within
// daemonGCSlack, then less, never under daemonGCMinPercent.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return daemonGCPercent
	}
	p := int(min(uint64(daemonGCSlack)*100/live, daemonGCPercent))
	return max(p, daemonGCMinPercent)
}

// gcSentinel is allocated for its finalizer, which runs once per
// collection (it has a pointer so that it is not batched by the tiny
// allocator).
type gcSentinel struct{ _ *byte }

// tuneGC sets the GC percent after every collection from the live heap
// it found (gcPercentFor), for the daemon's life. It is called only when
// the user set no GOGC.
func tuneGC() {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := daemonGCPercent
	var arm func()
	arm = func() {
		runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) {
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				if p := gcPercentFor(sample[0].Value.Uint64()); p != current {
					current = p
					debug.SetGCPercent(p)
				}
			}
			arm()
		})
	}
	arm()
}
