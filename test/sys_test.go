package test

import (
	"golang.org/x/sys/unix"
)

type pollFd = unix.PollFd

func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

func poll(fds []unix.PollFd, ms int) int {
	for {
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1
		}
		return n
	}
}
