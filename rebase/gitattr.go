package rebase

import (
	"bytes"
	"strings"
)

// This file parses .gitattributes files and answers attribute lookups with
// git's meaning (gitattributes(5), git 2.39's attr.c, dir.c and
// wildmatch.c). It is pure: reading the files from trees is in attrs.go.

// attrState is the state of one attribute for a path.
type attrState uint8

const (
	attrUnspecified attrState = iota // no rule said anything (or "!attr")
	attrSet                          // "attr"
	attrUnset                        // "-attr"
	attrValue                        // "attr=value"
)

// attrAssign is one attribute of a rule: "name", "-name", "!name" or
// "name=value".
type attrAssign struct {
	name  string
	state attrState
	value string
}

// Pattern flags, as dir.c's PATTERN_FLAG_*.
const (
	patNoDir     = 1 << iota // no slash: matches the basename at any depth
	patEndsWith              // "*literal"
	patMustBeDir             // trailing slash: never matches a file
)

// attrRule is one line of a .gitattributes file: a pattern and its
// attributes, or (macro != "") a macro definition "[attr]macro attrs".
type attrRule struct {
	pattern string
	flags   int
	nowild  int // length of pattern's leading part without wildcards
	macro   string
	attrs   []attrAssign
}

// Limits git puts on attribute files (attr.c ATTR_MAX_LINE_LENGTH,
// ATTR_MAX_FILE_SIZE): longer lines and larger files are ignored.
const (
	attrMaxLine = 2048
	attrMaxFile = 100 << 20
)

const attrMacroPrefix = "[attr]"

// attrBlank is attr.c's "blank": the separators of a line.
const attrBlank = " \t\r\n"

// builtinMacros are git's built-in macro definitions, of the lowest
// precedence: a top-level file may redefine them.
var builtinMacros = map[string][]attrAssign{
	"binary": {{name: "diff", state: attrUnset}, {name: "merge", state: attrUnset}, {name: "text", state: attrUnset}},
}

// parseAttrFile parses the content of a .gitattributes file. top says
// whether the file is a top-level one, where "[attr]" macro definitions are
// allowed; elsewhere git ignores them (with a warning). Lines git would
// reject (negative patterns, invalid attribute names, over-long lines) are
// skipped, as git does; parsing never fails.
func parseAttrFile(data []byte, top bool) []attrRule {
	if len(data) > attrMaxFile {
		return nil
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var rules []attrRule
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		// git reads lines with strbuf_getline (dropping "\n" or "\r\n")
		// and handles them as C strings, so a NUL ends the line.
		line = bytes.TrimSuffix(line, []byte("\r"))
		if i := bytes.IndexByte(line, 0); i >= 0 {
			line = line[:i]
		}
		if r, ok := parseAttrLine(string(line), top); ok {
			rules = append(rules, r)
		}
	}
	return rules
}

// parseAttrLine parses one line as attr.c's parse_attr_line.
func parseAttrLine(line string, top bool) (attrRule, bool) {
	cp := strings.TrimLeft(line, attrBlank)
	if cp == "" || cp[0] == '#' {
		return attrRule{}, false
	}
	if len(line) >= attrMaxLine {
		return attrRule{}, false
	}
	var name, states string
	quoted := false
	if cp[0] == '"' {
		if u, rest, ok := unquoteC(cp); ok {
			// git goes on with the pattern as a C string.
			if i := strings.IndexByte(u, 0); i >= 0 {
				u = u[:i]
			}
			name, states, quoted = u, rest, true
		}
	}
	if !quoted {
		n := strings.IndexAny(cp, attrBlank)
		if n < 0 {
			n = len(cp)
		}
		name, states = cp[:n], cp[n:]
	}
	var r attrRule
	if len(name) > len(attrMacroPrefix) && strings.HasPrefix(name, attrMacroPrefix) {
		if !top {
			return attrRule{}, false
		}
		m := strings.TrimLeft(name[len(attrMacroPrefix):], attrBlank)
		if n := strings.IndexAny(m, attrBlank); n >= 0 {
			m = m[:n]
		}
		if !attrNameValid(m) {
			return attrRule{}, false
		}
		r.macro = m
	} else {
		if strings.HasPrefix(name, "!") {
			// Negative patterns are forbidden in attribute files.
			return attrRule{}, false
		}
		r.pattern, r.flags, r.nowild = parsePattern(name)
	}
	states = strings.TrimLeft(states, attrBlank)
	for states != "" {
		n := strings.IndexAny(states, attrBlank)
		if n < 0 {
			n = len(states)
		}
		a, ok := parseAttr(states[:n])
		if !ok {
			return attrRule{}, false
		}
		r.attrs = append(r.attrs, a)
		states = strings.TrimLeft(states[n:], attrBlank)
	}
	return r, true
}

