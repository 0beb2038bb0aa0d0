package workspace

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/corestate"
	"github.com/acyclicfs/acyclicfs/store"
)

// The reference design's git_compatibility_delete_is_revision_fenced_and_durable:
// a record of the old layout is isolated (not read, left untouched), a
// write is a compare-and-swap on the revision, a delete at a stale
// revision is refused, a delete at the current one is durable across a
// reopen.
func TestGitCompatDeleteIsRevisionFencedAndDurable(t *testing.T) {
	dir := t.TempDir()
	m, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := corestate.NewFamily[GitBinding](m.cs, "git-compat")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := legacy.CompareAndSwap("ws", 0, GitBinding{Workspace: "ws", Branch: "main"}); err != nil {
		t.Fatal(err)
	}
	legacyFile := recordFile(m.cs, "git-compat", "ws")
	before, err := os.ReadFile(legacyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, found, err := m.GitBinding("ws"); err != nil || found {
		t.Fatalf("new family sees the legacy record: found=%v err=%v", found, err)
	}

	b := GitBinding{Repo: "/repo/.git", Branch: "refs/heads/main", Base: "c0ffee"}
	rev, err := m.SetGitBinding("ws", 0, b)
	if err != nil || rev != 1 {
		t.Fatalf("first write = %d, %v", rev, err)
	}
	if _, err := m.SetGitBinding("ws", 0, b); !errors.Is(err, corestate.ErrConflict) {
		t.Fatalf("second create at revision 0 = %v, want ErrConflict", err)
	}
	if err := m.DeleteGitBinding("ws", 0); !errors.Is(err, corestate.ErrConflict) {
		t.Fatalf("stale delete = %v, want ErrConflict", err)
	}
	if got, r, found, err := m.GitBinding("ws"); err != nil || !found || r != 1 || got.Base != "c0ffee" {
		t.Fatalf("after stale delete: %+v rev %d found %v err %v", got, r, found, err)
	}
	if err := m.DeleteGitBinding("ws", 1); err != nil {
		t.Fatalf("delete at the current revision: %v", err)
	}
	m.Close()

	re, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	if _, _, found, err := re.GitBinding("ws"); err != nil || found {
		t.Fatalf("deleted record after reopen: found=%v err=%v", found, err)
	}
	after, err := os.ReadFile(legacyFile)
	if err != nil || string(after) != string(before) {
		t.Fatalf("legacy record touched: %q -> %q (%v)", before, after, err)
	}
}

// A write that crashes after the new record is durable but before the
// old one is rotated out recovers to the new record; one that crashes
// before is invisible. Either way the revision moved at most once.
func TestGitCompatWriteRecovers(t *testing.T) {
	for _, step := range []string{"record.after-next", "record.after-rotate"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			m, err := Open(dir, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.SetGitBinding("ws", 0, GitBinding{Repo: "/r", Base: "one"}); err != nil {
				t.Fatal(err)
			}
			crashAt(t, step)
			_, werr := m.SetGitBinding("ws", 1, GitBinding{Repo: "/r", Base: "two"})
			corestate.SetFailpointForTest(nil)
			m.Close()
			re, err := Open(dir, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer re.Close()
			got, rev, found, err := re.GitBinding("ws")
			if err != nil || !found {
				t.Fatalf("after crash at %s (write error %v): found=%v err=%v", step, werr, found, err)
			}
			switch {
			case got.Base == "one" && rev == 1, got.Base == "two" && rev == 2:
			default:
				t.Fatalf("after crash at %s: base %q at revision %d", step, got.Base, rev)
			}
			if werr == nil && got.Base != "two" {
				t.Fatalf("a write reported done was lost at %s", step)
			}
		})
	}
}

// A record that is not a binding of its key is corruption, not a binding.
func TestGitCompatRejectsForeignRecord(t *testing.T) {
	m := openTest(t)
	if _, err := m.SetGitBinding("a", 0, GitBinding{Repo: "/r"}); err != nil {
		t.Fatal(err)
	}
	src, dst := recordFile(m.cs, familyGitCompat, "a"), recordFile(m.cs, familyGitCompat, "b")
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(raw) {
		t.Fatalf("record file is not JSON: %q", raw)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := m.GitBinding("b"); !errors.Is(err, corestate.ErrCorrupt) {
		t.Fatalf("a's record under b's key = %v, want ErrCorrupt", err)
	}
	_ = os.Remove(dst)
}

// Removing a workspace removes its binding.
func TestRemoveDeletesGitBinding(t *testing.T) {
	m := openTest(t)
	if _, _, err := m.Create(context.Background(), "ws", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetGitBinding("ws", 0, GitBinding{Repo: "/r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove("ws", false); err != nil {
		t.Fatal(err)
	}
	if _, _, found, err := m.GitBinding("ws"); err != nil || found {
		t.Fatalf("binding after remove: found=%v err=%v", found, err)
	}
}

// TestCreateFromGitReadsNoBlob: an import reads no blob from the
// repository (files are git object references); a file's content is read
// from the repository when first read, checked against its object name; a
// second import of the same commit names the same IDs; a blob the
// repository lost fails its read clearly (ErrBaseChanged) and nothing else.
func TestCreateFromGitReadsNoBlob(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	m := openTest(t)
	repo := filepath.Join(t.TempDir(), "repo")
	os.MkdirAll(filepath.Join(repo, "d"), 0o755)
	for p, c := range map[string]string{"a": "alpha\n", "d/b": "beta\n", "d/c": "gamma\n"} {
		os.WriteFile(filepath.Join(repo, p), []byte(c), 0o644)
	}
	pubGit(t, repo, "init", "-q", "-b", "main")
	pubGit(t, repo, "add", "-A")
	pubGit(t, repo, "commit", "-q", "-m", "one")
	ctx := context.Background()
	first, err := m.CreateFromGit(ctx, "w1", repo, "")
	if err != nil || first.Blobs != 0 || first.Bytes != 0 || first.Files != 3 {
		t.Fatalf("first import: %+v, %v", first, err)
	}
	if n := m.st.BaseReads(); n != 0 {
		t.Fatalf("import read %d blobs, want none", n)
	}
	entry := func(ws, p string) store.Entry {
		t.Helper()
		e, err := m.CatEntry(ws, store.ID{}, p, SideNone)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a := entry("w1", "a")
	if got, err := m.st.ReadBlob(a.ID); err != nil || string(got) != "alpha\n" || a.Size != int64(len("alpha\n")) {
		t.Fatalf("read a: %q %v (size %d)", got, err, a.Size)
	}
	if n := m.st.BaseReads(); n != 1 {
		t.Fatalf("reading one file read %d blobs from the repository, want 1", n)
	}
	if _, err := m.CreateFromGit(ctx, "w2", repo, ""); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "d/b", "d/c"} {
		if e1, e2 := entry("w1", p), entry("w2", p); e1.ID != e2.ID {
			t.Fatalf("%s: second import names %s, first %s", p, e2.ID.Short(), e1.ID.Short())
		}
	}
	// The repository loses d/b's blob (a gc after its branch went away).
	oid := strings.TrimSpace(pubGit(t, repo, "rev-parse", "HEAD:d/b"))
	if err := os.Remove(filepath.Join(repo, ".git", "objects", oid[:2], oid[2:])); err != nil {
		t.Fatal(err)
	}
	if _, err := m.st.ReadBlob(entry("w1", "d/b").ID); !errors.Is(err, store.ErrBaseChanged) || !strings.Contains(err.Error(), oid) {
		t.Fatalf("read of a lost object: %v, want ErrBaseChanged naming %s", err, oid)
	}
	if got, err := m.st.ReadBlob(entry("w1", "d/c").ID); err != nil || string(got) != "gamma\n" {
		t.Fatalf("read d/c after a failed read: %q %v", got, err)
	}
	// fsck names the lost object, once (w1 and w2 share the reference).
	probs, err := m.Fsck()
	if err != nil || len(probs) != 1 || !strings.Contains(probs[0], store.ProblemMissingGitObject) || !strings.Contains(probs[0], oid) {
		t.Fatalf("fsck: %q %v, want the lost object", probs, err)
	}
	for _, ws := range []string{"w1", "w2"} {
		if _, err := m.Remove(ws, false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCreateFromGitAfterGC: a repository imported, its workspace removed
// and collected (its git base swept with its references), then imported
// again by the same process: the new workspace's files read and fsck is
// clean (no reference to a swept base is reused).
func TestCreateFromGitAfterGC(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	m := openTest(t)
	repo := filepath.Join(t.TempDir(), "repo")
	os.MkdirAll(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "a"), []byte("alpha\n"), 0o644)
	pubGit(t, repo, "init", "-q", "-b", "main")
	pubGit(t, repo, "add", "-A")
	pubGit(t, repo, "commit", "-q", "-m", "one")
	ctx := context.Background()
	if _, err := m.CreateFromGit(ctx, "w1", repo, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove("w1", false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GC(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateFromGit(ctx, "w2", repo, ""); err != nil {
		t.Fatal(err)
	}
	e, err := m.CatEntry("w2", store.ID{}, "a", SideNone)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.st.ReadBlob(e.ID); err != nil || string(got) != "alpha\n" {
		t.Fatalf("read a: %q %v", got, err)
	}
	if probs, err := m.Fsck(); err != nil || len(probs) > 0 {
		t.Fatalf("fsck: %q %v", probs, err)
	}
}

// recordFile is the current file of a corestate record (see corestate/doc.go).
func recordFile(cs *corestate.Store, family, key string) string {
	return filepath.Join(cs.Root(), family, hex.EncodeToString([]byte(key))+".json")
}

// crashAt makes corestate fail at step, as a crash there would.
func crashAt(t *testing.T, step string) {
	t.Helper()
	restore := corestate.SetFailpointForTest(func(got string) error {
		if got == step {
			return errors.New("crash")
		}
		return nil
	})
	t.Cleanup(restore)
}
