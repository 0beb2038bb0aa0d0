package testport

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestTakeIsOutsideTheEphemeralRangeAndFree(t *testing.T) {
	elo, ehi := ephemeral()
	lo, hi := Range()
	ports := Take(t, 40)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < lo || p > hi {
			t.Errorf("port %d outside %d-%d", p, lo, hi)
		}
		if hi-lo < 65535-10000 && p >= elo && p <= ehi {
			t.Errorf("port %d inside the ephemeral range %d-%d", p, elo, ehi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
	// A second taker in this process gets none of them.
	for _, p := range Take(t, 40) {
		if seen[p] {
			t.Fatalf("port %d reserved twice in one process", p)
		}
	}
}

// TestReservedAcrossProcesses: a port held here is refused to another
// test process (a child running this test binary), and given out again
// once released.
func TestReservedAcrossProcesses(t *testing.T) {
	if os.Getenv("TESTPORT_CHILD") != "" {
		return
	}
	ports, release, err := take(1)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := lockDir()
	if err != nil {
		t.Fatal(err)
	}
	tryInChild := func() string {
		t.Helper()
		// flock(1) from util-linux would do; the test binary itself is always there.
		cmd := exec.Command(os.Args[0], "-test.run=TestChildReserve", "-test.v")
		cmd.Env = append(os.Environ(), "TESTPORT_CHILD="+strconv.Itoa(ports[0]), "TESTPORT_DIR="+dir)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	if out := tryInChild(); !strings.Contains(out, "reserve=false") {
		t.Fatalf("another process reserved port %d while it was held:\n%s", ports[0], out)
	}
	release()
	if out := tryInChild(); !strings.Contains(out, "reserve=true") {
		t.Fatalf("another process could not reserve port %d after its release:\n%s", ports[0], out)
	}
}

func TestChildReserve(t *testing.T) {
	v := os.Getenv("TESTPORT_CHILD")
	if v == "" {
		t.Skip("run by TestReservedAcrossProcesses")
	}
	p, _ := strconv.Atoi(v)
	f, ok := reserve(os.Getenv("TESTPORT_DIR"), p)
	if ok {
		f.Close()
	}
	t.Logf("reserve=%v", ok)
}

func TestBindFailed(t *testing.T) {
	if !BindFailed("listen tcp 127.0.0.1:39257: bind: address already in use") {
		t.Error("weed's bind failure not recognised")
	}
	if BindFailed("connection refused") {
		t.Error("a refused connection taken for a bind failure")
	}
}