// parseAttr parses one attribute token as attr.c's parse_attr.
func parseAttr(tok string) (attrAssign, bool) {
	var a attrAssign
	name := tok
	eq := strings.IndexByte(tok, '=')
	if eq >= 0 {
		name = tok[:eq]
	}
	switch {
	case strings.HasPrefix(name, "-"):
		a.state, name = attrUnset, name[1:]
	case strings.HasPrefix(name, "!"):
		a.state, name = attrUnspecified, name[1:]
	case eq >= 0:
		a.state, a.value = attrValue, tok[eq+1:]
	default:
		a.state = attrSet
	}
	if !attrNameValid(name) {
		return attrAssign{}, false
	}
	a.name = name
	return a, true
}

// attrNameValid reports whether s is a valid attribute name: non-empty,
// of [-A-Za-z0-9_.], not starting with '-'.
func attrNameValid(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '-' || c == '.' || c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// unquoteC undoes git's C-style quoting of s, which starts with '"'. It
// returns the unquoted text and what follows the closing quote; ok is false
// for a malformed quote (git then takes the pattern literally).
func unquoteC(s string) (out, rest string, ok bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return b.String(), s[i+1:], true
		case '\\':
			i++
			if i >= len(s) {
				return "", "", false
			}
			c = s[i]
			switch c {
			case '"', '\\':
			case 'a':
				c = '\a'
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'v':
				c = '\v'
			case '0', '1', '2', '3':
				if i+2 >= len(s) || s[i+1] < '0' || s[i+1] > '7' || s[i+2] < '0' || s[i+2] > '7' {
					return "", "", false
				}
				c = (c-'0')<<6 | (s[i+1]-'0')<<3 | (s[i+2] - '0')
				i += 2
			default:
				return "", "", false
			}
		}
		b.WriteByte(c)
	}
	return "", "", false
}

