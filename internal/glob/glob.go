// Package glob is the pattern syntax of a `tables:` entry's schema and
// name: shell-style globs, anchored at both ends, so "tenant_*" matches
// "tenant_1" and not "old_tenant_1".
//
//   - `*` matches any run of characters, none included;
//   - `?` matches exactly one character;
//   - `[set]` matches one character of the set: letters, ranges (`[0-9]`),
//     negated with a leading `!` or `^` (`[!_]`); a `]` right after the
//     opening bracket (or its negation) is a member;
//   - `\` makes the next character literal (`\*`).
//
// Anything else is literal. A string without `*`, `?`, `[` or `\` is no
// pattern at all: it names one table, as before patterns existed.
//
// Glob rather than RE2: a MySQL identifier's characters are letters,
// digits, `_` and `$`, so a glob says everything a tenant naming scheme
// needs, and `.` (a literal in every table name of Debezium's lists,
// easy to forget to escape there) is literal here.
package glob

import (
	"fmt"
	"regexp"
	"strings"
)

// IsPattern reports whether s uses pattern syntax.
func IsPattern(s string) bool { return strings.ContainsAny(s, "*?[\\") }

// Pattern is one compiled glob.
type Pattern struct {
	src string
	re  *regexp.Regexp
}

// Compile parses a glob. fold makes it match without case (a source with
// lower_case_table_names 1 or 2 compares names so).
func Compile(src string, fold bool) (*Pattern, error) {
	var b strings.Builder
	if fold {
		b.WriteString("(?i)")
	}
	b.WriteString("^")
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '*':
			b.WriteString("(?s:.*)")
		case '?':
			b.WriteString("(?s:.)")
		case '\\':
			if i+1 >= len(src) {
				return nil, fmt.Errorf("pattern %q ends with an escaping backslash", src)
			}
			i++
			b.WriteString(regexp.QuoteMeta(src[i : i+1]))
		case '[':
			end, class, err := parseClass(src, i)
			if err != nil {
				return nil, err
			}
			b.WriteString(class)
			i = end
		default:
			b.WriteString(regexp.QuoteMeta(src[i : i+1]))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", src, err)
	}
	return &Pattern{src: src, re: re}, nil
}

// parseClass reads the set that opens at src[i] ('['); end is the index of
// its closing ']'.
func parseClass(src string, i int) (end int, class string, err error) {
	j := i + 1
	var b strings.Builder
	b.WriteString("[")
	if j < len(src) && (src[j] == '!' || src[j] == '^') {
		b.WriteString("^")
		j++
	}
	first := true
	members := 0
	for ; j < len(src); j++ {
		c := src[j]
		if c == ']' && !first {
			if members == 0 {
				return 0, "", fmt.Errorf("pattern %q: empty set at %d", src, i)
			}
			b.WriteString("]")
			return j, b.String(), nil
		}
		first = false
		if c == '\\' {
			if j+1 >= len(src) {
				break
			}
			j++
			c = src[j]
		}
		if c == '-' && members > 0 && j+1 < len(src) && src[j+1] != ']' {
			b.WriteString("-")
			continue
		}
		members++
		if c == '\\' || c == ']' || c == '[' || c == '^' || c == '-' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return 0, "", fmt.Errorf("pattern %q: unclosed [ at %d", src, i)
}

// Match reports whether the whole of s matches.
func (p *Pattern) Match(s string) bool { return p.re.MatchString(s) }

// String is the glob as written.
func (p *Pattern) String() string { return p.src }
