package test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Ctrl-C cancels a long command cleanly: create --from-git --resolve, interrupted
// while it reads the repository's blobs, exits 1 saying so, leaves no
// workspace behind and a clean store, and the same create succeeds
// afterwards. Run by the CLI itself and forwarded to a daemon (the
// interrupted client's closed connection cancels it there).
func TestInterruptCreateFromGit(t *testing.T) {
	needTool(t, "git")
	for _, viaDaemon := range []bool{false, true} {
		name := "local"
		if viaDaemon {
			name = "daemon"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.ok("init")
			repo := filepath.Join(e.dir, "repo")
			writeTree(t, repo, map[string]string{"README": "hello\n", "src/a.go": "package a\n"})
			git(t, repo, "init", "-q", "-b", "main")
			git(t, repo, "add", "-A")
			git(t, repo, "commit", "-q", "-m", "start")

			// A git in front of the real one: `cat-file --batch` (the
			// blob reads of the import) reports its pid on a FIFO and
			// blocks until it is killed, so the interrupt lands in the
			// middle of the import, for certain.
			realGit, err := exec.LookPath("git")
			if err != nil {
				t.Fatal(err)
			}
			wrapDir := filepath.Join(e.dir, "wrap")
			ready := filepath.Join(e.dir, "ready")
			if err := os.MkdirAll(wrapDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(ready, 0o600); err != nil {
				t.Fatal(err)
			}
			once := filepath.Join(e.dir, "blocked-once")
			script := "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = cat-file ] && mkdir " + once + " 2>/dev/null; then\n    echo $$ > " + ready + "\n    exec sleep 1000000\n  fi\ndone\nexec " + realGit + " \"$@\"\n"
			if err := os.WriteFile(filepath.Join(wrapDir, "git"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(), "ACYCLICFS_STORE=", "PATH="+wrapDir+":"+os.Getenv("PATH"))

			if viaDaemon {
				// A daemon that finds the wrapping git (it runs the
				// forwarded import); shut down by the env's cleanup.
				pr, pw, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				d := exec.Command(bin, "--store", e.store, "daemon", "--ready-fd", "3")
				d.Env = env
				d.Stdout, d.Stderr = os.Stderr, os.Stderr
				d.ExtraFiles = []*os.File{pw}
				if err := d.Start(); err != nil {
					t.Fatal(err)
				}
				pw.Close()
				go d.Wait()
				msg := make([]byte, 64)
				n, _ := pr.Read(msg) // "ready\n" once it listens
				pr.Close()
				if string(msg[:n]) != "ready\n" {
					t.Fatalf("daemon: %q", msg[:n])
				}
			}

			// --resolve: the import reads every blob before it creates
			// the workspace (without it, it reads none).
			cmd := exec.Command(bin, "--store", e.store, "create", "big", "--from-git", repo, "--resolve")
			cmd.Env = env
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(ready) // blocks until the import reads blobs
			if err != nil {
				t.Fatal(err)
			}
			catFile, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("wrapper wrote %q", b)
			}
			t.Cleanup(func() { _ = syscall.Kill(catFile, syscall.SIGKILL) }) // if the test fails before it is gone
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			code := cmd.ProcessState.ExitCode() // -1: killed by the signal
			if code != 1 || !strings.Contains(errb.String(), "interrupt") {
				t.Fatalf("interrupted create: exit %d (%v), stderr %q; want exit 1 saying it was interrupted", code, err, errb.String())
			}
			// The import's blob reader is stopped, by the CLI or the
			// daemon: nothing goes on behind the user's back.
			if err := waitGone(catFile, 10*time.Second); err != nil {
				t.Fatalf("the import's git cat-file runs on after the interrupt: %v", err)
			}
			if r := e.run("list"); r.code != 0 || strings.Contains(r.stdout, "big") {
				t.Fatalf("after the interrupt list shows: %s", r)
			}
			e.fsck()
			// Nothing half-written stands in the way of doing it again.
			e.ok("create", "big", "--from-git", repo, "--resolve")
			if got := e.ok("cat", "big", "README"); got != "hello" {
				t.Fatalf("README = %q", got)
			}
		})
	}
}