// parsePattern is dir.c's parse_path_pattern for a non-negated pattern.
func parsePattern(p string) (pattern string, flags, nowild int) {
	if strings.HasSuffix(p, "/") {
		p = p[:len(p)-1]
		flags |= patMustBeDir
	}
	if !strings.Contains(p, "/") {
		flags |= patNoDir
	}
	nowild = len(p)
	if i := strings.IndexAny(p, `*?[\`); i >= 0 {
		nowild = i
	}
	if strings.HasPrefix(p, "*") && !strings.ContainsAny(p[1:], `*?[\`) {
		flags |= patEndsWith
	}
	return p, flags, nowild
}

// matches reports whether rule r, read from the .gitattributes file of
// directory base ("" for the top), matches the file path (relative to the
// top, as base is). Only files are looked up, so directory-only patterns
// never match.
func (r *attrRule) matches(path, base string) bool {
	if r.flags&patMustBeDir != 0 {
		return false
	}
	if r.flags&patNoDir != 0 {
		name := path[strings.LastIndexByte(path, '/')+1:]
		switch {
		case r.nowild == len(r.pattern):
			return name == r.pattern
		case r.flags&patEndsWith != 0:
			return strings.HasSuffix(name, r.pattern[1:])
		}
		return wildmatch(r.pattern, name, false)
	}
	// match_pathname: the pattern is relative to base.
	pattern, prefix := r.pattern, r.nowild
	if strings.HasPrefix(pattern, "/") {
		pattern, prefix = pattern[1:], prefix-1
	}
	name := path
	if base != "" {
		if !strings.HasPrefix(path, base+"/") {
			return false
		}
		name = path[len(base)+1:]
	}
	if prefix > 0 {
		// git compares the literal prefix and wildmatches only the rest,
		// which is not the same as matching the whole: "a**" then
		// starts with "**" and so matches across slashes.
		if prefix > len(name) || name[:prefix] != pattern[:prefix] {
			return false
		}
		pattern, name = pattern[prefix:], name[prefix:]
		if pattern == "" && name == "" {
			return true
		}
	}
	return wildmatch(pattern, name, true)
}

// wildmatch results, as wildmatch.c's.
const (
	wmMatch = iota
	wmNoMatch
	wmAbortAll
	wmAbortToStarStar
)

// wildmatch is git's wildmatch() (wildmatch.c), case-sensitive; pathname is
// WM_PATHNAME: '*' and '?' do not match '/', "**" between slashes does.
func wildmatch(pattern, text string, pathname bool) bool {
	return dowild(pattern, 0, text, 0, pathname) == wmMatch
}

func isGlobSpecial(c byte) bool { return c == '*' || c == '?' || c == '[' || c == '\\' }

// at returns s[i], or 0 past the end (C's terminating NUL).
func at(s string, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

func dowild(pat string, p int, text string, t int, pathname bool) int {
	for ; at(pat, p) != 0; t, p = t+1, p+1 {
		pch := pat[p]
		tch := at(text, t)
		if tch == 0 && pch != '*' {
			return wmAbortAll
		}
		switch pch {
		case '\\':
			// Literal match with the following character.
			p++
			pch = at(pat, p)
			if tch != pch {
				return wmNoMatch
			}
			continue
		case '?':
			if pathname && tch == '/' {
				return wmNoMatch
			}
			continue
		case '*':
			var matchSlash bool
			p++
			if at(pat, p) == '*' {
				prev := p - 2
				for p++; at(pat, p) == '*'; p++ {
				}
				switch {
				case !pathname:
					matchSlash = true
				case (prev < 0 || pat[prev] == '/') &&
					(at(pat, p) == 0 || at(pat, p) == '/' || at(pat, p) == '\\' && at(pat, p+1) == '/'):
					if at(pat, p) == '/' && dowild(pat, p+1, text, t, pathname) == wmMatch {
						return wmMatch
					}
					matchSlash = true
				default:
					matchSlash = false
				}
			} else {
				matchSlash = !pathname
			}
			if at(pat, p) == 0 {
				// Trailing "**" matches everything, trailing "*" only
				// if there are no more slashes.
				if !matchSlash && strings.IndexByte(text[t:], '/') >= 0 {
					return wmNoMatch
				}
				return wmMatch
			} else if !matchSlash && pat[p] == '/' {
				// One asterisk followed by a slash matches the next
				// directory.
				i := strings.IndexByte(text[t:], '/')
				if i < 0 {
					return wmNoMatch
				}
				t += i
				// The slash is consumed by the loop.
				break
			}
			for {
				if tch == 0 {
					break
				}
				// Advance faster when the asterisk is followed by a
				// literal.
				if !isGlobSpecial(pat[p]) {
					pch = pat[p]
					for {
						tch = at(text, t)
						if tch == 0 || !matchSlash && tch == '/' || tch == pch {
							break
						}
						t++
					}
					if tch != pch {
						return wmNoMatch
					}
				}
				if m := dowild(pat, p, text, t, pathname); m != wmNoMatch {
					if !matchSlash || m != wmAbortToStarStar {
						return m
					}
				} else if !matchSlash && tch == '/' {
					return wmAbortToStarStar
				}
				t++
				tch = at(text, t)
			}
			return wmAbortAll
		case '[':
			p++
			pch = at(pat, p)
			if pch == '^' {
				pch = '!'
			}
			negated := pch == '!'
			if negated {
				p++
				pch = at(pat, p)
			}
			var prev byte
			matched := false
			for {
				if pch == 0 {
					return wmAbortAll
				}
				switch {
				case pch == '\\':
					p++
					pch = at(pat, p)
					if pch == 0 {
						return wmAbortAll
					}
					if tch == pch {
						matched = true
					}
				case pch == '-' && prev != 0 && at(pat, p+1) != 0 && at(pat, p+1) != ']':
					p++
					pch = pat[p]
					if pch == '\\' {
						p++
						pch = at(pat, p)
						if pch == 0 {
							return wmAbortAll
						}
					}
					if tch <= pch && tch >= prev {
						matched = true
					}
					pch = 0 // makes prev 0
				case pch == '[' && at(pat, p+1) == ':':
					p += 2
					s := p
					for at(pat, p) != 0 && pat[p] != ']' {
						p++
					}
					if at(pat, p) == 0 {
						return wmAbortAll
					}
					pch = ']'
					i := p - s - 1
					if i < 0 || pat[p-1] != ':' {
						// No ":]": a plain '[' in the set.
						p = s - 2
						pch = '['
						if tch == pch {
							matched = true
						}
						break
					}
					ok, valid := charClass(pat[s:s+i], tch)
					if !valid {
						return wmAbortAll
					}
					if ok {
						matched = true
					}
					pch = 0
				default:
					if tch == pch {
						matched = true
					}
				}
				prev = pch
				p++
				pch = at(pat, p)
				if pch == ']' {
					break
				}
			}
			if matched == negated || pathname && tch == '/' {
				return wmNoMatch
			}
			continue
		default:
			if tch != pch {
				return wmNoMatch
			}
			continue
		}
	}
	if t < len(text) {
		return wmNoMatch
	}
	return wmMatch
}

// charClass reports whether c is in the POSIX class name; valid is false
// for an unknown class.
func charClass(name string, c byte) (in, valid bool) {
	upper := 'A' <= c && c <= 'Z'
	lower := 'a' <= c && c <= 'z'
	digit := '0' <= c && c <= '9'
	alpha := upper || lower
	graph := c > ' ' && c < 0x7f
	switch name {
	case "alnum":
		return alpha || digit, true
	case "alpha":
		return alpha, true
	case "blank":
		return c == ' ' || c == '\t', true
	case "cntrl":
		return c < ' ' || c == 0x7f, true
	case "digit":
		return digit, true
	case "graph":
		return graph, true
	case "lower":
		return lower, true
	case "print":
		return graph || c == ' ', true
	case "punct":
		return graph && !alpha && !digit, true
	case "space":
		return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r', true
	case "upper":
		return upper, true
	case "xdigit":
		return digit || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F', true
	}
	return false, false
}

// attrFile is the parsed .gitattributes of one directory.
type attrFile struct {
	dir   string // relative to the top, "" for the top itself
	rules []attrRule
}

// attrStack is the attribute files that apply to the files of one
// directory: the top-level file first, then one per subdirectory down to
// the directory. Directories without a file may be left out.
type attrStack []attrFile

// macros returns the macro definitions in effect: git's built-in ones,
// overridden by the top-level file's (a later definition wins).
func (s attrStack) macros() map[string][]attrAssign {
	m := make(map[string][]attrAssign, len(builtinMacros))
	for k, v := range builtinMacros {
		m[k] = v
	}
	if len(s) > 0 && s[0].dir == "" {
		for _, r := range s[0].rules {
			if r.macro != "" {
				m[r.macro] = r.attrs
			}
		}
	}
	return m
}

// lookup returns the state of attribute name for path (relative to the top
// of the stack), as git's check-attr: the deepest file first and, within a
// file, the last matching line first decide; an attribute set by a macro
// counts where the macro is set.
func (s attrStack) lookup(path, name string) attrAssign {
	macros := s.macros()
	done := map[string]attrAssign{}
	var fill func(attrs []attrAssign)
	fill = func(attrs []attrAssign) {
		for i := len(attrs) - 1; i >= 0; i-- {
			a := attrs[i]
			if _, ok := done[a.name]; ok {
				continue
			}
			done[a.name] = a
			if m, ok := macros[a.name]; ok && a.state == attrSet {
				fill(m)
			}
		}
	}
	for i := len(s) - 1; i >= 0; i-- {
		f := &s[i]
		for j := len(f.rules) - 1; j >= 0; j-- {
			r := &f.rules[j]
			if r.macro == "" && r.matches(path, f.dir) {
				fill(r.attrs)
				if a, ok := done[name]; ok {
					return a
				}
			}
		}
	}
	return attrAssign{name: name}
}
