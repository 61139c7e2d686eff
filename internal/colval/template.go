package colval

import (
	"fmt"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/ident"
)

// Template is a string with {column} placeholders, parsed once at start.
type Template struct {
	parts []templatePart
}

type templatePart struct {
	literal string
	column  string // set for a placeholder
}

// ParseTemplate parses "orders.{biz_type}.{status}". A brace that is not a
// well-formed placeholder is an error, so a typo is caught at start-up.
func ParseTemplate(s string) (Template, error) {
	var t Template
	for len(s) > 0 {
		open := strings.IndexByte(s, '{')
		if closing := strings.IndexByte(s, '}'); closing >= 0 && (open < 0 || closing < open) {
			return Template{}, fmt.Errorf("unmatched '}' in template")
		}
		if open < 0 {
			t.parts = append(t.parts, templatePart{literal: s})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, templatePart{literal: s[:open]})
		}
		end := strings.IndexByte(s[open:], '}')
		if end < 0 {
			return Template{}, fmt.Errorf("unclosed '{' in template")
		}
		col := s[open+1 : open+end]
		if err := ident.Check("placeholder", col); err != nil {
			return Template{}, fmt.Errorf("template placeholder {%s}: %w", col, err)
		}
		t.parts = append(t.parts, templatePart{column: col})
		s = s[open+end+1:]
	}
	return t, nil
}

// Empty reports whether the template has no parts at all.
func (t Template) Empty() bool { return len(t.parts) == 0 }

// SingleColumn returns the column when the template is exactly one
// placeholder ("{tag}") and nothing else.
func (t Template) SingleColumn() (string, bool) {
	if len(t.parts) == 1 && t.parts[0].column != "" {
		return t.parts[0].column, true
	}
	return "", false
}

// The table placeholders: {schema} and {table} are the schema and name of
// the row's table, not columns (both are reserved words in MySQL, so a
// column of either name is rare and needs backquotes everywhere). A
// pattern entry's rows are routed per tenant with them
// ("events.{schema}"). The caller's lookup answers them.
const (
	SchemaPlaceholder = "schema"
	TablePlaceholder  = "table"
)

// IsTablePlaceholder reports whether a placeholder names the row's table
// rather than a column.
func IsTablePlaceholder(name string) bool {
	return name == SchemaPlaceholder || name == TablePlaceholder
}

// Columns lists the placeholders' columns ({schema} and {table} are not
// columns: left out).
func (t Template) Columns() []string {
	var cols []string
	for _, p := range t.parts {
		if p.column != "" && !IsTablePlaceholder(p.column) {
			cols = append(cols, p.column)
		}
	}
	return cols
}

// Render fills the placeholders with lookup(column). A placeholder whose
// column is NULL or missing is returned as missing: a route must not silently lose a
// segment.
func (t Template) Render(lookup func(column string) (any, bool)) (out string, missing string) {
	if len(t.parts) == 1 {
		// A literal or a single "{column}": no builder, and a string
		// value is returned as it is.
		p := t.parts[0]
		if p.column == "" {
			return p.literal, ""
		}
		v, ok := lookup(p.column)
		if !ok || v == nil {
			return "", p.column
		}
		return ValueString(v), ""
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.column == "" {
			b.WriteString(p.literal)
			continue
		}
		v, ok := lookup(p.column)
		if !ok || v == nil {
			return "", p.column
		}
		b.WriteString(ValueString(v))
	}
	return b.String(), ""
}
