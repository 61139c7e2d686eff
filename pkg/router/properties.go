package router

import (
	"strconv"
	"strings"
)

// parseProperties reads java.util.Properties text (Properties.store), the format of
// Debezium's tracingspancontext column:
//
//	#Tue Feb 04 10:00:00 UTC 2025
//	traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
//	tracestate=rojo\=00f067aa0ba902b7
//
// The rules are java.util.Properties.load's: lines starting (after blanks) with # or !
// are comments; a key ends at the first unescaped '=', ':' or blank, and blanks then
// one '=' or ':' then blanks separate it from the value; a backslash escapes the next
// character (\t \n \r \f, \uXXXX, anything else stands for itself), and one at the end
// of a line joins the next line, whose leading blanks are dropped.
// https://docs.oracle.com/en/java/javase/21/docs/api/java.base/java/util/Properties.html#load(java.io.Reader)
func parseProperties(text string) map[string]string {
	out := map[string]string{}
	for _, line := range logicalLines(text) {
		key, rest := splitKey(line)
		out[unescape(key)] = unescape(rest)
	}
	return out
}

// logicalLines splits text into logical lines: comments and blank lines dropped,
// continued lines joined.
func logicalLines(text string) []string {
	var out []string
	var cur strings.Builder
	continuing := false
	for _, raw := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == '\r' }) {
		line := strings.TrimLeft(raw, " \t\f")
		if !continuing && (line == "" || line[0] == '#' || line[0] == '!') {
			continue
		}
		// An odd number of trailing backslashes continues the line.
		n := len(line) - len(strings.TrimRight(line, `\`))
		continuing = n%2 == 1
		if continuing {
			line = line[:len(line)-1]
		}
		cur.WriteString(line)
		if !continuing {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// splitKey splits a logical line into its (still escaped) key and value.
func splitKey(line string) (key, value string) {
	i := 0
	for i < len(line) {
		c := line[i]
		if c == '\\' {
			i += 2
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			break
		}
		i++
	}
	if i > len(line) {
		i = len(line)
	}
	key, rest := line[:i], line[i:]
	rest = strings.TrimLeft(rest, " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	return key, rest
}

// unescape resolves the backslash escapes of a key or value.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+4 < len(s) {
				if r, err := strconv.ParseUint(s[i+1:i+5], 16, 16); err == nil {
					b.WriteRune(rune(r))
					i += 4
					continue
				}
			}
			b.WriteByte('u')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
