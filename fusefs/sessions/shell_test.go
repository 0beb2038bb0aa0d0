package sessions

import (
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadsCommandsFromStdin(t *testing.T) {
	for cmdline, want := range map[string]bool{
		"bash":                         true,
		"-bash":                        true, // a login shell
		"/bin/bash --noprofile --norc": true,
		"bash -i":                      true,
		"bash -s arg1 arg2":            true,
		"sh -es":                       true,
		"zsh -o pipefail":              true,
		"bash --rcfile x.rc":           true,
		"bash -c echo":                 false,
		"sh -ec set":                   false,
		"bash script.sh":               false,
		"bash -- script.sh":            false,
		"bash --":                      true,
		"python3":                      false,
		"make -j2":                     false,
		"":                             false,
	} {
		b := []byte(strings.ReplaceAll(cmdline, " ", "\x00") + "\x00")
		if got := readsCommandsFromStdin(b); got != want {
			t.Errorf("readsCommandsFromStdin(%q) = %v, want %v", cmdline, got, want)
		}
	}
}

func TestWaitsOnStdin(t *testing.T) {
	read, poll := strconv.Itoa(unix.SYS_READ), strconv.Itoa(unix.SYS_PSELECT6)
	tty := func() bool { return true }
	noTTY := func() bool { return false }
	for _, c := range []struct {
		sc   string
		tty  func() bool
		want bool
	}{
		{read + " 0x0 0x7ffc 0x1 0x0 0x0 0x0 0x7ffc 0x7f00\n", noTTY, true},
		{read + " 0x3 0x7ffc 0x1 0x0 0x0 0x0 0x7ffc 0x7f00\n", noTTY, false}, // another fd
		{poll + " 0x1 0x7ffc 0x0 0x0 0x0 0x0 0x7ffc 0x7f00\n", tty, true},
		{poll + " 0x1 0x7ffc 0x0 0x0 0x0 0x0 0x7ffc 0x7f00\n", noTTY, false},
		{strconv.Itoa(unix.SYS_WAIT4) + " 0xffffffffffffffff 0x7ffc 0x0 0x0 0x0 0x0 0x7ffc 0x7f00\n", tty, false},
		{"running\n", tty, false},
		{"-1 0x7ffc 0x7f00\n", tty, false},
		{"", tty, false},
	} {
		if got := waitsOnStdin([]byte(c.sc), c.tty); got != c.want {
			t.Errorf("waitsOnStdin(%q) = %v, want %v", c.sc, got, c.want)
		}
	}
}
