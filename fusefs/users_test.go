package fusefs

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestFdMountID(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		text string
		want uint64
	}{
		"plain":   {"pos:\t0\nflags:\t0100002\nmnt_id:\t4321\nino:\t12\n", 4321},
		"first":   {"mnt_id:\t7\n", 7},
		"missing": {"pos:\t0\nflags:\t02\n", 0},
		"garbage": {"mnt_id:\tx12\n", 0},
		"empty":   {"", 0},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := fdMountID(p, make([]byte, 512)); got != c.want {
			t.Errorf("%s: mnt_id %d, want %d", name, got, c.want)
		}
	}
	if got := fdMountID(filepath.Join(dir, "absent"), make([]byte, 512)); got != 0 {
		t.Errorf("absent file: %d", got)
	}
}

func FuzzFdMountID(f *testing.F) {
	f.Add([]byte("pos:\t0\nmnt_id:\t12\n"))
	f.Add([]byte("mnt_id:"))
	p := filepath.Join(f.TempDir(), "fdinfo")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		fdMountID(p, make([]byte, 512))
	})
}

func TestBusyError(t *testing.T) {
	e := &BusyError{Mountpoint: "/m"}
	for i := range 7 {
		e.Users = append(e.Users, Process{PID: 10 + i, Comm: "sh"})
	}
	msg := e.Error()
	if !errors.Is(e, ErrInUse) || !strings.HasPrefix(msg, "/m is in use by pid 10 (sh), pid 11 (sh)") ||
		!strings.HasSuffix(msg, "pid 14 (sh) and 2 more") {
		t.Fatalf("BusyError: %q", msg)
	}
}

// TestUsersFindsCwdInside: a process whose working directory is in the
// mount is a user; the daemon itself (this process, whose walkers list the
// view) is not.
func TestUsersFindsCwdInside(t *testing.T) {
	objs := newFakeObjects(t)
	m, mnt := mountT(t, objs, objs.build(t, spec{"d/f": "x"}), nil)
	if us, err := m.Users(); err != nil || len(us) != 0 {
		t.Fatalf("users of an idle mount: %v %v", us, err)
	}
	cmd := startSleeper(t, filepath.Join(mnt, "d"))
	us, err := m.Users()
	if err != nil || len(us) != 1 || us[0].PID != cmd.Process.Pid {
		t.Fatalf("users: %v %v, want the sleeper %d", us, err, cmd.Process.Pid)
	}
}

// startSleeper runs sleep with working directory dir until the test ends.
// The shell enters dir after exec: a chdir between fork and exec would
// need this very process, suspended in vfork, to serve the lookup.
func startSleeper(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", `cd "$1" && echo in && exec sleep 600`, "sh", dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// "in" once the shell is in dir.
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}
