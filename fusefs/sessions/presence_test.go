package sessions

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"
)

// setThread gives process pid a thread tid whose /proc syscall line is sc.
func (f *fakeProc) setThread(pid, tid int, sc string) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.Itoa(pid), "task", strconv.Itoa(tid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "syscall"), []byte(sc), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) setMaps(pid int, content string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.root, strconv.Itoa(pid), "maps"), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// threadKinds are the thread states the property test draws, with a
// /proc syscall line for each.
var threadKinds = map[string]string{
	"input":   fmt.Sprintf("%d 0x5 0x7ffc 0x1 0x0 0x0 0x0 0x7ffc 0x7f00\n", unix.SYS_READ),
	"epoll":   fmt.Sprintf("%d 0x3 0x7ffc 0x400 0xffffffffffffffff 0x0 0x0 0x7ffc 0x7f00\n", unix.SYS_EPOLL_WAIT),
	"futex":   fmt.Sprintf("%d 0x7f00 0x80 0x0 0x0 0x0 0x0 0x7ffc 0x7f00\n", unix.SYS_FUTEX),
	"child":   fmt.Sprintf("%d 0xffffffffffffffff 0x7ffc 0x0 0x0 0x0 0x0 0x7ffc 0x7f00\n", unix.SYS_WAIT4),
	"sleep":   fmt.Sprintf("%d 0x7ffc 0x0 0x0 0x0 0x0 0x0 0x7ffc 0x7f00\n", unix.SYS_NANOSLEEP),
	"open":    fmt.Sprintf("%d 0xffffff9c 0x7ffc 0x0 0x0 0x0 0x0 0x7ffc 0x7f00\n", unix.SYS_OPENAT),
	"running": "running\n",
}

// TestAbsentProperty: for random processes of one owner (working
// directory, open file and mapping in the mount or not; threads reading,
// polling, in futex, waiting for children, sleeping, in another call or
// running; children in the owner or outside it), absent agrees with the
// rule of docs/windows.md "Idle sessions".
func TestAbsentProperty(t *testing.T) {
	base := t.TempDir()
	kinds := []string{"input", "epoll", "futex", "child", "sleep", "open", "running"}
	rapid.Check(t, func(rt *rapid.T) {
		root, err := os.MkdirTemp(base, "proc")
		if err != nil {
			rt.Fatal(err)
		}
		fp := &fakeProc{t: t, root: root}
		tr, err := New(Config{Handler: newRecorder(), ProcRoot: root, SweepInterval: -1, MountPoint: "/mnt/ws", IdleClose: time.Second})
		if err != nil {
			rt.Fatal(err)
		}
		defer tr.Close()
		n := rapid.IntRange(1, 3).Draw(rt, "procs")
		var pids []int
		kids := map[int][]int{}
		want := true
		for i := range n {
			pid := 100 + i
			pids = append(pids, pid)
			fp.add(pid, 100, 100)
			cwdIn := rapid.Bool().Draw(rt, "cwd in")
			fdIn := rapid.Bool().Draw(rt, "fd in")
			mapIn := rapid.Bool().Draw(rt, "map in")
			if cwdIn {
				fp.setCwd(pid, "/mnt/ws/src")
			} else {
				fp.setCwd(pid, "/home")
			}
			fp.setFd(pid, 0, "/dev/pts/1")
			if fdIn {
				fp.setFd(pid, 3, "/mnt/ws/f")
			}
			maps := "7f00-7f10 r--p 00000000 fd:01 42 /usr/lib/libc.so.6\n7f20-7f30 rw-p 00000000 00:00 0 \n"
			if mapIn {
				maps += "7f40-7f50 r--p 00000000 00:3a 7 /mnt/ws/big file\n"
			}
			fp.setMaps(pid, maps)
			threads := rapid.SliceOfN(rapid.SampledFrom(kinds), 1, 3).Draw(rt, "threads")
			for j, k := range threads {
				fp.setThread(pid, pid*10+j, threadKinds[k])
			}
			// Children: in the owner (a later pid of it) or outside.
			childIn := i+1 < n && rapid.Bool().Draw(rt, "child in owner")
			childOut := rapid.Bool().Draw(rt, "child outside")
			if childIn {
				kids[pid] = append(kids[pid], pid+1)
			}
			if childOut {
				kids[pid] = append(kids[pid], 900+i)
			}
			waits, any, childWait := true, false, false
			for _, k := range threads {
				switch k {
				case "input", "epoll":
					any = true
				case "futex":
				case "child":
					any, childWait = true, true
				default:
					waits = false
				}
			}
			if childWait && (!childIn || childOut) {
				waits = false
			}
			ok := !fdIn && !mapIn && (!cwdIn || waits && any)
			want = want && ok
		}
		if got := tr.absent(pids, kids); got != want {
			rt.Fatalf("absent = %v, want %v", got, want)
		}
	})
}

// TestIdleRealProcesses runs against the real /proc, with a temporary
// directory standing for the mount: once idle, a session whose process
// only has its working directory there while it reads a pipe loses its
// lease; one that sleeps there, or that holds a file of it open while it
// reads the pipe, keeps it.
func TestIdleRealProcesses(t *testing.T) {
	if _, err := os.Stat("/proc/self/syscall"); err != nil {
		t.Skip("no /proc/PID/syscall")
	}
	mp := t.TempDir()
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(script string) (*exec.Cmd, *os.File) {
		t.Helper()
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = mp
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin = r
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		t.Cleanup(func() {
			w.Close()
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
		})
		return cmd, w
	}
	reader, _ := start("exec cat >/dev/null")
	sleeper, _ := start("exec sleep 30")
	holder, _ := start("exec cat >/dev/null 3<f")
	clock := newFakeClock()
	rec := newRecorder()
	tr, err := New(Config{Handler: rec, SweepInterval: -1, MountPoint: mp, IdleClose: time.Second,
		IgnorePIDs: []int{os.Getpid()}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	procs := map[string]*exec.Cmd{"reader": reader, "sleeper": sleeper, "holder": holder}
	for _, c := range procs {
		if err := tr.Admit(uint32(c.Process.Pid)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{"reader": 1, "sleeper": 0, "holder": 0}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The processes may still be starting (running, or in execve): sweep
		// until the reader's lease ended, bounded.
		tr.Sweep() // folds the requests in
		clock.Advance(2 * time.Second)
		tr.Sweep()
		if _, e := rec.counts(MakeOwner(BySID, reader.Process.Pid)); e == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
		for _, c := range procs {
			if err := tr.Admit(uint32(c.Process.Pid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, c := range procs {
		if _, e := rec.counts(MakeOwner(BySID, c.Process.Pid)); e != want[name] {
			t.Errorf("%s: %d ends, want %d", name, e, want[name])
		}
	}
}
