// Package testport hands loopback TCP ports to the servers tests start
// that cannot be handed a listener (SeaweedFS's weed, a separate process;
// embedded etcd, which binds its own URLs).
//
// Picking a port by listening on port 0 and closing the listener races:
// the kernel hands the same ephemeral port to the next process that
// connects or listens on port 0 — and `go test ./...` runs many packages'
// tests at once, each with etcd clients, S3 clients and servers. A port
// from here is
//
//   - outside the kernel's ephemeral range (ip_local_port_range), so no
//     connect(2) and no listen on port 0 anywhere on the machine is given
//     it;
//   - reserved across processes by a lock on a file named after it (an
//     flock, so a crashed test process releases it), held until the test
//     ends, so two test processes that both use this package never pick
//     the same one;
//   - free when taken (a listen on it succeeded).
//
// A server may still fail to bind if a process that does not use this
// package took the port explicitly; callers retry their start with fresh
// ports on a bind failure (weedtest and etcdtest do, bounded, and log it).
package testport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// ErrExhausted is returned when no port of the range could be reserved.
var ErrExhausted = errors.New("testport: no free port left in the range")

// Take reserves n free loopback ports for the rest of the test.
func Take(t testing.TB, n int) []int {
	t.Helper()
	ports, release, err := take(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return ports
}

// One reserves one free loopback port for the rest of the test.
func One(t testing.TB) int {
	t.Helper()
	return Take(t, 1)[0]
}

// Range is the range ports are taken from: [lo, hi]. It lies below the
// kernel's ephemeral range when there is room there, else above it.
func Range() (lo, hi int) {
	elo, ehi := ephemeral()
	const floor = 10000 // below it live the well-known and registered servers a machine runs
	if elo-floor >= 2000 {
		return floor, elo - 1
	}
	if 65535-ehi >= 2000 {
		return ehi + 1, 65535
	}
	// No room outside it: the range itself, still reserved across processes.
	return floor, 65535
}

// ephemeral reads the kernel's ephemeral port range (Linux's default if
// it cannot).
func ephemeral() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l <= 0 || h < l || h > 65535 {
		return lo, hi
	}
	return l, h
}

// lockDir is where the reservation files live, one directory per user so
// that a test run as another user cannot be refused by the first one's files.
func lockDir() (string, error) {
	d := filepath.Join(os.TempDir(), fmt.Sprintf("acyclicfs-testport-%d", os.Getuid()))
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("testport: %w", err)
	}
	return d, nil
}

func take(n int) (ports []int, release func(), err error) {
	dir, err := lockDir()
	if err != nil {
		return nil, nil, err
	}
	var held []*os.File
	release = func() {
		for _, f := range held {
			f.Close() // closing the descriptor drops the flock
		}
		held = nil
	}
	lo, hi := Range()
	span := hi - lo + 1
	start := rand.IntN(span)
	for i := 0; i < span && len(ports) < n; i++ {
		p := lo + (start+i)%span
		f, ok := reserve(dir, p)
		if !ok {
			continue
		}
		held = append(held, f)
		ports = append(ports, p)
	}
	if len(ports) < n {
		release()
		return nil, nil, fmt.Errorf("%w: wanted %d in %d-%d", ErrExhausted, n, lo, hi)
	}
	return ports, release, nil
}

// reserve locks port p's file and checks that the port is free; the open
// file holds the reservation.
func reserve(dir string, p int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		f.Close()
		return nil, false
	}
	l.Close()
	return f, true
}

// BindFailed reports whether a server's log or error says it could not
// bind its address: the one failure a start retries with fresh ports.
func BindFailed(s string) bool {
	return strings.Contains(s, "address already in use")
}
