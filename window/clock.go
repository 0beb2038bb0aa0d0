package window

import (
	"sync/atomic"
	"time"
)

// Clock supplies the time leases are measured against, in Unix epoch
// milliseconds. Injectable so tests control expiry without sleeping.
type Clock interface {
	NowMillis() int64
}

// SystemClock is the wall clock.
type SystemClock struct{}

// NowMillis returns the current Unix time in milliseconds.
func (SystemClock) NowMillis() int64 { return time.Now().UnixMilli() }

// ManualClock is a Clock that only moves when told to. It is safe for
// concurrent use.
type ManualClock struct {
	ms atomic.Int64
}

// NewManualClock returns a clock reading startMillis.
func NewManualClock(startMillis int64) *ManualClock {
	c := &ManualClock{}
	c.ms.Store(startMillis)
	return c
}

// NowMillis returns the clock's current reading.
func (c *ManualClock) NowMillis() int64 { return c.ms.Load() }

// Set moves the clock to ms (possibly backwards).
func (c *ManualClock) Set(ms int64) { c.ms.Store(ms) }

// Advance moves the clock forward by d, truncated to milliseconds.
func (c *ManualClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }
