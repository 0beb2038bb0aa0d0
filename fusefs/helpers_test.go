package fusefs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/acyclicfs/acyclicfs/store"
)

// fakeObjects is a temp-dir-backed Objects: blobs are files named by
// their ID, trees live in a map.
type fakeObjects struct {
	dir      string
	mu       sync.Mutex // protects trees
	trees    map[store.ID][]byte
	getTrees atomic.Int64
}

func newFakeObjects(t testing.TB) *fakeObjects {
	return newFakeObjectsAt(t.TempDir())
}

func newFakeObjectsAt(dir string) *fakeObjects {
	os.MkdirAll(dir, 0o755)
	f := &fakeObjects{dir: dir, trees: map[store.ID][]byte{}}
	f.WriteBlobBytes(nil)
	// Trees persist as files too, so a re-executed child process sees them.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "tree-") {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			f.trees[store.TreeID(b)] = b
		}
	}
	return f
}

func (f *fakeObjects) GetTree(id store.ID) (*store.Tree, error) {
	f.getTrees.Add(1)
	f.mu.Lock()
	b, ok := f.trees[id]
	f.mu.Unlock()
	if !ok {
		b2, err := os.ReadFile(filepath.Join(f.dir, "tree-"+id.String()))
		if err != nil {
			return nil, fmt.Errorf("tree %s: %w", id.Short(), store.ErrNotFound)
		}
		b = b2
	}
	return store.DecodeTree(b)
}

func (f *fakeObjects) ReadBlob(id store.ID) ([]byte, error) {
	return os.ReadFile(f.BlobPath(id))
}

func (f *fakeObjects) BlobPath(id store.ID) string { return filepath.Join(f.dir, id.String()) }

func (f *fakeObjects) WriteBlobFile(path string) (store.ID, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return store.ID{}, 0, err
	}
	id, err := f.WriteBlobBytes(b)
	return id, int64(len(b)), err
}

func (f *fakeObjects) WriteBlobBytes(b []byte) (store.ID, error) {
	id := store.BlobID(b)
	p := f.BlobPath(id)
	if _, err := os.Stat(p); err == nil {
		return id, nil
	}
	tmp, err := os.CreateTemp(f.dir, "blob-*.tmp")
	if err != nil {
		return id, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return id, err
	}
	tmp.Close()
	return id, os.Rename(tmp.Name(), p)
}

func (f *fakeObjects) PutTree(t *store.Tree) (store.ID, error) {
	b, err := t.Encode()
	if err != nil {
		return store.ID{}, err
	}
	id := store.TreeID(b)
	f.mu.Lock()
	f.trees[id] = b
	f.mu.Unlock()
	return id, os.WriteFile(filepath.Join(f.dir, "tree-"+id.String()), b, 0o644)
}

// spec describes a tree to build: path → content; a trailing "/" makes a
// directory, a "->" prefix a symlink target, a "*" prefix an executable.
type spec map[string]string

