package main

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
