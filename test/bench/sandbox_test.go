package main

import (
	"strings"
	"testing"
	"time"
)

// TestSandboxMarkdown: the ready-sandbox goal is judged on the median of
// the per-run totals, each row names its steps, and a failure is shown.
func TestSandboxMarkdown(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		total []time.Duration
		want  string
	}{
		{[]time.Duration{90 * ms, 140 * ms, 400 * ms}, "≤ 150.0 ms: 140.0 ms — met"},
		{[]time.Duration{90 * ms, 160 * ms, 170 * ms}, "≤ 150.0 ms: 160.0 ms — **not met**"},
	} {
		r := &results{sandbox: &sandboxResult{files: 11481, total: c.total,
			fork: []time.Duration{9 * ms}, mount: []time.Duration{30 * ms}, status: []time.Duration{50 * ms}, gitStatus: []time.Duration{20 * ms},
			worktree: []time.Duration{900 * ms}, worktreeStatus: []time.Duration{40 * ms}, cp: []time.Duration{1500 * ms}, cpStatus: []time.Duration{300 * ms},
			dirty: []int{0, 0, 0}}}
		var b strings.Builder
		r.sandboxMarkdown(&b)
		out := b.String()
		for _, w := range []string{c.want, "11481 files", "| git worktree add --detach | 900.0 ms |", "| 940.0 ms |", "| cp -a | 1.50 s |", "Dirty lines (every status): 0"} {
			if !strings.Contains(out, w) {
				t.Errorf("report lacks %q:\n%s", w, out)
			}
		}
	}
	r := &results{sandbox: &sandboxResult{err: "fork: boom"}}
	var b strings.Builder
	r.sandboxMarkdown(&b)
	if out := b.String(); !strings.Contains(out, "failed: `fork: boom`") || strings.Contains(out, "| acyclicfs |") {
		t.Errorf("a failed measurement:\n%s", b.String())
	}
}
