// Package tablematch decides which configured `tables:` entry a table of
// the source belongs to. An entry names one table, or holds a pattern in
// its schema, its name or both (internal/glob); a pattern entry stands for
// every table that matches it. Names are compared as the source compares
// them (lower_case_table_names, pkg/binlog names.go).
//
// Two entries that match one table are an error naming both: the relay
// would not know which mapping and route to use, and choosing one
// silently (the first, the most specific) would route a tenant's rows by
// an entry its operator did not mean.
//
// The catalog (catalog.go) lists the tables that match at start; the
// binlog reader asks the Matcher about each table it meets afterwards.
package tablematch

import (
	"fmt"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/glob"
	"github.com/binlog-relay/binlog-relay/internal/tablerename"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// systemSchemas are never matched by a pattern: a `*` schema means the
// applications' schemas, not the server's own.
var systemSchemas = map[string]bool{"mysql": true, "information_schema": true, "performance_schema": true, "sys": true}

// Matcher finds the entry of a table.
type Matcher struct {
	lctn     int
	entries  []*outbox.Table
	exact    map[tablerename.Name]int // entries naming one table, by their key
	patterns []pattern
}

type pattern struct {
	index        int
	schema, name *glob.Pattern
}

// New builds the matcher of the configured entries (validated), in the
// order configured (tables[i] is entries[i]); lctn is the source's
// lower_case_table_names.
func New(entries []*outbox.Table, lctn int) (*Matcher, error) {
	m := &Matcher{lctn: lctn, entries: entries, exact: map[tablerename.Name]int{}}
	fold := lctn != 0
	for i, t := range entries {
		if !t.IsPattern() {
			k := m.Key(t.Schema, t.Name)
			if j, dup := m.exact[k]; dup {
				return nil, fmt.Errorf("tables[%d] and tables[%d] are one table (%s) on a source with lower_case_table_names=%d",
					j, i, t.FullName(), lctn)
			}
			m.exact[k] = i
			continue
		}
		s, err := glob.Compile(t.Schema, fold)
		if err != nil {
			return nil, fmt.Errorf("tables[%d].schema: %w", i, err)
		}
		n, err := glob.Compile(t.Name, fold)
		if err != nil {
			return nil, fmt.Errorf("tables[%d].name: %w", i, err)
		}
		m.patterns = append(m.patterns, pattern{index: i, schema: s, name: n})
	}
	return m, nil
}

// HasPatterns reports whether any entry is a pattern.
func (m *Matcher) HasPatterns() bool { return len(m.patterns) > 0 }

// Entries are the configured entries.
func (m *Matcher) Entries() []*outbox.Table { return m.entries }

// Key is schema.name as the source tells tables apart.
func (m *Matcher) Key(schema, name string) tablerename.Name {
	if m.lctn != 0 {
		return tablerename.Name{Schema: strings.ToLower(schema), Table: strings.ToLower(name)}
	}
	return tablerename.Name{Schema: schema, Table: name}
}

// CollisionError is a table that two entries match.
type CollisionError struct {
	Schema, Name string
	First        int
	FirstEntry   string
	Second       int
	SecondEntry  string
}

func (e *CollisionError) Error() string {
	return fmt.Sprintf("table %s.%s is matched by tables[%d] (%s) and by tables[%d] (%s): an outbox table must belong to one entry; narrow a pattern",
		e.Schema, e.Name, e.First, e.FirstEntry, e.Second, e.SecondEntry)
}

// Entry is the index of the entry the table belongs to, -1 for none; a
// table that two entries match is a *CollisionError.
func (m *Matcher) Entry(schema, name string) (int, error) {
	found := -1
	if i, ok := m.exact[m.Key(schema, name)]; ok {
		found = i
	}
	if len(m.patterns) == 0 || systemSchemas[strings.ToLower(schema)] {
		return found, nil
	}
	for _, p := range m.patterns {
		if !p.schema.Match(schema) || !p.name.Match(name) {
			continue
		}
		if found >= 0 {
			a, b := min(found, p.index), max(found, p.index)
			return -1, &CollisionError{Schema: schema, Name: name, First: a, FirstEntry: m.entries[a].FullName(),
				Second: b, SecondEntry: m.entries[b].FullName()}
		}
		found = p.index
	}
	return found, nil
}

// Table is the outbox table the source calls schema.name: the entry
// itself when it names that table, a table Matched by a pattern entry, or
// nil when no entry matches.
func (m *Matcher) Table(schema, name string) (*outbox.Table, error) {
	i, err := m.Entry(schema, name)
	if err != nil || i < 0 {
		return nil, err
	}
	if e := m.entries[i]; e.IsPattern() {
		return e.Matched(schema, name), nil
	}
	return m.entries[i], nil
}
