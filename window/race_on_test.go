//go:build race

package window_test

// raceEnabled scales contended tests down: the race detector makes each of
// the 32 goroutines' synchronisations an order of magnitude slower.
const raceEnabled = true
