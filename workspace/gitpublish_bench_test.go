package workspace

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// BenchmarkGitPublishGoTree: publish of a workspace made by create
// --from-git of Go's src/ committed to git (~11,500 files) after 10 files
// changed (one commit of uncommitted changes each time). The goal (issue
// 26): well under a second. Setup (git add of the tree, the import) is not
// timed.
func BenchmarkGitPublishGoTree(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("no git")
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skip("no go command")
	}
	src := filepath.Join(strings.TrimSpace(string(goroot)), "src")
	if _, err := os.Stat(src); err != nil {
		b.Skip("no GOROOT/src")
	}
	dir := b.TempDir()
	repo := filepath.Join(dir, "repo")
	if out, err := exec.Command("cp", "-a", src, repo).CombinedOutput(); err != nil {
		b.Fatalf("cp: %v %s", err, out)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"config", "gc.auto", "0"}, {"add", "-A"}, {"commit", "-q", "-m", "base"}, {"branch", "agent"}} {
		if out, err := runGit(repo, args...); err != nil {
			b.Fatal(out, err)
		}
	}
	m, err := Open(filepath.Join(dir, "store"), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	if _, err := m.CreateFromGit(b.Context(), "ws", repo, "agent"); err != nil {
		b.Fatal(err)
	}
	files := []string{"fmt/print.go", "os/file.go", "io/io.go", "bytes/buffer.go", "strings/builder.go",
		"sort/sort.go", "errors/errors.go", "bufio/bufio.go", "path/path.go", "time/time.go"}
	// The first publish fills the directory cache, as a workspace's first
	// publish does.
	if _, err := m.GitPublish(context.Background(), "ws", PublishOptions{Env: gitTestEnv}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		edit(b, m, "ws", files, i)
		b.StartTimer()
		res, err := m.GitPublish(context.Background(), "ws", PublishOptions{Env: gitTestEnv})
		if err != nil || res.Committed == "" {
			b.Fatalf("publish %d: %+v %v", i, res, err)
		}
	}
}

// edit appends a line to each of files in ws's head (a new generation).
func edit(b *testing.B, m *Manager, ws string, files []string, n int) {
	w, err := m.Get(ws)
	if err != nil {
		b.Fatal(err)
	}
	root, err := m.rootOf(w.Head)
	if err != nil {
		b.Fatal(err)
	}
	edits := map[string]*store.Entry{}
	for _, f := range files {
		e, err := m.entryAt(root, f)
		if err != nil || e == nil {
			b.Fatalf("%s: %v", f, err)
		}
		data, err := m.st.ReadBlob(e.ID)
		if err != nil {
			b.Fatal(err)
		}
		data = append(data, fmt.Sprintf("// edit %d\n", n)...)
		id, err := m.st.WriteBlobBytes(data)
		if err != nil {
			b.Fatal(err)
		}
		ne := *e
		ne.ID, ne.Size = id, int64(len(data))
		edits[f] = &ne
	}
	nr, err := m.setEntries(root, edits)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.publish(w, nr, nil, store.GenCommit, newOperationID(), nil); err != nil {
		b.Fatal(err)
	}
}
