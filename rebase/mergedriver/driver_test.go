package mergedriver

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/rebase/rebasetest"
	"github.com/acyclicfs/acyclicfs/store"
)

func TestParseConfig(t *testing.T) {
	src := "\xef\xbb\xbf# comment\n[core]\n\tbare = false ; trailing\n[Merge \"Cat\"]\n\tName = \"concat \\\"it\\\"\"\n" +
		"\tDRIVER = cat %A  %B\t> x # comment\n\trecursive\n[merge.Lower]\ndriver = a\\\n b\r\n[merge \"q\\\"x\"] driver=\"  spaced  \"\n[x]k=\"a;b#c\"\\t\\n"
	got, err := parseConfig([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []configEntry{
		{section: "core", key: "bare", value: "false", hasValue: true},
		{section: "merge", subsection: "Cat", key: "name", value: `concat "it"`, hasValue: true},
		{section: "merge", subsection: "Cat", key: "driver", value: "cat %A  %B > x", hasValue: true},
		{section: "merge", subsection: "Cat", key: "recursive"},
		{section: "merge", subsection: "lower", key: "driver", value: "a b", hasValue: true},
		{section: "merge", subsection: `q"x`, key: "driver", value: "  spaced  ", hasValue: true},
		{section: "x", key: "k", value: "a;b#c\t\n", hasValue: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
	for _, bad := range []string{"[merge \"x\"\n", "[core]\nkey = \"open\n", "k = v\n", "[core]\n1key = v\n", "[core]\nk = \\q\n", "[a b]\n", "[core]\nk v\n"} {
		if _, err := parseConfig([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("[merge \"x\"]\n\tdriver = cat %A\n"))
	f.Add([]byte("[a.B]\nk=\"v\\\"\" ; c\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseConfig(data)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.key == "" || e.section == "" || strings.ToLower(e.key) != e.key {
				t.Fatalf("bad entry %+v", e)
			}
		}
	})
}

// runner returns a Runner whose configuration is cfg for every path.
func runner(t *testing.T, cfg string) (*Runner, string) {
	tmp := t.TempDir()
	return &Runner{
		Config:  func(string) (RepoConfig, error) { return RepoConfig{Files: [][]byte{[]byte(cfg)}}, nil },
		TempDir: tmp,
	}, tmp
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("temp dir left: %v %v", ents, err)
	}
}

const drivers = `[merge "cat"]
	name = concatenate
	driver = cat %O %A %B > %A.new && mv %A.new \"%A\"
[merge "fail"]
	driver = "echo stand-in > %A; exit 1" ; quoted, or ";" starts a comment
[merge "slow"]
	driver = "sleep 30 & echo $! > PIDFILE; wait; echo late > %A"
[merge "args"]
	driver = printf '%%s|' %P %L %S %X %Y > %A
[merge "rm"]
	driver = rm %A
[merge "nocmd"]
	name = only a name
`

func TestRunnerRealDrivers(t *testing.T) {
	pidfile := t.TempDir() + "/pid"
	r, tmp := runner(t, strings.Replace(drivers, "PIDFILE", pidfile, 1))
	merge := func(name, path string) (string, bool, bool, error) {
		t.Helper()
		out, clean, ok, err := r.Merge(name, path, []byte("b\n"), []byte("o\n"), []byte("t\n"))
		assertEmpty(t, tmp)
		return string(out), clean, ok, err
	}
	if out, clean, ok, err := merge("cat", "x"); err != nil || !ok || !clean || out != "b\no\nt\n" {
		t.Fatalf("cat: %q %v %v %v", out, clean, ok, err)
	}
	if out, clean, ok, err := merge("fail", "x"); err != nil || !ok || clean || out != "stand-in\n" {
		t.Fatalf("fail: %q %v %v %v", out, clean, ok, err)
	}
	if out, clean, ok, err := merge("args", "dir/it's a file"); err != nil || !ok || !clean || out != "dir/it's a file|7|base|ours|theirs|" {
		t.Fatalf("args: %q %v %v %v", out, clean, ok, err)
	}
	if out, clean, ok, err := merge("rm", "x"); err != nil || !ok || clean || out != "o\n" {
		t.Fatalf("rm: %q %v %v %v", out, clean, ok, err)
	}
	if _, _, ok, err := merge("nosuch", "x"); err != nil || ok {
		t.Fatalf("nosuch: ok %v err %v", ok, err)
	}
	if _, _, _, err := merge("nocmd", "x"); err == nil || !strings.Contains(err.Error(), "merge.nocmd.driver") {
		t.Fatalf("nocmd: err %v", err)
	}

	r.Timeout = 200 * time.Millisecond
	start := time.Now()
	out, clean, ok, err := merge("slow", "x")
	if err != nil || !ok || clean || out != "o\n" {
		t.Fatalf("slow: %q %v %v %v", out, clean, ok, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timed-out driver took %v", d)
	}
	// The background sleep, in the driver's process group, is killed too.
	pid, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break // gone, or a zombie waiting for its reaper
		}
		if time.Now().After(deadline) {
			t.Fatalf("driver's background process %s survived the timeout: %s", pid, stat)
		}
	}
}

func TestRunnerLaterConfigWins(t *testing.T) {
	r := &Runner{TempDir: t.TempDir(), Config: func(p string) (RepoConfig, error) {
		return RepoConfig{Files: [][]byte{
			[]byte("[merge \"d\"]\ndriver = echo global > %A\n"),
			[]byte("[merge \"d\"]\ndriver = echo repo > %A\n"),
		}}, nil
	}}
	out, clean, ok, err := r.Merge("d", "p", nil, nil, nil)
	if err != nil || !ok || !clean || string(out) != "repo\n" {
		t.Fatalf("%q %v %v %v", out, clean, ok, err)
	}
}

func TestTreeConfig(t *testing.T) {
	mem := rebasetest.NewMem()
	root := mem.MustBuild(rebasetest.Text(map[string]string{
		".git/config":   "root",
		"a/.git/config": "a",
		"a/b/.git/HEAD": "no config here",
		"a/b/c/x":       "",
		"gitfile/.git":  "gitdir: elsewhere",
		"gitfile/x":     "",
		"plain/x":       "",
	}))
	cfg := TreeConfig(mem, root, []byte("global"), nil)
	for path, want := range map[string]RepoConfig{
		"x":         {Files: [][]byte{[]byte("global")}, Repository: []byte("root"), Path: "x"},
		"a/b/c/x":   {Files: [][]byte{[]byte("global")}, Repository: []byte("a"), Path: "b/c/x"},
		"a/x":       {Files: [][]byte{[]byte("global")}, Repository: []byte("a"), Path: "x"},
		"gitfile/x": {Files: [][]byte{[]byte("global")}, Repository: []byte("root"), Path: "gitfile/x"},
		"new/dir/x": {Files: [][]byte{[]byte("global")}, Repository: []byte("root"), Path: "new/dir/x"},
	} {
		got, err := cfg(path)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q %v, want %q", path, got, err, want)
		}
	}
	empty := mem.MustBuild(rebasetest.Text(map[string]string{"x": ""}))
	if got, err := TreeConfig(mem, empty)("x"); err != nil || len(got.Files) != 0 || got.Path != "x" {
		t.Errorf("no repo: %q %v", got, err)
	}
}

// End to end: Merge3 with a .gitattributes naming a driver configured in
// the trusted (global) configuration, run by a Runner.
func TestMerge3WithRunner(t *testing.T) {
	mem := rebasetest.NewMem()
	global := []byte("[merge \"cat\"]\n\tdriver = cat %A %B > %A.new && mv %A.new %A\n[merge \"fail\"]\n\tdriver = exit 3\n")
	base := map[string]string{
		"repo/.git/config":     "[core]\n\tbare = false\n",
		"repo/.gitattributes":  "*.cat merge=cat\n*.fail merge=fail\n",
		"repo/d/x.cat":         "1\n",
		"repo/y.fail":          "1\n",
		"other/.gitattributes": "*.cat merge=cat\n",
		"other/z.cat":          "1\n",
	}
	edit := func(s string) rebasetest.Files {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		m["repo/d/x.cat"], m["repo/y.fail"], m["other/z.cat"] = s, s, s
		return rebasetest.Text(m)
	}
	b, o, th := mem.MustBuild(rebasetest.Text(base)), mem.MustBuild(edit("o\n")), mem.MustBuild(edit("t\n"))
	run := &Runner{Config: TreeConfig(mem, o, global), TempDir: t.TempDir()}
	res, err := rebase.Merge3(mem, mem, b, o, th, rebase.Options{Driver: run.Merge, KeepConflicts: true})
	if err != nil {
		t.Fatal(err)
	}
	var cs []string
	for _, c := range res.Conflicts {
		cs = append(cs, c.Path)
	}
	// The global driver applies wherever .gitattributes names it.
	if strings.Join(cs, " ") != "repo/y.fail" {
		t.Fatalf("conflicts %v", cs)
	}
	fs, err := mem.Flatten(res.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if got := fs["repo/d/x.cat"]; got.Data != "o\nt\n" || got.Kind != store.KindFile {
		t.Fatalf("repo/d/x.cat = %+v", got)
	}
	if got := fs["other/z.cat"]; got.Data != "o\nt\n" {
		t.Fatalf("other/z.cat = %+v", got)
	}
}

// A driver the workspace's own .git/config defines never runs, whatever
// .gitattributes says: the path merges as text, and Warn names the driver
// once; a trusted definition of the same name runs instead of it.
func TestRepositoryDriverDoesNotRun(t *testing.T) {
	mem := rebasetest.NewMem()
	marker := filepath.Join(t.TempDir(), "ran")
	base := map[string]string{
		".git/config":    "[merge \"x\"]\n\tdriver = touch " + marker + "; cat %B > %A\n",
		".gitattributes": "*.txt merge=x\n",
		"a.txt":          "1\n2\n3\n",
		"b.txt":          "1\n2\n3\n",
	}
	with := func(a, b string) rebasetest.Files {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		m["a.txt"], m["b.txt"] = a, b
		return rebasetest.Text(m)
	}
	b := mem.MustBuild(rebasetest.Text(base))
	o := mem.MustBuild(with("one\n2\n3\n", "one\n2\n3\n"))
	th := mem.MustBuild(with("1\n2\nthree\n", "1\n2\nthree\n"))
	var warnings []string
	run := &Runner{Config: TreeConfig(mem, o), TempDir: t.TempDir(), Warn: func(s string) { warnings = append(warnings, s) }}
	res, err := rebase.Merge3(mem, mem, b, o, th, rebase.Options{Driver: run.Merge, KeepConflicts: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the repository's own driver ran")
	}
	fs, err := mem.Flatten(res.Tree)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a.txt", "b.txt"} {
		if got := fs[p].Data; got != "one\n2\nthree\n" {
			t.Errorf("%s = %q, want the text merge", p, got)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `merge driver "x"`) || !strings.Contains(warnings[0], "~/.gitconfig") {
		t.Fatalf("warnings = %q", warnings)
	}
	// Defined by the owner: the owner's command runs, not the planted one.
	trusted := []byte("[merge \"x\"]\n\tdriver = echo owner > %A\n")
	run = &Runner{Config: TreeConfig(mem, o, trusted), TempDir: t.TempDir()}
	if res, err = rebase.Merge3(mem, mem, b, o, th, rebase.Options{Driver: run.Merge, KeepConflicts: true}); err != nil {
		t.Fatal(err)
	}
	if fs, err = mem.Flatten(res.Tree); err != nil {
		t.Fatal(err)
	}
	if got := fs["a.txt"].Data; got != "owner\n" {
		t.Fatalf("a.txt with the owner's driver = %q", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the repository's own driver ran")
	}
}
