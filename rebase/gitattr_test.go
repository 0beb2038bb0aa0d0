package rebase

import (
	"bytes"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// stackFor builds the attribute stack for path from a map of
// .gitattributes contents by directory ("" is the top).
func stackFor(files map[string]string, path string) attrStack {
	var s attrStack
	dir := ""
	rest := path
	for {
		if data, ok := files[dir]; ok {
			s = append(s, attrFile{dir: dir, rules: parseAttrFile([]byte(data), dir == "")})
		}
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			return s
		}
		dir = joinPath(dir, rest[:i])
		rest = rest[i+1:]
	}
}

// describe renders an attribute state as git check-attr does.
func describe(a attrAssign) string {
	switch a.state {
	case attrSet:
		return "set"
	case attrUnset:
		return "unset"
	case attrValue:
		return a.value
	}
	return "unspecified"
}

// gitCheckAttr runs git check-attr for attribute name on paths in a
// fresh repository holding the given .gitattributes files.
func gitCheckAttr(t interface {
	Helper()
	Fatal(...any)
	Fatalf(string, ...any)
}, files map[string]string, name string, paths []string) map[string]string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gitattr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	run := func(stdin []byte, args ...string) []byte {
		cmd := osexec.Command("git", args...)
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "XDG_CONFIG_HOME="+dir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return out
	}
	run(nil, "init", "-q")
	for d, data := range files {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, ".gitattributes"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := run([]byte(strings.Join(paths, "\x00")+"\x00"), "check-attr", "--stdin", "-z", name)
	f := strings.Split(string(out), "\x00")
	got := map[string]string{}
	for i := 0; i+2 < len(f); i += 3 {
		got[f[i]] = f[i+2]
	}
	return got
}

func haveGit(t testing.TB) {
	if _, err := osexec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
}

func TestAttrLookupTable(t *testing.T) {
	files := map[string]string{
		"": `# comment
*.txt merge=union
*.bin binary
/anchored -merge
sub/*.c merge=cdrv
docs/**/*.md merge=md
**/gen/** -merge
a?c merge=q
[xy]z.go merge=cls
[!a-c]w merge=neg
"quoted name" merge=quoted
\#hash merge=hash
*.txt !merge merge=again
keep.txt merge=first -merge
[attr]mymacro merge=frommacro -diff
*.mac mymacro
*.mac2 -mymacro
*.both merge=explicit binary
*.both2 binary merge=explicit
dir/ merge=dironly
dir2/** merge=dir2
!neg merge=negative
bad$name merge=bad
*.valid merge=ok bad$attr
x.order merge=one
x.order merge=two
/pre** merge=pre
`,
		"sub":        "*.c merge=deeper\n[attr]nested -merge\n*.n nested\n",
		"sub/inner":  "/only.c -merge\n",
		"docs/guide": "*.md merge=guide\n",
	}
	cases := map[string]string{
		"a.txt":              "again",
		"deep/dir/a.txt":     "again",
		"keep.txt":           "unset",
		"x.bin":              "unset",
		"anchored":           "unset",
		"d/anchored":         "unspecified",
		"sub/x.c":            "deeper",
		"sub/inner/x.c":      "deeper",
		"sub/inner/only.c":   "unset",
		"sub/inner/d/only.c": "deeper",
		"x.c":                "unspecified",
		"docs/a.md":          "md",
		"docs/x/y/a.md":      "md",
		"docs/guide/a.md":    "guide",
		"gen/x":              "unset",
		"a/gen/b/c":          "unset",
		"abc":                "q",
		"a/c":                "unspecified",
		"xz.go":              "cls",
		"dw":                 "neg",
		"bw":                 "unspecified",
		"quoted name":        "quoted",
		"#hash":              "hash",
		"f.mac":              "frommacro",
		"f.mac2":             "unspecified",
		"f.both":             "unset",
		"f.both2":            "explicit",
		"dir/f":              "unspecified",
		"dir2/f":             "dir2",
		"dir2/a/b":           "dir2",
		"neg":                "unspecified",
		"bad$name":           "bad",
		"f.valid":            "unspecified",
		"sub/f.n":            "unspecified",
		"x.order":            "two",
		"pre/x/y":            "pre",
		"prefix":             "pre",
	}
	var paths []string
	for p, want := range cases {
		paths = append(paths, p)
		if got := describe(stackFor(files, p).lookup(p, "merge")); got != want {
			t.Errorf("%s: merge=%s, want %s", p, got, want)
		}
	}
	if testing.Short() {
		return
	}
	haveGit(t)
	for p, g := range gitCheckAttr(t, files, "merge", paths) {
		if g != cases[p] {
			t.Errorf("git check-attr says %s: merge=%s, the table says %s", p, g, cases[p])
		}
	}
}

