package uring

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
)

// paramPath is the fuse module's switch for io_uring.
const paramPath = "/sys/module/fuse/parameters/enable_uring"

// Available reports whether this kernel serves FUSE over io_uring.
func Available() error {
	b, err := os.ReadFile(paramPath)
	if err != nil {
		return fmt.Errorf("%w: %s: %v (needs Linux 6.14 or later)", ErrUnavailable, paramPath, err)
	}
	if v := strings.TrimSpace(string(b)); v != "Y" && v != "1" {
		return fmt.Errorf("%w: %s is %s (as root: echo 1 > %s)", ErrUnavailable, paramPath, v, paramPath)
	}
	return nil
}

// TurnOn turns the fuse module's enable_uring on where it exists and
// the caller may write it (root), then reports Available. The switch
// only lets FUSE servers that ask for io_uring have it.
// A process that turns it on should call Restore before it exits:
// the parameter is the whole machine's.
func TurnOn() error {
	if Available() == nil {
		return nil
	}
	if os.WriteFile(paramPath, []byte("1"), 0o644) == nil {
		turnedOn.Store(true)
	}
	return Available()
}

// turnedOn records that TurnOn changed the parameter.
var turnedOn atomic.Bool

// Restore turns enable_uring off again if TurnOn of this process
// turned it on (a machine where it was on stays so).
func Restore() error {
	if !turnedOn.Swap(false) {
		return nil
	}
	if err := os.WriteFile(paramPath, []byte("0"), 0o644); err != nil {
		return fmt.Errorf("restore %s: %w", paramPath, err)
	}
	return nil
}
