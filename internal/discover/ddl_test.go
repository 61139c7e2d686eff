package discover

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readDDL reads the CREATE TABLE statements of a file into Tables, as
// Describe reads them from information_schema (what the tests need of it:
// names, types, NOT NULL, defaults, comments, keys), so Propose can be
// tested on the DDL files as written without a server. The integration
// test (test/integration/init_test.go) checks that the server reads the
// same files into the same proposals.
func readDDL(t *testing.T, file string) map[string]*Table {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, l := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			text.WriteString(lineComment.ReplaceAllString(l, "") + "\n")
		}
	}
	out := map[string]*Table{}
	for _, stmt := range splitTop(text.String(), ';') {
		m := createRe.FindStringSubmatchIndex(stmt)
		if m == nil {
			continue
		}
		name := strings.Trim(stmt[m[2]:m[3]], "`")
		open := m[1] - 1
		body := stmt[open+1 : matching(stmt, open)]
		tb := &Table{Schema: "shop", Name: name, Values: map[string][]string{}}
		for _, def := range splitTop(body, ',') {
			parseDef(t, tb, strings.TrimSpace(def))
		}
		// information_schema: a primary key's columns are NOT NULL.
		for _, c := range tb.primaryKey() {
			for i := range tb.Columns {
				if strings.EqualFold(tb.Columns[i].Name, c) {
					tb.Columns[i].Nullable = false
				}
			}
		}
		out[name] = tb
	}
	if len(out) == 0 {
		t.Fatalf("%s: no CREATE TABLE", file)
	}
	return out
}

var (
	lineComment = regexp.MustCompile(`\s--\s.*$`)
	createRe    = regexp.MustCompile("(?is)CREATE\\s+TABLE\\s+(?:IF\\s+NOT\\s+EXISTS\\s+)?(`?\\w+`?)\\s*\\(")
	keyRe       = regexp.MustCompile("(?i)^(PRIMARY\\s+KEY|UNIQUE\\s+(?:KEY|INDEX)?|KEY|INDEX)\\s*(`?\\w*`?)\\s*\\(([^)]*)\\)")
	typeRe      = regexp.MustCompile(`(?i)^(\w+)(\([^)]*\))?((?:\s+UNSIGNED)?)`)
)

// splitTop splits s at sep outside parentheses and quotes.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, quote, start := 0, byte(0), 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == sep && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// matching is the index of the parenthesis closing the one at open.
func matching(s string, open int) int {
	depth, quote := 0, byte(0)
	for i := open; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return len(s)
}

func parseDef(t *testing.T, tb *Table, def string) {
	if m := keyRe.FindStringSubmatch(def); m != nil {
		kind := strings.ToUpper(strings.Fields(m[1])[0])
		var cols []string
		for _, c := range strings.Split(m[3], ",") {
			cols = append(cols, strings.Trim(strings.TrimSpace(c), "`"))
		}
		idx := Index{Name: strings.Trim(m[2], "`"), Unique: kind != "KEY" && kind != "INDEX", Columns: cols}
		if kind == "PRIMARY" {
			idx.Name = "PRIMARY"
		}
		if idx.Name == "" {
			idx.Name = cols[0]
		}
		tb.Indexes = append(tb.Indexes, idx)
		return
	}
	name, rest, _ := strings.Cut(def, " ")
	c := Column{Name: strings.Trim(name, "`"), Nullable: true}
	rest = strings.TrimSpace(rest)
	m := typeRe.FindStringSubmatch(rest)
	if m == nil {
		t.Fatalf("column %q: no type", def)
	}
	c.DataType = strings.ToLower(m[1])
	c.ColumnType = c.DataType + m[2] + strings.ToLower(m[3])
	if c.DataType == "boolean" || c.DataType == "bool" {
		c.DataType, c.ColumnType = "tinyint", "tinyint(1)"
	}
	opts := rest[len(m[0]):]
	upper := strings.ToUpper(opts)
	c.Nullable = !strings.Contains(upper, "NOT NULL")
	c.AutoIncrement = strings.Contains(upper, "AUTO_INCREMENT")
	if d := regexp.MustCompile(`(?i)\bDEFAULT\s+('(?:[^']|'')*'|\S+)`).FindStringSubmatch(opts); d != nil && !strings.EqualFold(d[1], "NULL") {
		v := d[1]
		if strings.HasPrefix(v, "'") {
			v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
		}
		c.Default = &v
	}
	if cm := regexp.MustCompile(`(?i)\bCOMMENT\s+'((?:[^']|'')*)'`).FindStringSubmatch(opts); cm != nil {
		c.Comment = strings.ReplaceAll(cm[1], "''", "'")
	}
	tb.Columns = append(tb.Columns, c)
	switch {
	case strings.Contains(upper, "PRIMARY KEY"):
		tb.Indexes = append(tb.Indexes, Index{Name: "PRIMARY", Unique: true, Columns: []string{c.Name}})
	case regexp.MustCompile(`\bUNIQUE\b`).MatchString(upper):
		tb.Indexes = append(tb.Indexes, Index{Name: c.Name, Unique: true, Columns: []string{c.Name}})
	}
}
