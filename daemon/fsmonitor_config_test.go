package daemon

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The config block round trip: added to any config, removed again, the
// file is byte for byte what it was; git reads the command back.
func TestFSMonitorConfigBlock(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, ".git", "config")
	exe, store := "/opt/a b/acyc'lic#fs", "/st;ore \"x\""
	for _, before := range []string{"", "[core]\n\tbare = false\n", "[core]\n\tbare = false", "; comment\n[user]\n\tname = x\n"} {
		if err := os.WriteFile(cfg, []byte(before), 0o644); err != nil {
			t.Fatal(err)
		}
		for range 2 { // idempotent
			if err := configureFSMonitor(root, exe, store, true); err != nil {
				t.Fatal(err)
			}
		}
		b, _ := os.ReadFile(cfg)
		if strings.Count(string(b), fsmBlockBegin) != 1 {
			t.Fatalf("config after two mounts:\n%s", b)
		}
		if _, err := exec.LookPath("git"); err == nil {
			out, err := exec.Command("git", "config", "-f", cfg, "core.fsmonitor").Output()
			want := shellQuote(exe) + " --store " + shellQuote(store) + " fsmonitor"
			if err != nil || strings.TrimSpace(string(out)) != want {
				t.Fatalf("git reads core.fsmonitor = %q (%v), want %q", out, err, want)
			}
			sh, err := exec.Command("sh", "-c", "printf '%s\\n' "+want[:strings.Index(want, " --store")]).Output()
			if err != nil || strings.TrimSpace(string(sh)) != exe {
				t.Fatalf("the shell reads the binary as %q (%v)", sh, err)
			}
		}
		if err := configureFSMonitor(root, exe, store, false); err != nil {
			t.Fatal(err)
		}
		after, _ := os.ReadFile(cfg)
		want := before
		if before != "" && !strings.HasSuffix(before, "\n") {
			want += "\n" // the newline added before the block stays
		}
		if string(after) != want {
			t.Fatalf("config after removal %q, want %q", after, want)
		}
	}
	// git added a key inside the block (git config appends to the last
	// [core]): removing the block keeps it, under [core].
	if err := os.WriteFile(cfg, []byte("[user]\n\tname = x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := configureFSMonitor(root, exe, store, true); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err == nil {
		if out, err := exec.Command("git", "config", "-f", cfg, "core.autocrlf", "false").CombinedOutput(); err != nil {
			t.Fatalf("git config: %v %s", err, out)
		}
		b, _ := os.ReadFile(cfg)
		if !strings.Contains(string(b), "autocrlf = false\n"+fsmBlockEnd) {
			t.Fatalf("git put the key elsewhere; the test no longer covers the case:\n%s", b)
		}
		for _, on := range []bool{true, false} { // a new mount, then --no-fsmonitor
			if err := configureFSMonitor(root, exe, store, on); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("git", "config", "-f", cfg, "core.autocrlf").Output()
			if err != nil || strings.TrimSpace(string(out)) != "false" {
				b, _ := os.ReadFile(cfg)
				t.Fatalf("core.autocrlf lost (on=%v): %q %v\n%s", on, out, err, b)
			}
		}
		if out, err := exec.Command("git", "config", "-f", cfg, "core.fsmonitor").Output(); err == nil {
			t.Fatalf("core.fsmonitor still set: %s", out)
		}
	}

	// No .git directory: nothing written.
	other := t.TempDir()
	if err := configureFSMonitor(other, exe, store, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(other, ".git")); !os.IsNotExist(err) {
		t.Fatal("configureFSMonitor created .git")
	}
}

// FuzzWithoutFSMonitorBlock: removing the block from a config that has
// none of its markers changes nothing, and from that config with the
// block appended gives the config back.
func FuzzWithoutFSMonitorBlock(f *testing.F) {
	f.Add([]byte("[core]\n\tbare = false\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, cfg []byte) {
		if bytes.Contains(cfg, []byte("acyclicfs fsmonitor")) || len(cfg) > 0 && cfg[len(cfg)-1] != '\n' {
			return
		}
		if got := withoutFSMonitorBlock(cfg); !bytes.Equal(got, cfg) {
			t.Fatalf("without a block: %q became %q", cfg, got)
		}
		with := append(append([]byte{}, cfg...), fsmonitorBlock("/bin/x", "/s")...)
		if got := withoutFSMonitorBlock(with); !bytes.Equal(got, cfg) {
			t.Fatalf("block not removed cleanly: %q", got)
		}
	})
}
