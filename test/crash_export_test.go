package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runCrash runs acyclicfs with a failpoint armed; the process kills itself
// with SIGKILL when it reaches the point.
func (e *env) runCrash(point string, args ...string) {
	e.t.Helper()
	cmd := exec.Command(bin, append([]string{"--store", e.store}, args...)...)
	cmd.Env = append(os.Environ(), "ACYCLICFS_FAILPOINT_ARMED=1", "ACYCLICFS_FAILPOINT="+point)
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != -1 {
		e.t.Fatalf("%v with failpoint %s: want death by SIGKILL, got %v\n%s", args, point, err, out)
	}
}

// TestExportCrashRecovery kills export at every journal step and checks
// that the next command rolls it back (target untouched) or forward
// (target holds exactly the tree) — never a mix.
func TestExportCrashRecovery(t *testing.T) {
	points := []struct {
		name    string
		forward bool
	}{
		{"export.before-prepared", false},
		{"export.after-prepared", true},
		{"export.moving-pre", true},
		{"export.placing-new", true},
	}
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			e := newEnv(t)
			src := filepath.Join(e.dir, "src")
			writeTree(t, src, map[string]string{"a": "A", "d/b": "B", "c": "C"})
			e.ok("create", "w", "--from", src)
			want := treeList(t, src)
			dst := filepath.Join(e.dir, "dst")
			writeTree(t, dst, map[string]string{"old1": "o", "sub/old2": "o2", "a": "stale"})
			before := treeList(t, dst)
			e.runCrash(p.name, "export", "w", dst, "--force")
			st := e.run("status")
			if !strings.Contains(st.stdout, "recovery:") {
				// Opening the store for status already recovers; the line may
				// be gone. What matters is the tree below.
				t.Logf("status after crash:\n%s", st.stdout)
			}
			got := treeList(t, dst)
			if p.forward {
				sameTree(t, "rolled-forward export", want, got)
			} else {
				sameTree(t, "rolled-back export", before, got)
			}
			e.fsck()
			// A fresh export into a new dir works after recovery.
			e.ok("export", "w", filepath.Join(e.dir, "again"))
		})
	}
}

func TestExportCrashIntoNewDirectory(t *testing.T) {
	e := newEnv(t)
	src := filepath.Join(e.dir, "src")
	writeTree(t, src, map[string]string{"a": "A", "d/b": "B"})
	e.ok("create", "w", "--from", src)
	dst := filepath.Join(e.dir, "fresh")
	e.runCrash("export.before-prepared", "export", "w", dst)
	e.ok("list") // any command recovers
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatal("rolled-back export left the target")
	}
	entries, _ := os.ReadDir(e.dir)
	for _, en := range entries {
		if strings.Contains(en.Name(), "acyclicfs-export") {
			t.Fatalf("staging left behind: %s", en.Name())
		}
	}
	e.runCrash("export.after-prepared", "export", "w", dst)
	e.ok("list")
	sameTree(t, "rolled-forward export", treeList(t, src), treeList(t, dst))
}
