package daemon

import "testing"

func TestDaemonProcs(t *testing.T) {
	for _, c := range []struct {
		cpus int
		env  string
		want int
	}{
		{2, "", minDaemonProcs},
		{1, "", minDaemonProcs},
		{2, "3", 0}, // the user's choice stands
		{minDaemonProcs, "", 0},
		{64, "", 0},
	} {
		if got := daemonProcs(c.cpus, c.env); got != c.want {
			t.Errorf("daemonProcs(%d, %q) = %d, want %d", c.cpus, c.env, got, c.want)
		}
	}
}

func TestDaemonGC(t *testing.T) {
	for _, c := range []struct {
		gogc, limit string
		ram         uint64
		percent     int
		wantLimit   int64
	}{
		{"", "", 8 << 30, daemonGCPercent, 2 << 30},
		{"100", "", 8 << 30, 0, 2 << 30}, // the user's GOGC stands
		{"", "1GiB", 8 << 30, daemonGCPercent, 0},
		{"off", "1GiB", 8 << 30, 0, 0},
		{"", "", 0, daemonGCPercent, 0}, // memory unknown: no limit
	} {
		p, l := daemonGC(c.gogc, c.limit, c.ram)
		if p != c.percent || l != c.wantLimit {
			t.Errorf("daemonGC(%q, %q, %d) = %d, %d; want %d, %d", c.gogc, c.limit, c.ram, p, l, c.percent, c.wantLimit)
		}
	}
	if totalRAM() == 0 {
		t.Error("sysinfo reports no memory")
	}
}

// TestGCPercentFor: the daemon's GC percent stays daemonGCPercent while
// the heap's growth past its live size fits daemonGCSlack, then keeps the
// growth at the slack, and never goes under daemonGCMinPercent.
func TestGCPercentFor(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, daemonGCPercent},
		{1 << 20, daemonGCPercent},
		{daemonGCSlack * 100 / daemonGCPercent, daemonGCPercent},
		{daemonGCSlack, 100},
		{daemonGCSlack / 2, 200},
		{4 * daemonGCSlack, daemonGCMinPercent},
	} {
		if got := gcPercentFor(c.live); got != c.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
		if g := gcPercentFor(c.live); c.live > 0 && uint64(g)*c.live/100 > max(daemonGCSlack, c.live*daemonGCMinPercent/100) {
			t.Errorf("live %d MiB: growth %d MiB past the slack", c.live>>20, uint64(g)*c.live/100>>20)
		}
	}
}
