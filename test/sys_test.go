package test

import (
	"time"

	"golang.org/x/sys/unix"
)

type pollFd = unix.PollFd

func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

// poll is poll(2) with a timeout of ms milliseconds in all: an EINTR (the
// Go runtime preempts with signals) retries with what is left of it, not
// the whole timeout again, or a process that never exits (a killed FUSE
// server stuck in the kernel) would be waited for forever.
func poll(fds []unix.PollFd, ms int) int {
	deadline := time.Now().Add(time.Duration(ms) * time.Millisecond)
	for {
		left := max(time.Until(deadline).Milliseconds(), 0)
		n, err := unix.Poll(fds, int(left))
		if err == unix.EINTR {
			if left == 0 {
				return 0
			}
			continue
		}
		if err != nil {
			return -1
		}
		return n
	}
}
