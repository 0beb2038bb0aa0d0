package store_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/store/storetest"
)

const crashChildEnv = "ACYCLICFS_STORE_CRASH_CHILD"

// TestCrashMidWrite kills (SIGKILL) a process that is busy writing blobs,
// batches, trees, generations and head appends, then reopens the store:
// it must open, check clean, and hold a contiguous head log whose every
// entry is complete.
func TestCrashMidWrite(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(t, dir)
		return
	}
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashMidWrite$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	mustOK(t, err)
	cmd.Stderr = os.Stderr
	mustOK(t, cmd.Start())
	// Wait for the child to report progress, then kill it mid-flight.
	sc := bufio.NewScanner(out)
	progressed := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "appended 20") {
			progressed = true
			break
		}
	}
	mustOK(t, cmd.Process.Kill())
	cmd.Wait()
	if !progressed {
		t.Fatal("child never made progress")
	}
	s := storetest.MustOpenDir(t, dir, store.Options{})
	ps, err := s.Check()
	mustOK(t, err)
	if len(ps) != 0 {
		t.Fatalf("problems after crash: %v", ps)
	}
	log, err := s.HeadLog("main", 0)
	mustOK(t, err)
	if len(log) < 21 {
		t.Fatalf("only %d head entries survived", len(log))
	}
	for i, e := range log {
		if e.Seq != uint64(len(log)-i) {
			t.Fatalf("head log not contiguous: %+v", log)
		}
	}
	var left []string
	err = filepath.WalkDir(dir+"/tmp", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return err
	})
	mustOK(t, err)
	if len(left) != 0 {
		t.Fatalf("temp files survived reopen: %v", left)
	}
}

func crashChild(t *testing.T, dir string) {
	s, err := store.Open(dir, store.Options{})
	mustOK(t, err)
	g := storetest.PutGen(t, s, "main", store.GenCreate, map[string]string{"a": "0"})
	storetest.MustCreate(t, s, "main", "", g, store.ID{})
	head := g
	for i := 1; ; i++ {
		b := s.NewBlobBatch()
		tree := &store.Tree{}
		for j := range 5 {
			content := fmt.Sprintf("round %d file %d %s", i, j, strings.Repeat("z", i*j))
			id, err := b.WriteBlobBytes([]byte(content))
			mustOK(t, err)
			tree.Entries = append(tree.Entries, store.Entry{Name: fmt.Sprintf("f%d", j), Kind: store.KindFile, Size: int64(len(content)), ID: id})
		}
		mustOK(t, b.Commit())
		big, _, err := s.WriteBlob(&genReader{n: 1 << 20, x: uint64(i)})
		mustOK(t, err)
		tree.Entries = append(tree.Entries, store.Entry{Name: "zbig", Kind: store.KindFile, Size: 1 << 20, ID: big})
		root, err := s.PutTree(tree)
		mustOK(t, err)
		gen, err := s.PutGeneration(&store.Generation{Root: root, Parents: []store.ID{head}, Workspace: "main", Kind: store.GenCommit, Time: int64(i)})
		mustOK(t, err)
		_, err = s.CompareAndAppend("main", head, store.HeadEntry{Gen: gen, Kind: store.GenCommit, Operation: fmt.Sprint("op-", i)}, nil)
		mustOK(t, err)
		head = gen
		fmt.Printf("appended %d\n", i)
	}
}