func (f *fakeObjects) build(t testing.TB, s spec) store.ID {
	t.Helper()
	type node struct {
		kids  map[string]*node
		entry store.Entry
	}
	root := &node{kids: map[string]*node{}}
	for p, content := range s {
		parts := strings.Split(strings.TrimSuffix(p, "/"), "/")
		d := root
		for _, part := range parts[:len(parts)-1] {
			if d.kids[part] == nil {
				d.kids[part] = &node{kids: map[string]*node{}, entry: store.Entry{Name: part, Kind: store.KindDir, Mtime: 1e18}}
			}
			d = d.kids[part]
		}
		name := parts[len(parts)-1]
		var e store.Entry
		switch {
		case strings.HasSuffix(p, "/"):
			if d.kids[name] == nil {
				d.kids[name] = &node{kids: map[string]*node{}, entry: store.Entry{Name: name, Kind: store.KindDir, Mtime: 1e18}}
			}
			continue
		case strings.HasPrefix(content, "->"):
			e.Kind, content = store.KindSymlink, content[2:]
		case strings.HasPrefix(content, "*"):
			e.Kind, content = store.KindExec, content[1:]
		default:
			e.Kind = store.KindFile
		}
		id, err := f.WriteBlobBytes([]byte(content))
		if err != nil {
			t.Fatal(err)
		}
		e.Name, e.ID, e.Size, e.Mtime = name, id, int64(len(content)), 1e18
		d.kids[name] = &node{entry: e}
	}
	var put func(n *node) store.ID
	put = func(n *node) store.ID {
		tr := &store.Tree{}
		for _, k := range n.kids {
			e := k.entry
			if e.Kind == store.KindDir {
				e.ID = put(k)
			}
			tr.Entries = append(tr.Entries, e)
		}
		tr.Sort()
		id, err := f.PutTree(tr)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	return put(root)
}

// flatten lists a stored tree as path → "kind:content" (mtimes ignored).
func (f *fakeObjects) flatten(t testing.TB, root store.ID) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(id store.ID, prefix string)
	walk = func(id store.ID, prefix string) {
		if id.IsZero() {
			return
		}
		tr, err := f.GetTree(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tr.Entries {
			p := prefix + e.Name
			if e.Kind == store.KindDir {
				out[p+"/"] = "dir"
				walk(e.ID, p+"/")
				continue
			}
			if e.Kind.IsSpecial() {
				out[p] = fmt.Sprintf("%s:%#x", e.Kind, e.Rdev())
				continue
			}
			b, err := f.ReadBlob(e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(b)) != e.Size {
				t.Fatalf("%s: size %d, blob %d", p, e.Size, len(b))
			}
			out[p] = e.Kind.String() + ":" + string(b)
		}
	}
	walk(root, "")
	return out
}

// flattenDir lists a real directory the same way.
func flattenDir(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		switch {
		case fi.IsDir():
			out[rel+"/"] = "dir"
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "symlink:" + target
		case !fi.Mode().IsRegular():
			st := fi.Sys().(*syscall.Stat_t)
			k, _ := store.SpecialKindOfMode(st.Mode)
			rdev := uint64(0)
			if k.IsDevice() {
				rdev = st.Rdev
			}
			out[rel] = fmt.Sprintf("%s:%#x", k, rdev)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			k := "file"
			if fi.Mode()&0o111 != 0 {
				k = "exec"
			}
			out[rel] = k + ":" + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffMaps(a, b map[string]string) string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	for _, k := range keys {
		if a[k] != b[k] {
			fmt.Fprintf(&buf, "%q: %.40q vs %.40q\n", k, a[k], b[k])
		}
	}
	return buf.String()
}

type mountOpts struct {
	stateDir    string
	passthrough bool
	admitter    Admitter
	xattrs      bool
	ptClean     bool
	retain      int64   // Config.RetainUpperBytes
	warm        int     // Config.WarmEntries
	objects     Objects // served instead of objs (which still builds the lower tree)
	uring       bool    // Config.Uring
	preferUring bool    // Config.PreferUring
}

// mountT mounts root under a temp dir and unmounts at cleanup.
func mountT(t testing.TB, objs *fakeObjects, root store.ID, o *mountOpts) (*Mount, string) {
	t.Helper()
	if o == nil {
		o = &mountOpts{}
	}
	if o.stateDir == "" {
		o.stateDir = t.TempDir()
	}
	mnt := t.TempDir()
	var served Objects = objs
	if o.objects != nil {
		served = o.objects
	}
	m, err := MountAt(mnt, Config{Objects: served, Root: root, StateDir: o.stateDir,
		Passthrough: o.passthrough, Admitter: o.admitter, FsName: "fusefs-test", EnableXattrs: o.xattrs, PassthroughClean: o.ptClean, RetainUpperBytes: o.retain, WarmEntries: o.warm, Debug: os.Getenv("FUSEFS_DEBUG") != "", Uring: o.uring, PreferUring: o.preferUring})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		m.Wait()
	})
	return m, mnt
}

func mustWrite(t testing.TB, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fuseMounts counts acyclicfs mounts in /proc/self/mountinfo.
func fuseMounts() (int, string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0, ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	n := 0
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, " fusefs-test ") {
			n++
			lines = append(lines, l)
		}
	}
	return n, strings.Join(lines, "\n")
}

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	if p := os.Getenv(mmapChildEnv); p != "" {
		mmapChild(p)
		return
	}
	if p := os.Getenv(mmapReaderEnv); p != "" {
		mmapReaderChild(p)
		return
	}
	before, _ := fuseMounts()
	code := m.Run()
	if err := RestoreUring(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	if after, lines := fuseMounts(); after > before {
		fmt.Fprintf(os.Stderr, "leaked %d mounts:\n%s\n", after-before, lines)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

var _ = syscall.Sync

// waitReleased blocks until the kernel has released every open handle
// (RELEASE is sent asynchronously after close returns).
func waitReleased(m *Mount) { waitOpenHandles(m, 0) }

// waitOpenHandles blocks until at most n handles of m are open as the
// daemon sees them.
func waitOpenHandles(m *Mount, n int) {
	m.ov.mu.Lock()
	for m.ov.openHandles > n {
		m.ov.released.Wait()
	}
	m.ov.mu.Unlock()
}

func stringsContains(s, sub string) bool { return strings.Contains(s, sub) }

// needUring makes FUSE over io_uring available (as root, as CI runs) or
// skips.
func needUring(t testing.TB) {
	t.Helper()
	if err := TurnOnUring(); err != nil {
		t.Skip(err)
	}
}
