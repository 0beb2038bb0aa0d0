package workspace

import (
	"path"
	"strings"
)

// ignoreRule is one pattern of a .gitignore or info/exclude file, with
// gitignore(5) semantics: '!' negates, a trailing '/' matches directories
// only, a '/' at the start or in the middle anchors the pattern to the
// file's directory, '*', '?' and '[...]' do not match '/', and "**"
// matches any number of directories.
type ignoreRule struct {
	segs    []string // anchored: the pattern's segments; else one segment
	negate  bool
	dirOnly bool
	anchor  bool
}

// ignoreSet is the rules of one file and the directory they apply to
// ("" for the top: info/exclude and the top .gitignore).
type ignoreSet struct {
	base  string
	rules []ignoreRule
}

// parseIgnore parses a gitignore file. Lines it cannot use (blank,
// comments, a lone "!" or "/") are skipped, as git skips them.
func parseIgnore(data []byte) []ignoreRule {
	var out []ignoreRule
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = trimTrailingSpaces(line)
		var r ignoreRule
		switch {
		case strings.HasPrefix(line, "!"):
			r.negate, line = true, line[1:]
		case strings.HasPrefix(line, `\!`), strings.HasPrefix(line, `\#`):
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly, line = true, strings.TrimRight(line, "/")
		}
		if line == "" {
			continue
		}
		if strings.Contains(line, "/") {
			r.anchor = true
			line = strings.TrimPrefix(line, "/")
			if line == "" {
				continue
			}
			r.segs = strings.Split(line, "/")
			// "a/**" matches what is inside a, not a itself.
			if n := len(r.segs); r.segs[n-1] == "**" {
				r.segs = append(r.segs[:n-1], "*", "**")
			}
		} else {
			r.segs = []string{line}
		}
		for i, s := range r.segs {
			if s != "**" {
				r.segs[i] = globOf(s)
			}
		}
		out = append(out, r)
	}
	return out
}

// trimTrailingSpaces drops trailing spaces not escaped by a backslash.
func trimTrailingSpaces(s string) string {
	for strings.HasSuffix(s, " ") && !strings.HasSuffix(s, `\ `) {
		s = s[:len(s)-1]
	}
	return s
}

// globOf turns one gitignore segment into a path.Match pattern: "[!" is
// git's spelling of a negated class, and "**" inside a segment is a plain
// "*" there.
func globOf(s string) string {
	s = strings.ReplaceAll(s, "[!", "[^")
	for strings.Contains(s, "**") {
		s = strings.ReplaceAll(s, "**", "*")
	}
	return s
}

// matchSegs matches pattern segments against path segments, "**"
// standing for any number of them.
func matchSegs(pat, p []string) bool {
	if len(pat) == 0 {
		return len(p) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(p); i++ {
			if matchSegs(pat[1:], p[i:]) {
				return true
			}
		}
		return false
	}
	if len(p) == 0 {
		return false
	}
	if ok, err := path.Match(pat[0], p[0]); err != nil || !ok {
		return false
	}
	return matchSegs(pat[1:], p[1:])
}

// matches reports whether r matches rel (relative to the rule's base).
func (r ignoreRule) matches(rel string, isDir bool) bool {
	if r.dirOnly && !isDir {
		return false
	}
	if !r.anchor {
		ok, err := path.Match(r.segs[0], path.Base(rel))
		return err == nil && ok
	}
	return matchSegs(r.segs, strings.Split(rel, "/"))
}

// ignored reports whether p (relative to the top, no leading '/') is
// excluded by the rule sets in effect, sets ordered from the lowest
// precedence (info/exclude, the top .gitignore) to the highest (the
// deepest directory's). The last matching rule decides.
func ignored(sets []ignoreSet, p string, isDir bool) bool {
	for i := len(sets) - 1; i >= 0; i-- {
		s := sets[i]
		rel := p
		if s.base != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(p, s.base+"/"); !ok {
				continue
			}
		}
		for j := len(s.rules) - 1; j >= 0; j-- {
			if s.rules[j].matches(rel, isDir) {
				return !s.rules[j].negate
			}
		}
	}
	return false
}