func TestWildmatch(t *testing.T) {
	for _, c := range []struct {
		pat, text string
		pathname  bool
		want      bool
	}{
		{"foo", "foo", true, true},
		{"*", "a/b", true, false},
		{"*", "a/b", false, true},
		{"**", "a/b", true, true},
		{"a/**/b", "a/b", true, true},
		{"a/**/b", "a/x/y/b", true, true},
		{"a/**", "a/x/y", true, true},
		{"**/b", "x/y/b", true, true},
		{"a**b", "a/x/b", true, false},
		{"a/*/b", "a/x/b", true, true},
		{"a/*/b", "a/x/y/b", true, false},
		{"[a-c]", "b", true, true},
		{"[!a-c]", "b", true, false},
		{"[^a-c]", "d", true, true},
		{"[[:digit:]]x", "7x", true, true},
		{"[[:bogus:]]", "a", true, false},
		{`\*`, "*", true, true},
		{`\*`, "a", true, false},
		{"a?c", "a/c", true, false},
		{"a?c", "a/c", false, true},
		{"[", "[", true, false},
		{"*.c", "x.c", true, true},
	} {
		if got := wildmatch(c.pat, c.text, c.pathname); got != c.want {
			t.Errorf("wildmatch(%q, %q, %v) = %v, want %v", c.pat, c.text, c.pathname, got, c.want)
		}
	}
}

// Random patterns over a small alphabet agree with git check-attr.
func TestAttrLookupMatchesGit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs git")
	}
	haveGit(t)
	parts := []string{"a", "b", "ab", "*", "**", "?", "[ab]", "[!a]", "[a-b]", `\a`, ".c", "[[:alpha:]]", "x"}
	dirs := []string{"", "a", "a/b", "b"}
	values := []string{"merge", "-merge", "!merge", "merge=u", "merge=v", "binary", "-binary", "m1", "m2"}
	rapid.Check(t, func(t *rapid.T) {
		files := map[string]string{}
		for _, d := range dirs {
			if !rapid.Bool().Draw(t, "has-"+d) {
				continue
			}
			var b strings.Builder
			if d == "" {
				b.WriteString("[attr]m1 merge=m1 -text\n[attr]m2 m1 -merge\n")
			}
			for n := rapid.IntRange(1, 5).Draw(t, "n-"+d); n > 0; n-- {
				var pat strings.Builder
				if rapid.Bool().Draw(t, "lead") {
					pat.WriteString("/")
				}
				for k := rapid.IntRange(1, 3).Draw(t, "segs"); k > 0; k-- {
					for m := rapid.IntRange(1, 2).Draw(t, "parts"); m > 0; m-- {
						pat.WriteString(rapid.SampledFrom(parts).Draw(t, "part"))
					}
					if k > 1 {
						pat.WriteString("/")
					}
				}
				if rapid.IntRange(0, 9).Draw(t, "trail") == 0 {
					pat.WriteString("/")
				}
				b.WriteString(pat.String())
				for v := rapid.IntRange(1, 2).Draw(t, "nv"); v > 0; v-- {
					b.WriteString(" " + rapid.SampledFrom(values).Draw(t, "value"))
				}
				b.WriteString("\n")
			}
			files[d] = b.String()
		}
		names := []string{"a", "b", "ab", "x.c", "aab", "bb", "a.c", "ba"}
		var paths []string
		for i := rapid.IntRange(1, 8).Draw(t, "npaths"); i > 0; i-- {
			var p []string
			for k := rapid.IntRange(1, 4).Draw(t, "depth"); k > 0; k-- {
				p = append(p, rapid.SampledFrom(names).Draw(t, "name"))
			}
			paths = append(paths, strings.Join(p, "/"))
		}
		git := gitCheckAttr(t, files, "merge", paths)
		for _, p := range paths {
			if got := describe(stackFor(files, p).lookup(p, "merge")); got != git[p] {
				t.Fatalf("%s: merge=%s, git says %s\nfiles: %q", p, got, git[p], files)
			}
		}
	})
}

func FuzzParseAttrFile(f *testing.F) {
	f.Add([]byte("*.txt merge=union\n*.bin binary\n"), "a/b.txt")
	f.Add([]byte("[attr]m merge=x -diff\n/a/**/b m\n"), "a/q/b")
	f.Add([]byte("\"q\\\"uoted\\101\" -merge\r\n!neg merge\n"), "q\"uotedA")
	f.Add([]byte("[[:alpha:]-z]?\\* merge=t\n**/x/ merge\n"), "b/c*")
	f.Fuzz(func(t *testing.T, data []byte, path string) {
		for _, top := range []bool{true, false} {
			rules := parseAttrFile(data, top)
			for _, r := range rules {
				if r.macro != "" && !top {
					t.Fatalf("macro %q accepted in a nested file", r.macro)
				}
				for _, a := range r.attrs {
					if !attrNameValid(a.name) {
						t.Fatalf("invalid name %q accepted", a.name)
					}
				}
			}
			s := attrStack{{dir: "", rules: rules}}
			a := s.lookup(path, "merge")
			if a.name != "merge" {
				t.Fatalf("lookup returned attribute %q", a.name)
			}
			// Reparsing is deterministic.
			if again := parseAttrFile(data, top); len(again) != len(rules) {
				t.Fatalf("reparse gave %d rules, want %d", len(again), len(rules))
			}
		}
	})
}
