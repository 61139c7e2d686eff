package tablematch

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Catalog is what the configured entries stand for on a source at one
// moment: the tables to read, and for each pattern entry the tables it
// matched.
type Catalog struct {
	// Tables are the outbox tables: every entry naming one table (whether
	// or not it exists: start-up checks say so), then the tables each
	// pattern entry matched, by entry, in name order.
	Tables []*outbox.Table
	// Matched lists, per pattern entry (its index in tables:), the tables
	// it matched.
	Matched map[int][]*outbox.Table
}

// catalogQuery lists the base tables of the applications' schemas: one
// statement, whatever the number of schemas (a view or a system table is
// never an outbox table).
const catalogQuery = "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES " +
	"WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')"

// Read lists the tables the entries stand for on db (the source). Without
// a pattern entry it asks nothing: the entries are the tables. A table two
// entries match is an error naming both.
func (m *Matcher) Read(ctx context.Context, db *sql.DB) (*Catalog, error) {
	c := &Catalog{Matched: map[int][]*outbox.Table{}}
	for _, e := range m.entries {
		if !e.IsPattern() {
			c.Tables = append(c.Tables, e)
		}
	}
	if !m.HasPatterns() {
		return c, nil
	}
	type found struct {
		entry int
		t     *outbox.Table
	}
	var all []found
	err := sqlrows.Each(ctx, db, catalogQuery, nil, func(rows *sql.Rows, _ []*sql.ColumnType) error {
		var schema, name string
		if err := rows.Scan(&schema, &name); err != nil {
			return err
		}
		i, err := m.Entry(schema, name)
		if err != nil {
			return err
		}
		if i >= 0 && m.entries[i].IsPattern() {
			all = append(all, found{i, m.entries[i].Matched(schema, name)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the tables the patterns under tables: match: %w", err)
	}
	sort.Slice(all, func(a, b int) bool {
		if all[a].entry != all[b].entry {
			return all[a].entry < all[b].entry
		}
		return all[a].t.FullName() < all[b].t.FullName()
	})
	for _, f := range all {
		c.Tables = append(c.Tables, f.t)
		c.Matched[f.entry] = append(c.Matched[f.entry], f.t)
	}
	return c, nil
}
