package main

import "testing"

func TestStartsDaemon(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"mount", "ws", "/mp"}, true},
		{[]string{"--store", "/s", "mount", "ws", "/mp"}, true},
		{[]string{"mount", "ws", "/mp", "--foreground"}, false},
		{[]string{"context", "mount", "ctx"}, true},
		{[]string{"--store", "context", "context", "mount", "ctx"}, true},
		{[]string{"--json", "context", "mount", "ctx"}, true},
		{[]string{"--store", "mount", "context", "list"}, false},
		{[]string{"context", "unmount", "ctx"}, false},
		{[]string{"context"}, false},
		{[]string{"unmount", "/mp"}, false},
		{nil, false},
	} {
		if got := startsDaemon(scanArgs(c.args)); got != c.want {
			t.Errorf("startsDaemon(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
