package main

import (
	"fmt"
	"sync"
	"time"
)

// progressBar draws one self-overwriting status line on stderr, at most ten
// times a second, only when stderr is a terminal (never in the daemon,
// never with --quiet or --json).
type progressBar struct {
	a    *app
	mu   sync.Mutex // protects last and shown
	last time.Time
	// shown is true once a line was drawn (so done() clears it).
	shown bool
}

func (a *app) progress() *progressBar {
	if !a.stderrTTY || a.quiet || a.jsonOut || a.inDaemon {
		return nil
	}
	return &progressBar{a: a}
}

// update is the workspace.Options.Progress callback.
func (p *progressBar) update(what string, done, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.shown = now, true
	if total > 0 {
		fmt.Fprintf(p.a.stderr, "\r\033[K%s: %d/%d files (%d%%)", what, done, total, done*100/total)
	} else {
		fmt.Fprintf(p.a.stderr, "\r\033[K%s: %d files", what, done)
	}
}

// done clears the line.
func (p *progressBar) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.a.stderr, "\r\033[K")
		p.shown = false
	}
}
