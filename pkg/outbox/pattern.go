package outbox

import (
	"fmt"
	"regexp"

	"github.com/binlog-relay/binlog-relay/internal/glob"
	"github.com/binlog-relay/binlog-relay/internal/ident"
)

// Patterns: a Table's Schema and Name may be globs (`*`, `?`, `[set]`,
// anchored: "tenant_*"), and the entry then stands for every table that
// matches, each with the entry's mapping and route. The relay finds them
// in the source's catalog at start and in the binlog's DDL while it
// streams; Matched makes one.

// IsPattern reports whether the schema or the name is a pattern.
func (t *Table) IsPattern() bool { return glob.IsPattern(t.Schema) || glob.IsPattern(t.Name) }

// Matched is the table schema.name that the pattern entry t matches: a
// copy of t's mapping and route under that name, with Entry set to t.
func (t *Table) Matched(schema, name string) *Table {
	m := *t
	m.Schema, m.Name, m.Entry = schema, name, t
	return &m
}

// EntryOf is the configured entry a table comes from: its pattern entry,
// or itself.
func EntryOf(t *Table) *Table {
	if t.Entry != nil {
		return t.Entry
	}
	return t
}

var patternChars = regexp.MustCompile(`^[A-Za-z0-9_$*?\[\]!^\\-]+$`)

// checkNameOrPattern checks a schema or table name: an identifier, or a
// glob of identifier characters.
func checkNameOrPattern(field, s string) error {
	if !glob.IsPattern(s) {
		return ident.Check(field, s)
	}
	if !patternChars.MatchString(s) {
		return fmt.Errorf("%s: %q is not a valid identifier or pattern (use A-Z a-z 0-9 _ $, and * ? [set] to match several)", field, s)
	}
	if _, err := glob.Compile(s, false); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// DefaultSchemaHeader is the header a pattern entry's messages carry
// their table's schema in, unless route.schema_header says otherwise.
const DefaultSchemaHeader = "x-relay-schema"

// SchemaHeader is the header that carries the schema of t's rows ("" for
// none): route.schema_header, by default DefaultSchemaHeader for a table
// of a pattern entry.
func (t *Table) SchemaHeader() string {
	switch h := t.Route.SchemaHeader; {
	case h == "-":
		return ""
	case h != "":
		return h
	case t.IsPattern() || t.Entry != nil:
		return DefaultSchemaHeader
	}
	return ""
}
