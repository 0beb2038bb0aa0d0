package workspace

import "testing"

// gitignore(5)'s rules, one case each.
func TestIgnored(t *testing.T) {
	for _, c := range []struct {
		file  string
		path  string
		dir   bool
		want  bool
		base  string
		extra string // a second, deeper file's rules (base "sub")
	}{
		{file: "*.log", path: "x.log", want: true},
		{file: "*.log", path: "deep/er/x.log", want: true},
		{file: "*.log\n!keep.log", path: "keep.log", want: false},
		{file: "build/", path: "build", dir: true, want: true},
		{file: "build/", path: "build", want: false}, // a file called build
		{file: "/top.txt", path: "top.txt", want: true},
		{file: "/top.txt", path: "sub/top.txt", want: false},
		{file: "doc/*.txt", path: "doc/a.txt", want: true},
		{file: "doc/*.txt", path: "doc/x/a.txt", want: false},
		{file: "**/foo", path: "a/b/foo", want: true},
		{file: "a/**/b", path: "a/b", want: true},
		{file: "a/**/b", path: "a/x/y/b", want: true},
		{file: "a/**", path: "a", dir: true, want: false},
		{file: "a/**", path: "a/x", want: true},
		{file: "[!a]*.c", path: "b.c", want: true},
		{file: "[!a]*.c", path: "a.c", want: false},
		{file: "# comment\n\\#hash", path: "#hash", want: true},
		{file: "trail   ", path: "trail", want: true},
		{file: "*.tmp", path: "sub/x.tmp", extra: "!x.tmp", want: false},
		{file: "", path: "sub/y.tmp", extra: "*.tmp", want: true},
		{file: "", path: "y.tmp", extra: "*.tmp", want: false},
	} {
		sets := []ignoreSet{{base: c.base, rules: parseIgnore([]byte(c.file))}}
		if c.extra != "" {
			sets = append(sets, ignoreSet{base: "sub", rules: parseIgnore([]byte(c.extra))})
		}
		if got := ignored(sets, c.path, c.dir); got != c.want {
			t.Errorf("%q (+%q) on %q (dir %v) = %v, want %v", c.file, c.extra, c.path, c.dir, got, c.want)
		}
	}
}

// FuzzIgnore: any file parses, and matching never panics.
func FuzzIgnore(f *testing.F) {
	f.Add([]byte("*.log\n!keep.log\nbuild/\n/a/**/b\n[!x]y\n"), "a/x/b", true)
	f.Add([]byte("[\n\\\n**\n/\n!"), "[", false)
	f.Fuzz(func(t *testing.T, data []byte, p string, dir bool) {
		rules := parseIgnore(data)
		_ = ignored([]ignoreSet{{rules: rules}, {base: "sub", rules: rules}}, p, dir)
	})
}
