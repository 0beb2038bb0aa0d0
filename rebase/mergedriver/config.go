package mergedriver

import (
	"bytes"
	"fmt"
	"strings"
)

// configEntry is one "section.subsection.key = value" of a git config
// file. section and key are lower-cased; subsection keeps its case (it is
// case-sensitive in the quoted form). hasValue is false for a bare "key"
// (boolean true).
type configEntry struct {
	section, subsection, key string
	value                    string
	hasValue                 bool
}

// parseConfig parses git config file syntax (git-config(1) "CONFIGURATION
// FILE", config.c's git_parse_source): "[section]", "[section
// \"subsection\"]" and the deprecated "[section.subsection]" headers, keys
// of [A-Za-z0-9-] matched case-insensitively, "#" and ";" comments, quoted
// value parts, the escapes \n \t \b \" \\ and backslash-newline
// continuation. Whitespace outside quotes is trimmed at the ends and each
// inner blank becomes one space, as git does. [include] and [includeIf]
// are not followed.
//
// Hand-written rather than go-git's plumbing/format/config: the driver
// lookup needs three keys, and a 100-line parser that follows config.c
// keeps the module's dependencies as they are.
func parseConfig(data []byte) ([]configEntry, error) {
	p := &configParser{data: bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), line: 1}
	var out []configEntry
	var section, subsection string
	haveSection := false
	comment := false
	for {
		c := p.next()
		if p.eof {
			return out, nil
		}
		switch {
		case c == '\n':
			comment = false
			continue
		case comment, isSpace(c):
			continue
		case c == '#' || c == ';':
			comment = true
			continue
		case c == '[':
			var err error
			if section, subsection, err = p.header(); err != nil {
				return nil, err
			}
			haveSection = true
			continue
		case !isAlpha(c):
			return nil, p.errorf("bad config line")
		}
		if !haveSection {
			return nil, p.errorf("key outside a section")
		}
		e, err := p.entry(c)
		if err != nil {
			return nil, err
		}
		e.section, e.subsection = section, subsection
		out = append(out, e)
	}
}

type configParser struct {
	data []byte
	pos  int
	line int
	eof  bool
}

// next returns the next byte, with "\r\n" read as "\n" and the end of data
// as a final "\n" (setting eof).
func (p *configParser) next() byte {
	if p.pos >= len(p.data) {
		p.eof = true
		return '\n'
	}
	c := p.data[p.pos]
	p.pos++
	if c == '\r' && p.pos < len(p.data) && p.data[p.pos] == '\n' {
		c = '\n'
		p.pos++
	}
	if c == '\n' {
		p.line++
	}
	return c
}

func (p *configParser) errorf(format string, args ...any) error {
	return fmt.Errorf("git config line %d: %s", p.line, fmt.Sprintf(format, args...))
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}
func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isKeyChar(c byte) bool {
	return isAlpha(c) || '0' <= c && c <= '9' || c == '-'
}

// header parses a section header after its "[".
func (p *configParser) header() (section, subsection string, err error) {
	var name []byte
	for {
		c := p.next()
		switch {
		case p.eof:
			return "", "", p.errorf("unterminated section header")
		case (c == ']' || isSpace(c)) && len(name) == 0:
			return "", "", p.errorf("empty section name")
		case c == ']':
			// "[section.sub]": the deprecated form, all lower case.
			s := strings.ToLower(string(name))
			if i := strings.IndexByte(s, '.'); i >= 0 {
				if i == 0 {
					return "", "", p.errorf("empty section name")
				}
				return s[:i], s[i+1:], nil
			}
			return s, "", nil
		case isSpace(c):
			for isSpace(c) {
				if c == '\n' {
					return "", "", p.errorf("incomplete section header")
				}
				c = p.next()
			}
			if c != '"' {
				return "", "", p.errorf(`section header wants [section "subsection"]`)
			}
			var sub []byte
			for {
				c = p.next()
				if c == '\n' {
					return "", "", p.errorf("incomplete section header")
				}
				if c == '"' {
					break
				}
				if c == '\\' {
					if c = p.next(); c == '\n' {
						return "", "", p.errorf("incomplete section header")
					}
				}
				sub = append(sub, c)
			}
			if p.next() != ']' {
				return "", "", p.errorf("section header wants ']'")
			}
			return strings.ToLower(string(name)), string(sub), nil
		case !isKeyChar(c) && c != '.':
			return "", "", p.errorf("bad section name")
		}
		name = append(name, c)
	}
}

// entry parses "key [= value]" whose first byte is c.
func (p *configParser) entry(c byte) (configEntry, error) {
	var e configEntry
	key := []byte{c}
	for {
		c = p.next()
		if p.eof || !isKeyChar(c) {
			break
		}
		key = append(key, c)
	}
	e.key = strings.ToLower(string(key))
	for c == ' ' || c == '\t' {
		c = p.next()
	}
	if c == '\n' {
		return e, nil
	}
	if c != '=' {
		return e, p.errorf("bad config line after key %q", e.key)
	}
	v, err := p.value()
	if err != nil {
		return e, err
	}
	e.value, e.hasValue = v, true
	return e, nil
}

// value parses a value up to its end of line, as config.c's parse_value.
func (p *configParser) value() (string, error) {
	var out []byte
	quote, comment := false, false
	spaces := 0
	for {
		c := p.next()
		if c == '\n' {
			if quote {
				return "", p.errorf("unterminated quoted value")
			}
			return string(out), nil
		}
		if comment {
			continue
		}
		if isSpace(c) && !quote {
			if len(out) > 0 {
				spaces++
			}
			continue
		}
		if !quote && (c == ';' || c == '#') {
			comment = true
			continue
		}
		for ; spaces > 0; spaces-- {
			out = append(out, ' ')
		}
		switch c {
		case '\\':
			c = p.next()
			switch c {
			case '\n':
				continue // a continuation line (or, as in git, the end)
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			case 'n':
				c = '\n'
			case '\\', '"':
			default:
				return "", p.errorf("bad escape \\%c in value", c)
			}
		case '"':
			quote = !quote
			continue
		}
		out = append(out, c)
	}
}
