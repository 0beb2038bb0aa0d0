package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/corestate"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

func TestExitCodes(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("op: %w", err) }
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("disk on fire"), 1},
		{wrap(store.ErrCorrupt), 1},
		{wrap(syscall.ENOSPC), 1},
		{wrap(workspace.ErrInvalidName), 2},
		{wrap(workspace.ErrUnknownWorkspace), 2},
		{wrap(workspace.ErrInvalidInput), 2},
		{wrap(store.ErrAmbiguous), 2},
		{usageError{errors.New("bad flag")}, 2},
		{errConflictExit, 3},
		{wrap(workspace.ErrConflict), 3},
		{wrap(workspace.ErrBusy), 4},
		{wrap(store.ErrLocked), 4},
		{wrap(corestate.ErrLockTimeout), 4},
		{wrap(cluster.ErrBadConfig), 2},
		{wrap(cluster.ErrConfigDiffers), 2},
		{wrap(cluster.ErrUnreachable), 1},
		{wrap(&cluster.ClaimedError{Held: cluster.Claim{Workspace: "w", Node: "n"}}), 4},
		{exitWith(42), 42},
	}
	for _, c := range cases {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestReportErrorIsOneLineWithHint(t *testing.T) {
	var b bytes.Buffer
	reportError(&b, fmt.Errorf("create x: %w", workspace.ErrInvalidName))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "acyclicfs: create x: ") || !strings.HasPrefix(lines[1], "hint: ") {
		t.Fatalf("reportError wrote %q", b.String())
	}
	b.Reset()
	reportError(&b, errors.New("a\nb"))
	if strings.Count(b.String(), "\n") != 1 {
		t.Fatalf("multi-line error not folded: %q", b.String())
	}
	b.Reset()
	reportError(&b, errConflictExit)
	if b.Len() != 0 {
		t.Fatalf("conflict exit printed %q", b.String())
	}
}

func TestScanArgs(t *testing.T) {
	for args, want := range map[string]string{
		"--store /x list":        "list",
		"--json -q status a":     "status",
		"--store=/x exec m -- l": "exec",
		"--store mount context":  "context",
		"":                       "",
	} {
		if got := scanArgs(strings.Fields(args)).command(); got != want {
			t.Errorf("scanArgs(%q).command() = %q, want %q", args, got, want)
		}
	}
	for args, want := range map[string]string{
		"-q --store /s mount a b":          "/s",
		"--store /a --store=/b list":       "/b",
		"exec /m -- sh --store /elsewhere": "",
		"list --store":                     "",
	} {
		if got := scanArgs(strings.Fields(args)).store; got != want {
			t.Errorf("scanArgs(%q).store = %q, want %q", args, got, want)
		}
	}
	if c := scanArgs(strings.Fields("mount ws /mp --foreground -- --x")); !c.flags["--foreground"] || c.flags["--x"] || len(c.words) != 3 {
		t.Errorf("flags %v words %q", c.flags, c.words)
	}
}

// TestCommandLineErrorsAreUsage: what cobra and pflag refuse (a word that
// is no command, a flag a command lacks, a value that does not parse)
// exits 2 by the errors' types, not their text; bare acyclicfs prints
// help.
func TestCommandLineErrorsAreUsage(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"lsit"}, {"--bogus"}, {"list", "--bogus"}, {"log", "-n", "abc", "x"}, {"status", "--store"}} {
		var out, errb bytes.Buffer
		a := &app{stdout: &out, stderr: &errb, stdin: strings.NewReader(""), cwd: t.TempDir()}
		if code := a.execute(context.Background(), args); code != exitUsage || !strings.HasPrefix(errb.String(), "acyclicfs: ") {
			t.Errorf("%q: exit %d, stderr %q; want exit %d", args, code, errb.String(), exitUsage)
		}
	}
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, stdin: strings.NewReader(""), cwd: t.TempDir()}
	if code := a.execute(context.Background(), nil); code != exitOK || !strings.Contains(out.String(), "Usage:") {
		t.Errorf("bare: exit %d, stdout %q", code, out.String())
	}
}
